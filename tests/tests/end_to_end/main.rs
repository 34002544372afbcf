//! The workspace's end-to-end suite as one test binary: each module was a test file of its
//! own. One binary links DataFusion once instead of thirteen times (each link is ~300 MB of
//! debug code), which keeps a clean build's disk and link time down. Run one part with a
//! filter: `cargo test --workspace --test end_to_end slt::`. The two long suites on the
//! local stack, `chaos` and `store_on_the_stack`, stay binaries of their own so that
//! `scripts/test.sh` can run them beside this one.

mod aws_local;
mod delta_tables;
mod docs;
mod duckdb_oracle;
mod glue_tables;
mod iam_contract;
mod iceberg_tables;
mod layering;
mod settings_doc;
mod slt;
mod store_conformance;
mod terraform_contract;
mod terraform_plan;
mod test_hooks;
mod tpch_embedded;
