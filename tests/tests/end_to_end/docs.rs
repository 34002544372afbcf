//! The documentation's links hold: every relative link in the README, `docs/` and the
//! other guides names a file that exists and, with `#anchor`, a heading in it; every page
//! of `docs/` is reachable from the README; nothing cites files that are not in the
//! repository (`DESIGN.md` lived outside it).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The Markdown files users read: the README, every page of `docs/`, and the guides
/// that live beside their code.
fn pages() -> Vec<PathBuf> {
    let root = root();
    let mut pages: Vec<PathBuf> = [
        "README.md",
        "local/README.md",
        "infra/terraform/README.md",
        "clients/python/README.md",
    ]
    .iter()
    .map(|p| root.join(p))
    .collect();
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// The text outside fenced code blocks.
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The targets of `[text](target)` links.
fn links(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        match after.find(')') {
            Some(end) if !after[..end].contains(char::is_whitespace) => {
                found.push(after[..end].to_string());
                rest = &after[end..];
            }
            _ => rest = after,
        }
    }
    found
}

/// GitHub's anchor for a heading: lower case, spaces to hyphens, other punctuation dropped.
fn slug(heading: &str) -> String {
    heading
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c.to_lowercase().next().unwrap()),
            _ => None,
        })
        .collect()
}

fn anchors(text: &str) -> BTreeSet<String> {
    prose(text)
        .lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| slug(l.trim_start_matches('#').trim()))
        .collect()
}

/// Every broken link in `page`, worded for the failure message.
fn broken_links(page: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(page).unwrap();
    let mut broken = Vec::new();
    for link in links(&prose(&text)) {
        if link.contains("://") || link.starts_with("mailto:") {
            continue;
        }
        let (file, anchor) = match link.split_once('#') {
            Some((file, anchor)) => (file, Some(anchor)),
            None => (link.as_str(), None),
        };
        let target = if file.is_empty() {
            page.to_path_buf()
        } else {
            page.parent().unwrap().join(file)
        };
        if !target.exists() {
            broken.push(format!("{}: {link}: no such file", page.display()));
            continue;
        }
        if let Some(anchor) = anchor {
            let heads = anchors(&std::fs::read_to_string(&target).unwrap_or_default());
            if !heads.contains(anchor) {
                broken.push(format!("{}: {link}: no such heading", page.display()));
            }
        }
    }
    broken
}

#[test]
fn every_relative_link_names_a_file_and_heading_that_exist() {
    let broken: Vec<String> = pages().iter().flat_map(|p| broken_links(p)).collect();
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn every_page_of_docs_is_linked_from_the_readme() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let linked: BTreeSet<String> = links(&readme).into_iter().collect();
    let missing: Vec<String> = pages()
        .iter()
        .filter(|p| p.parent().unwrap().ends_with("docs"))
        .map(|p| format!("docs/{}", p.file_name().unwrap().to_string_lossy()))
        .filter(|p| !linked.contains(p))
        .collect();
    assert!(missing.is_empty(), "not linked from README.md: {missing:?}");
}

#[test]
fn no_text_cites_files_outside_the_repository() {
    let root = root();
    let mut offenders = Vec::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            if path.is_dir() {
                if !name.starts_with('.') && name != "target" && name != "node_modules" {
                    stack.push(path);
                }
                continue;
            }
            let source = ["rs", "md", "tf", "sh", "py", "toml"]
                .iter()
                .any(|ext| name.ends_with(&format!(".{ext}")));
            if !source || path.ends_with("tests/tests/end_to_end/docs.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            if text.contains("DESIGN.md") || text.contains("../shared/") {
                offenders.push(path.strip_prefix(&root).unwrap().display().to_string());
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "cite files not in the repository: {offenders:?}"
    );
}

#[test]
fn the_checks_find_what_they_look_for() {
    assert_eq!(slug("The DynamoDB / S3 front"), "the-dynamodb--s3-front");
    assert_eq!(
        slug("Files in `local/localstack/.state/`"),
        "files-in-locallocalstackstate"
    );
    assert_eq!(
        links("see [a](x.md#y) and [b](https://e) `[c](no space)`"),
        vec!["x.md#y".to_string(), "https://e".to_string()]
    );
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("p.md");
    std::fs::write(
        &page,
        "# Top\n[ok](#top) [gone](#nowhere) [missing](missing.md)\n```\n[in code](nope.md)\n```\n",
    )
    .unwrap();
    let broken = broken_links(&page);
    assert_eq!(broken.len(), 2, "{broken:?}");
}
