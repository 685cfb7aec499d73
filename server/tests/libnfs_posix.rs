//! granary driven by libnfs itself (Debian libnfs-dev): a C program using libnfs's POSIX-like
//! API (`tests/libnfs/posix.c`) is compiled with `cc` and run against the real server.
//! It checks mkdir/creat/O_EXCL/pwrite/pread/sparse holes/truncate/rename/link/unlink/
//! symlink/readlink/mknod/rmdir/chmod/chown/utimes/access/statvfs/readdir/fsync.

mod common;

use std::process::Command;

#[test]
fn libnfs_posix_operations() {
    let program = common::build_libnfs_posix();
    let server = common::Server::start(&["--squash", "none"]);
    let out = Command::new(&program)
        .arg(server.url_of(""))
        .output()
        .expect("run posix");
    let _ = std::fs::remove_file(&program);
    let text = String::from_utf8_lossy(&out.stdout);
    let passes = text.lines().filter(|l| l.starts_with("PASS ")).count();
    assert!(
        out.status.success(),
        "libnfs checks failed:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(passes >= 50, "only {passes} checks ran:\n{text}");
}
