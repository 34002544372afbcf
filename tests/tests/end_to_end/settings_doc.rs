//! `docs/settings.md` lists every engine setting as `core/src/config.rs` declares it: the
//! table between its markers is produced from `lambdafusion::config::SETTINGS` and must be
//! what is committed. After changing a setting, `UPDATE_DOCS=1 cargo test --workspace
//! --test end_to_end settings_doc::` rewrites it.

use std::path::Path;

use lambdafusion::config::{Setting, Unit, SETTINGS};

const BEGIN: &str = "<!-- settings:begin (generated from core/src/config.rs) -->";
const END: &str = "<!-- settings:end -->";

/// A value in its unit, as a reader wants it (`134217728 (128 MiB)`, `900 s`).
fn shown(value: &str, unit: Unit) -> String {
    let Ok(n) = value.parse::<u64>() else {
        return format!("`{value}`");
    };
    match unit {
        Unit::Bytes if n >= 1024 * 1024 && n % (1024 * 1024) == 0 => {
            format!("{} MiB", n / (1024 * 1024))
        }
        Unit::Bytes if n >= 1024 && n % 1024 == 0 => format!("{} KiB", n / 1024),
        Unit::Bytes => format!("{n} bytes"),
        Unit::Seconds => format!("{n} s"),
        Unit::Days => format!("{n} days"),
        Unit::Millis => format!("{n} ms"),
        Unit::Dollars => format!("${n}"),
        Unit::Count | Unit::Flag => n.to_string(),
    }
}

/// The doc comment as one line of Markdown (rustdoc links become code).
fn prose(doc: &str) -> String {
    let text = doc.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut out = String::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("[`") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        match after.find("`]") {
            Some(end) => {
                let name = after[1..end].trim_start_matches("crate::");
                out.push_str(&format!("`{name}`"));
                rest = &after[end + 2..];
            }
            None => {
                out.push_str(&rest[at..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out.replace('|', "\\|")
}

fn unit_name(setting: &Setting) -> &'static str {
    match setting.unit {
        Unit::Bytes => "bytes",
        Unit::Count => "count",
        Unit::Seconds => "seconds",
        Unit::Days => "days",
        Unit::Millis => "milliseconds",
        Unit::Flag => "true/false",
        Unit::Dollars => "US dollars",
    }
}

fn table() -> String {
    let mut out = String::from(
        "| setting | default | unit | environment (AWS) | Terraform | what it does |\n\
         | --- | --- | --- | --- | --- | --- |\n",
    );
    for s in SETTINGS {
        let code = |v: Option<&str>| v.map_or("—".to_string(), |v| format!("`{v}`"));
        let (lo, hi) = s.bounds;
        let bounds = match (lo, hi) {
            (0, u64::MAX) => String::new(),
            (lo, u64::MAX) => format!(" (at least {lo})"),
            (lo, hi) if hi == u32::MAX as u64 => format!(" (at least {lo})"),
            (lo, hi) => format!(" ({lo} to {hi})"),
        };
        out.push_str(&format!(
            "| `{}` | {} | {}{} | {} | {} | {} |\n",
            s.name,
            shown(&s.default_value(), s.unit),
            unit_name(s),
            bounds,
            code(s.env),
            code(s.terraform),
            prose(s.doc),
        ));
    }
    out
}

#[test]
fn the_settings_page_is_the_declared_table() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/settings.md");
    let page = std::fs::read_to_string(&path).expect("docs/settings.md exists");
    let (Some(begin), Some(end)) = (page.find(BEGIN), page.find(END)) else {
        panic!("docs/settings.md lacks the markers {BEGIN} ... {END}");
    };
    let expected = format!(
        "{}\n{}{}",
        &page[..begin + BEGIN.len()],
        table(),
        &page[end..]
    );
    if std::env::var_os("UPDATE_DOCS").is_some() {
        std::fs::write(&path, &expected).unwrap();
        return;
    }
    assert!(
        page == expected,
        "docs/settings.md is not the table core/src/config.rs declares; run \
         UPDATE_DOCS=1 cargo test --workspace --test end_to_end settings_doc::\n\nexpected:\n{}",
        table()
    );
}

#[test]
fn units_are_shown_as_readers_write_them() {
    assert_eq!(shown("134217728", Unit::Bytes), "128 MiB");
    assert_eq!(shown("262144", Unit::Bytes), "256 KiB");
    assert_eq!(shown("900", Unit::Seconds), "900 s");
    assert_eq!(shown("none", Unit::Bytes), "`none`");
    assert_eq!(
        prose("Merged ([`crate::plan::adaptive`]) | more\n  lines"),
        "Merged (`plan::adaptive`) \\| more lines"
    );
}
