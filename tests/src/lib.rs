//! Helpers for the end-to-end tests: the local AWS stack (started and stopped around a
//! test), clients configured for it, DataFusion's sqllogictest suite run through the
//! engine ([`slt`]), the job store's specification ([`conformance`]), and what cargo
//! resolves for the workspace ([`cargo_tree`]).

pub mod conformance;
pub mod slt;
pub mod stack;
pub mod workload;

/// `cargo tree --locked --offline <args>` over this workspace (what cargo resolves for a
/// selection of packages: crates, features); panics with cargo's message if it fails.
pub fn cargo_tree(args: &[&str]) -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let out = std::process::Command::new(cargo)
        .current_dir(root)
        .args(["tree", "--locked", "--offline"])
        .args(args)
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}
