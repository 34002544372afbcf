//! Measuring what an execution environment uses, for the limits Lambda enforces:
//! resident memory of a process and all its descendants (`/proc`, Linux only), and the
//! bytes under its `/tmp` directory.

use std::path::Path;

/// Resident set size, in bytes, of `pid` plus every descendant process (read from
/// `/proc/<pid>/status` and `/proc/<pid>/task/<tid>/children`). `None` when `pid` is
/// gone or `/proc` cannot be read (not Linux).
pub fn tree_rss_bytes(pid: u32) -> Option<u64> {
    let mut total = 0;
    let mut stack = vec![pid];
    let mut seen = 0usize;
    let mut first = true;
    while let Some(p) = stack.pop() {
        seen += 1;
        if seen > 10_000 {
            break; // a fork bomb is not worth an exact number
        }
        match rss_bytes(p) {
            Some(rss) => total += rss,
            None if first => return None,
            None => continue, // exited meanwhile
        }
        first = false;
        stack.extend(children(p));
    }
    Some(total)
}

/// `VmRSS` of one process, in bytes.
fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line
        .trim_start_matches("VmRSS:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// The direct children of a process (over all its threads).
fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for task in tasks.flatten() {
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            out.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
    }
    out
}

/// Bytes of all regular files under `dir` (their lengths; symbolic links are not
/// followed). A missing directory holds 0 bytes.
pub fn dir_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.path().symlink_metadata() else {
                continue;
            };
            if meta.is_dir() {
                stack.push(entry.path());
            } else if meta.is_file() {
                total += meta.len();
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_this_process_and_a_directory() {
        let rss = tree_rss_bytes(std::process::id()).expect("/proc is readable");
        assert!(rss > 1024 * 1024, "{rss}");
        assert_eq!(tree_rss_bytes(u32::MAX - 1), None);

        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), vec![0u8; 1000]).unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/b"), vec![0u8; 24]).unwrap();
        assert_eq!(dir_bytes(dir.path()), 1024);
        assert_eq!(dir_bytes(&dir.path().join("missing")), 0);
    }

    #[test]
    fn finds_child_processes() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
        let found = children(std::process::id()).contains(&child.id());
        let child_rss = tree_rss_bytes(child.id());
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            found,
            "a child process is found through /proc/<pid>/task/*/children"
        );
        assert!(child_rss.is_some_and(|r| r > 0));
    }
}
