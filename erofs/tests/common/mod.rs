//! Shared by the differential tests: a generated source tree with every file type and
//! `mkfs.erofs` runs over it.
#![allow(dead_code)]

use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Deterministic bytes: `compressible` repeats short words, otherwise xorshift noise.
pub fn bytes(seed: u64, len: usize, compressible: bool) -> Vec<u8> {
    let mut x = seed | 1;
    let words: [&[u8]; 6] = [
        b"granary ",
        b"erofs ",
        b"cluster ",
        b"nfs ",
        b"read\n",
        b"lz4 ",
    ];
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if compressible {
            out.extend_from_slice(words[(x % 6) as usize]);
        } else {
            out.extend_from_slice(&x.to_le_bytes());
        }
    }
    out.truncate(len);
    out
}

fn write(path: &Path, data: &[u8], mode: u32) {
    std::fs::write(path, data).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Builds the test tree under `root` (which must not exist). `big_dir` adds a
/// 10,000-entry directory; `huge` adds a 64 MiB file.
pub fn make_tree(root: &Path, big_dir: bool, huge: bool) {
    std::fs::create_dir_all(root.join("sub/deeper")).unwrap();
    write(&root.join("empty"), b"", 0o644);
    write(&root.join("one"), b"x", 0o600);
    for (i, len) in [
        4095usize,
        4096,
        4097,
        8191,
        12_288,
        65_537,
        300_000,
        1 << 20,
    ]
    .iter()
    .enumerate()
    {
        write(
            &root.join(format!("text-{len}")),
            &bytes(i as u64 + 1, *len, true),
            0o644,
        );
        write(
            &root.join(format!("noise-{len}")),
            &bytes(i as u64 + 100, *len, false),
            0o640,
        );
    }
    let mut mixed = bytes(7, 200_000, true);
    mixed.extend(bytes(8, 200_000, false));
    mixed.extend(vec![0u8; 150_000]);
    mixed.extend(bytes(9, 123_457, true));
    write(&root.join("sub/mixed"), &mixed, 0o755);
    // A sparse file: data, a 1 MiB hole, data, and a hole at the end.
    let f = std::fs::File::create(root.join("sparse")).unwrap();
    use std::os::unix::fs::FileExt;
    f.write_all_at(&bytes(11, 5000, false), 0).unwrap();
    f.write_all_at(&bytes(12, 7000, true), (1 << 20) + 5000)
        .unwrap();
    f.set_len(3 << 20).unwrap();
    write(&root.join("sub/deeper/file"), b"deep\n", 0o444);
    std::fs::hard_link(root.join("text-4097"), root.join("sub/hardlink")).unwrap();
    symlink("text-4095", root.join("link")).unwrap();
    symlink("x".repeat(4000), root.join("sub/longlink")).unwrap();
    symlink("../one", root.join("sub/deeper/up")).unwrap();
    specials(root);
    let _ = std::os::unix::net::UnixListener::bind(root.join("sock"));
    std::os::unix::fs::chown(root.join("one"), Some(1234), Some(5678)).unwrap();
    std::os::unix::fs::chown(root.join("sub"), Some(70_000), Some(80_000)).unwrap();
    let _ = Command::new("setfattr")
        .args(["-n", "user.granary", "-v", "hello"])
        .arg(root.join("one"))
        .status();
    std::fs::set_permissions(
        root.join("sub/deeper"),
        std::fs::Permissions::from_mode(0o1777),
    )
    .unwrap();
    if big_dir {
        let d = root.join("big");
        std::fs::create_dir(&d).unwrap();
        for i in 0..10_000 {
            let name = format!("entry-{i:05}-{}", "n".repeat(i % 40));
            std::fs::write(d.join(name), format!("{i}\n")).unwrap();
        }
    }
    if huge {
        let mut data = Vec::with_capacity(64 << 20);
        for i in 0..64u64 {
            data.extend(bytes(1000 + i, 1 << 20, i % 2 == 0));
        }
        write(&root.join("huge"), &data, 0o644);
    }
}

fn specials(root: &Path) {
    for (name, kind, dev) in [
        ("fifo", "p", None),
        ("chr", "c", Some((1, 3))),
        ("blk", "b", Some((259, 70_000))),
    ] {
        let mut c = Command::new("mknod");
        c.arg(root.join(name)).arg(kind);
        if let Some((ma, mi)) = dev {
            c.arg(ma.to_string()).arg(mi.to_string());
        }
        assert!(c.status().unwrap().success(), "mknod {name}");
    }
}

/// Runs `mkfs.erofs` with `opts`; panics with its output on failure.
pub fn mkfs(image: &Path, src: &Path, opts: &[&str]) {
    let out = Command::new("mkfs.erofs")
        .args(opts)
        .arg("--quiet")
        .arg(image)
        .arg(src)
        .output()
        .expect("mkfs.erofs is not installed (apt-get install erofs-utils)");
    assert!(
        out.status.success(),
        "mkfs.erofs {opts:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The option sets the differential tests cover: every supported layout and compressor.
pub const OPTION_SETS: &[&[&str]] = &[
    &[],
    &["-Enoinline_data"],
    &["-Eforce-inode-extended"],
    &["-Eforce-inode-compact", "-T", "1700000000", "--all-root"],
    &["-T", "1700000000"],
    &["--chunksize=4096"],
    &["--chunksize=65536", "-Eforce-chunk-indexes"],
    &["-zlz4"],
    &["-zlz4hc,9"],
    &["-zlz4", "-Elegacy-compress"],
    &["-zlz4hc", "-C65536"],
    &["-zlz4hc", "-C16384", "-Elegacy-compress"],
    &["-zlz4", "-Eztailpacking"],
    &["-zlz4hc", "-C32768", "-Eztailpacking"],
    &["-zlz4", "--max-extent-bytes=16384"],
    &["-zlz4", "-Enosbcrc", "-x-1", "--all-root"],
];

/// Whether an option set changes how directories and inodes are laid out (inline data,
/// inode size), rather than only how regular files' data is stored (chunks, compression,
/// tail packing) or what the inodes say (times, owners, xattrs).
pub fn lays_out_directories(opts: &[&str]) -> bool {
    opts.is_empty()
        || opts
            .iter()
            .any(|o| o.starts_with("-Enoinline") || o.starts_with("-Eforce-inode"))
}

/// A fresh scratch directory under the target dir.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("granary-erofs-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
