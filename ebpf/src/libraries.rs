//! Finds the libibverbs copies to put uprobes on: the host's and every container's.
//!
//! A uprobe is bound to an inode, so one attachment per distinct library file covers every
//! process that maps it. A container's library is reached through `/proc/<pid>/root`.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Basename prefix of the library the user route hooks.
const LIBRARY_PREFIX: &str = "libibverbs.so";
/// Host locations tried even when no running process maps libibverbs yet.
const HOST_LIBRARIES: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/libibverbs.so.1",
    "/usr/lib64/libibverbs.so.1",
    "/usr/lib/libibverbs.so.1",
];
/// A maps file larger than this is truncated (each line is < 4 KiB; huge maps are JITs).
const MAX_MAPS_BYTES: u64 = 8 << 20;

/// Identity of a library file (device, inode): two paths to one file attach once.
pub type FileId = (u64, u64);

/// A library file reachable from this process, with its identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LibraryFile {
    /// Path this process can open (under `/proc/<pid>/root` for a container's copy).
    pub path: PathBuf,
    /// (device, inode).
    pub id: FileId,
}

/// Identity of `path`, `None` if it cannot be stat'ed.
pub fn file_id(path: &Path) -> Option<FileId> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// Paths of libibverbs mapped in one `/proc/<pid>/maps` text (as seen in that process's root).
pub fn libibverbs_in_maps(maps: &str) -> HashSet<&str> {
    maps.lines()
        .filter_map(|line| {
            // address perms offset dev inode pathname (pathname may contain spaces)
            let path = line.splitn(6, char::is_whitespace).nth(5)?.trim_start();
            let name = path.rsplit('/').next()?;
            (path.starts_with('/')
                && name.starts_with(LIBRARY_PREFIX)
                && !path.ends_with(" (deleted)"))
            .then_some(path)
        })
        .collect()
}

/// Distinct libibverbs files: `extra` first, then the host copy, then (with `scan_processes`)
/// every copy mapped by a process under `proc_dir`, reached through its root.
pub fn discover(extra: &[PathBuf], scan_processes: bool, proc_dir: &Path) -> Vec<LibraryFile> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    let mut add = |path: PathBuf| {
        if let Some(id) = file_id(&path)
            && seen.insert(id)
        {
            out.push(LibraryFile { path, id });
        }
    };
    extra.iter().cloned().for_each(&mut add);
    HOST_LIBRARIES.iter().map(PathBuf::from).for_each(&mut add);
    if scan_processes {
        let Ok(entries) = std::fs::read_dir(proc_dir) else {
            return out;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
                continue;
            }
            let Some(maps) = read_bounded(&entry.path().join("maps")) else {
                continue;
            };
            let root = entry.path().join("root");
            for lib in libibverbs_in_maps(&maps) {
                add(root.join(lib.trim_start_matches('/')));
            }
        }
    }
    out
}

fn read_bounded(path: &Path) -> Option<String> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(MAX_MAPS_BYTES)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_libibverbs_lines_only() {
        let maps = "\
7f0000000000-7f0000001000 r--p 00000000 fd:01 123 /usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.44.0
7f0000001000-7f0000002000 r-xp 00001000 fd:01 123 /usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.44.0
7f0000003000-7f0000004000 r-xp 00000000 fd:01 124 /usr/lib/x86_64-linux-gnu/libc.so.6
7f0000005000-7f0000006000 r-xp 00000000 fd:01 125 /opt/my dir/libibverbs.so.1
7f0000007000-7f0000008000 r-xp 00000000 fd:01 126 /old/libibverbs.so.1 (deleted)
7ffd00000000-7ffd00001000 rw-p 00000000 00:00 0 [stack]
garbage";
        let mut found: Vec<_> = libibverbs_in_maps(maps).into_iter().collect();
        found.sort();
        assert_eq!(
            found,
            vec![
                "/opt/my dir/libibverbs.so.1",
                "/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.44.0"
            ]
        );
    }

    #[test]
    fn discovers_through_proc_root_and_dedups_by_inode() {
        // A fake /proc: pid 1 maps /lib/libibverbs.so.1 inside its root; pid 2 maps the same file.
        let dir = tempfile::tempdir().unwrap();
        let lib = dir.path().join("rootfs/lib/libibverbs.so.1");
        std::fs::create_dir_all(lib.parent().unwrap()).unwrap();
        std::fs::write(&lib, b"x").unwrap();
        for pid in ["1", "2"] {
            let p = dir.path().join("proc").join(pid);
            std::fs::create_dir_all(&p).unwrap();
            std::os::unix::fs::symlink(dir.path().join("rootfs"), p.join("root")).unwrap();
            std::fs::write(p.join("maps"), "1-2 r-xp 0 fd:01 9 /lib/libibverbs.so.1\n").unwrap();
        }
        std::fs::create_dir_all(dir.path().join("proc/self-not-a-pid")).unwrap();
        let found = discover(&[], true, &dir.path().join("proc"));
        let ours: Vec<_> = found
            .iter()
            .filter(|l| l.id == file_id(&lib).unwrap())
            .collect();
        assert_eq!(ours.len(), 1);
        assert!(ours[0].path.ends_with("root/lib/libibverbs.so.1"));
        // An explicit path to the same file wins and is not repeated.
        let found = discover(std::slice::from_ref(&lib), true, &dir.path().join("proc"));
        assert_eq!(found[0].path, lib);
        assert_eq!(found.iter().filter(|l| l.id == found[0].id).count(), 1);
    }
}
