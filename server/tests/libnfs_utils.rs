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
    for (name, len) in [
        ("empty", 0u64),
        ("one", 1),
        ("page", 4096),
        ("mib-plus-one", (1 << 20) + 1),
    ] {
        let line = listing
            .lines()
            .find(|l| l.ends_with(&format!(" {name}")))
            .unwrap_or_else(|| panic!("{name} missing from nfs-ls:\n{listing}"));
        assert!(
            line.split_whitespace().any(|f| f == len.to_string()),
            "size of {name}: {line}"
        );
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
    assert!(
        !again.status.success(),
        "nfs-cp over an existing file must fail"
    );
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
    assert!(
        !out.status.success(),
        "write to a read-only export succeeded"
    );
    let listing = String::from_utf8(ok("nfs-ls", &[&server.url_of("")])).unwrap();
    assert!(
        !listing.contains(" x"),
        "file appeared on a read-only export:\n{listing}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// A client of granary's own, to build large trees quickly; nfs-ls then reads them.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn nfs_ls_lists_a_directory_of_ten_thousand_entries() {
    const N: usize = 10_000;
    let server = Server::start(&["--squash", "none"]);
    runtime().block_on(async {
        let c = client::Nfs3Client::connect(server.addr, server.addr)
            .await
            .unwrap();
        let root = c.mount("/").await.unwrap();
        let dir = c.mkdir_ok(&root, "big", 0o755).await.unwrap();
        // Pipelined creates: 64 in flight at a time on the one connection.
        for chunk in (0..N).collect::<Vec<_>>().chunks(64) {
            let mut tasks = tokio::task::JoinSet::new();
            for &i in chunk {
                let (c, dir) = (c.clone(), dir.clone());
                tasks.spawn(
                    async move { c.create_file(&dir, format!("entry-{i:05}"), 0o644).await },
                );
            }
            while let Some(r) = tasks.join_next().await {
                r.unwrap().unwrap();
            }
        }
    });
    let out = String::from_utf8(ok("nfs-ls", &[&server.url_of("big")])).unwrap();
    let mut names: Vec<&str> = out
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .collect();
    names.sort_unstable();
    let want: Vec<String> = (0..N).map(|i| format!("entry-{i:05}")).collect();
    assert_eq!(names.len(), N, "nfs-ls listed {} entries", names.len());
    assert!(
        names.iter().zip(&want).all(|(a, b)| a == b),
        "listing differs from what was created"
    );
}

#[test]
fn nfs_ls_walks_a_tree_recursively() {
    let server = Server::start(&["--squash", "none"]);
    let mut want = Vec::new();
    runtime().block_on(async {
        let c = client::Nfs3Client::connect(server.addr, server.addr)
            .await
            .unwrap();
        let root = c.mount("/").await.unwrap();
        for a in 0..3 {
            let da = c.mkdir_ok(&root, format!("d{a}"), 0o755).await.unwrap();
            want.push(format!("d{a}"));
            for b in 0..3 {
                let db = c.mkdir_ok(&da, format!("e{b}"), 0o755).await.unwrap();
                want.push(format!("d{a}/e{b}"));
                for f in 0..4 {
                    let fh = c.create_file(&db, format!("f{f}"), 0o644).await.unwrap();
                    let data = pattern(100 * f + a, (a * 10 + b) as u64);
                    c.write_all(&fh, 0, &data, nfs3::nfs::StableHow::FileSync)
                        .await
                        .unwrap();
                    want.push(format!("d{a}/e{b}/f{f}"));
                }
            }
        }
    });
    let out = String::from_utf8(ok("nfs-ls", &["-R", &server.url_of("")])).unwrap();
    let mut got: Vec<String> = out
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .map(|p| p.trim_start_matches('/').to_string())
        .collect();
    got.sort();
    want.sort();
    assert_eq!(got, want, "nfs-ls -R output:\n{out}");
    // And a file deep in the tree reads back through nfs-cat.
    assert_eq!(
        ok("nfs-cat", &[&server.url_of("d2/e1/f3")]),
        pattern(302, 21)
    );
}
