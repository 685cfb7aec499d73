//! granary driven by libnfs-utils (`nfs-cp`, `nfs-cat`, `nfs-ls` from Debian's
//! libnfs-utils): a client nobody here wrote. Install with `apt-get install libnfs-utils`
//! (the test command in README does).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::Server;

fn tool(name: &str, args: &[&str]) -> Output {
    let out = Command::new(name).args(args).output().unwrap_or_else(|e| {
        panic!("cannot run {name} ({e}); install libnfs-utils: sudo apt-get install libnfs-utils")
    });
    out
}

fn ok(name: &str, args: &[&str]) -> Vec<u8> {
    let out = tool(name, args);
    assert!(
        out.status.success(),
        "{name} {args:?} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("granary-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Deterministic, incompressible-looking bytes.
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn round_trip(server: &Server, dir: &Path, name: &str, data: &[u8]) {
    let local = dir.join(name);
    std::fs::write(&local, data).unwrap();
    let url = server.url_of(name);
    ok("nfs-cp", &[local.to_str().unwrap(), &url]);
    let back = dir.join(format!("{name}.back"));
    ok("nfs-cp", &[&url, back.to_str().unwrap()]);
    let copied = std::fs::read(&back).unwrap();
    assert_eq!(copied.len(), data.len(), "{name}: size after nfs-cp out");
    assert!(copied == data, "{name}: content differs after nfs-cp out");
    let catted = ok("nfs-cat", &[&url]);
    assert!(catted == data, "{name}: content differs through nfs-cat");
}

#[test]
fn files_of_every_size_copy_in_and_out_intact() {
    let server = Server::start(&[]);
    let dir = scratch("sizes");
    for (name, len) in [
        ("empty", 0),
        ("one", 1),
        ("page", 4096),
        ("mib-plus-one", (1 << 20) + 1),
        ("sixty-four-mib", 64 << 20),
    ] {
        round_trip(&server, &dir, name, &pattern(len, len as u64));
    }
    let listing = String::from_utf8(ok("nfs-ls", &[&server.url_of("")])).unwrap();
    for (name, len) in [("empty", 0u64), ("one", 1), ("page", 4096), ("mib-plus-one", (1 << 20) + 1)] {
        let line = listing.lines().find(|l| l.ends_with(&format!(" {name}"))).unwrap_or_else(|| {
            panic!("{name} missing from nfs-ls:\n{listing}")
        });
        assert!(line.split_whitespace().any(|f| f == len.to_string()), "size of {name}: {line}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn nfs_cp_refuses_to_overwrite_and_reports_missing_files() {
    let server = Server::start(&[]);
    let dir = scratch("errors");
    let local = dir.join("a");
    std::fs::write(&local, b"first").unwrap();
    ok("nfs-cp", &[local.to_str().unwrap(), &server.url_of("a")]);
    // nfs-cp creates with O_EXCL semantics: the second copy must fail, content unchanged.
    std::fs::write(&local, b"second").unwrap();
    let again = tool("nfs-cp", &[local.to_str().unwrap(), &server.url_of("a")]);
    assert!(!again.status.success(), "nfs-cp over an existing file must fail");
    assert_eq!(ok("nfs-cat", &[&server.url_of("a")]), b"first");
    let missing = tool("nfs-cat", &[&server.url_of("no-such-file")]);
    assert!(!missing.status.success());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn read_only_export_refuses_writes() {
    let server = Server::start(&["--read-only"]);
    let dir = scratch("ro");
    let local = dir.join("x");
    std::fs::write(&local, b"data").unwrap();
    let out = tool("nfs-cp", &[local.to_str().unwrap(), &server.url_of("x")]);
    assert!(!out.status.success(), "write to a read-only export succeeded");
    let listing = String::from_utf8(ok("nfs-ls", &[&server.url_of("")])).unwrap();
    assert!(!listing.contains(" x"), "file appeared on a read-only export:\n{listing}");
    let _ = std::fs::remove_dir_all(dir);
}
