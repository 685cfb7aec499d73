//! SETATTR's ownership and mode rules (issue 17) compared with Linux itself.
//!
//! One table of cases: caller (root, the owner, the owner while outside the file's group,
//! a member of the other group, a stranger) × change (uid and gid each absent, the current
//! value, or another) × object (regular file, directory, symlink) × starting mode (with
//! and without set-id bits), plus chmod to modes with and without set-id bits. Each case
//! runs three times: against a tmpfs directory (/dev/shm) and an ext4 one (the temporary
//! directory) on this host, by a forked child that takes the caller's ids (`setgroups`,
//! `setresgid`, `setresuid`) and calls `fchownat`/`chmod`; and against `vfs::Export` over
//! the mem backend with the same credential. The expected result is what Linux did, never
//! written by hand; the only cases allowed to differ are `chown(-1, -1)`, which NFSv3
//! cannot carry (see `nfs_cannot_carry`). Needs root (to create files for other users and
//! to switch ids); without it the test says so and checks nothing.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::sync::Arc;

use bytes::Bytes;
use granary_backend_mem::{MemConfig, MemFs};
use gtime::{ManualClock, Timestamp};
use vfs::{
    CreateMode, Cred, Export, ExportId, ExportOptions, FileId, FsError, Name, SetAttr, Squash,
};

const OWNER: u32 = 1000;
const OTHER_GROUP: u32 = 2000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    File,
    Dir,
    Symlink,
}

#[derive(Debug, Clone, Copy)]
enum Op {
    /// `fchownat(uid, gid)`, -1 as `None`.
    Chown(Option<u32>, Option<u32>),
    Chmod(u32),
}

#[derive(Debug, Clone)]
struct Caller {
    name: &'static str,
    uid: u32,
    gid: u32,
    groups: Vec<u32>,
}

/// What a case ended with: the errno (0 for success) and the object's mode, uid, gid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Outcome {
    errno: i32,
    mode: u32,
    uid: u32,
    gid: u32,
}

fn callers() -> Vec<Caller> {
    vec![
        Caller {
            name: "root",
            uid: 0,
            gid: 0,
            groups: vec![0],
        },
        Caller {
            name: "owner",
            uid: OWNER,
            gid: OWNER,
            groups: vec![OWNER, OTHER_GROUP],
        },
        Caller {
            name: "owner-outside-group",
            uid: OWNER,
            gid: 3000,
            groups: vec![3000, OTHER_GROUP],
        },
        Caller {
            name: "member",
            uid: 1001,
            gid: 1001,
            groups: vec![1001, OTHER_GROUP],
        },
        Caller {
            name: "stranger",
            uid: 1002,
            gid: 1002,
            groups: vec![1002],
        },
    ]
}

fn ops(kind: Kind) -> Vec<Op> {
    let uids = [None, Some(OWNER), Some(1001)];
    let gids = [None, Some(OWNER), Some(OTHER_GROUP)];
    let mut out = Vec::new();
    for uid in uids {
        for gid in gids {
            out.push(Op::Chown(uid, gid));
        }
    }
    if kind != Kind::Symlink {
        out.extend([Op::Chmod(0o6755), Op::Chmod(0o2755), Op::Chmod(0o755)]);
    }
    out
}

fn start_modes(kind: Kind) -> &'static [u32] {
    match kind {
        Kind::Symlink => &[0o777],
        Kind::File | Kind::Dir => &[0o6755, 0o2745, 0o755],
    }
}

fn cstr(path: &std::path::Path) -> CString {
    use std::os::unix::ffi::OsStrExt;
    CString::new(path.as_os_str().as_bytes()).expect("no NUL in test paths")
}

/// Makes the object as root, owned by OWNER:OWNER with `mode`.
fn make_reference(path: &std::path::Path, kind: Kind, mode: u32) {
    match kind {
        Kind::File => drop(std::fs::File::create(path).expect("create")),
        Kind::Dir => std::fs::create_dir(path).expect("mkdir"),
        Kind::Symlink => std::os::unix::fs::symlink("target", path).expect("symlink"),
    }
    let p = cstr(path);
    // SAFETY: `p` is a valid NUL-terminated path for the duration of the calls.
    unsafe {
        assert_eq!(
            libc::fchownat(
                libc::AT_FDCWD,
                p.as_ptr(),
                OWNER,
                OWNER,
                libc::AT_SYMLINK_NOFOLLOW
            ),
            0
        );
        if kind != Kind::Symlink {
            assert_eq!(libc::chmod(p.as_ptr(), mode), 0);
        }
    }
}

/// Runs `op` on `path` in a child with the caller's ids; returns the child's errno.
fn run_as(caller: &Caller, path: &std::path::Path, op: Op) -> i32 {
    let p = cstr(path);
    let groups: Vec<libc::gid_t> = caller.groups.clone();
    // SAFETY: the child only makes async-signal-safe system calls on memory prepared
    // before the fork, then `_exit`s; the parent waits for it.
    unsafe {
        let pid = libc::fork();
        assert!(pid >= 0, "fork");
        if pid == 0 {
            let ok = libc::setgroups(groups.len(), groups.as_ptr()) == 0
                && libc::setresgid(caller.gid, caller.gid, caller.gid) == 0
                && libc::setresuid(caller.uid, caller.uid, caller.uid) == 0;
            if !ok {
                libc::_exit(250);
            }
            let rc = match op {
                Op::Chown(uid, gid) => libc::fchownat(
                    libc::AT_FDCWD,
                    p.as_ptr(),
                    uid.unwrap_or(u32::MAX),
                    gid.unwrap_or(u32::MAX),
                    libc::AT_SYMLINK_NOFOLLOW,
                ),
                Op::Chmod(mode) => libc::chmod(p.as_ptr(), mode),
            };
            let errno = if rc == 0 {
                0
            } else {
                *libc::__errno_location()
            };
            libc::_exit(errno);
        }
        let mut status = 0;
        assert_eq!(libc::waitpid(pid, &mut status, 0), pid);
        assert!(libc::WIFEXITED(status), "child died");
        let code = libc::WEXITSTATUS(status);
        assert_ne!(code, 250, "could not switch ids");
        code
    }
}

fn reference(
    dir: &std::path::Path,
    n: usize,
    kind: Kind,
    mode: u32,
    who: &Caller,
    op: Op,
) -> Outcome {
    use std::os::unix::fs::MetadataExt;
    let path = dir.join(format!("case{n}"));
    make_reference(&path, kind, mode);
    let errno = run_as(who, &path, op);
    let meta = std::fs::symlink_metadata(&path).expect("stat");
    Outcome {
        errno,
        mode: meta.mode() & 0o7777,
        uid: meta.uid(),
        gid: meta.gid(),
    }
}

fn export() -> Export {
    let clock = Arc::new(ManualClock::new(Timestamp {
        seconds: 1_700_000_000,
        nanos: 0,
    }));
    let fs = MemFs::new(MemConfig::default(), clock);
    let options = ExportOptions {
        squash: Squash::None,
        ..ExportOptions::default()
    };
    Export::new(ExportId(1), 1, "/".into(), options, Arc::new(fs))
}

fn make_granary(e: &Export, n: usize, kind: Kind, mode: u32) -> FileId {
    let root = Cred::root();
    let name = Name::new(Bytes::from(format!("case{n}"))).unwrap();
    let none = SetAttr::default();
    let made = match kind {
        Kind::File => e.create(&root, e.root(), &name, &CreateMode::Guarded(none)),
        Kind::Dir => e.mkdir(&root, e.root(), &name, &none),
        Kind::Symlink => e.symlink(&root, e.root(), &name, b"target", &none),
    }
    .expect("create");
    let id = made.attr.fileid;
    let own = SetAttr {
        uid: Some(OWNER),
        gid: Some(OWNER),
        ..SetAttr::default()
    };
    e.setattr(&root, id, &own, None).expect("chown");
    if kind != Kind::Symlink {
        let set = SetAttr {
            mode: Some(mode),
            ..SetAttr::default()
        };
        e.setattr(&root, id, &set, None).expect("chmod");
    }
    id
}

fn granary(e: &Export, n: usize, kind: Kind, mode: u32, who: &Caller, op: Op) -> Outcome {
    let id = make_granary(e, n, kind, mode);
    let cred = Cred {
        uid: who.uid,
        gid: who.gid,
        groups: who.groups.clone(),
    };
    let set = match op {
        Op::Chown(uid, gid) => SetAttr {
            uid,
            gid,
            ..SetAttr::default()
        },
        Op::Chmod(mode) => SetAttr {
            mode: Some(mode),
            ..SetAttr::default()
        },
    };
    let errno = match e.setattr(&cred, id, &set, None) {
        Ok(_) => 0,
        Err(FsError::Perm) => libc::EPERM,
        Err(FsError::Access) => libc::EACCES,
        Err(other) => panic!("unexpected {other:?}"),
    };
    let attr = e.getattr(id).unwrap();
    Outcome {
        errno,
        mode: attr.mode,
        uid: attr.uid,
        gid: attr.gid,
    }
}

/// `chown(path, -1, -1)` reaches an NFSv3 server as a SETATTR that sets nothing (sattr3
/// has no "kill set-id" flag), so what Linux does locally for it (clear the set-id bits,
/// or EPERM for a stranger when there are bits to clear) cannot reach the server. granary
/// answers such a SETATTR as knfsd does: OK, nothing changed.
fn nfs_cannot_carry(op: Op) -> bool {
    matches!(op, Op::Chown(None, None))
}

/// A directory for reference files on the file system that holds `parent`.
fn reference_dir(parent: &str) -> std::path::PathBuf {
    let dir = std::path::Path::new(parent).join(format!("granary-own-{}", std::process::id()));
    std::fs::create_dir(&dir).expect("a reference directory");
    // SAFETY: a valid path; chmod has no other preconditions.
    assert_eq!(unsafe { libc::chmod(cstr(&dir).as_ptr(), 0o777) }, 0);
    dir
}

#[derive(Default)]
struct Tally {
    cases: usize,
    uncarried: usize,
    mismatches: Vec<String>,
}

fn run_case(
    dirs: &[std::path::PathBuf],
    e: &Export,
    n: usize,
    case: (Kind, u32, &Caller, Op),
    t: &mut Tally,
) {
    let (kind, mode, who, op) = case;
    let refs: Vec<Outcome> = dirs
        .iter()
        .map(|d| reference(d, n, kind, mode, who, op))
        .collect();
    let got = granary(e, n, kind, mode, who, op);
    let want = refs[0];
    let what = format!("{kind:?} {mode:o} by {} {op:?}", who.name);
    // tmpfs and ext4 are one implementation of these rules (the VFS); if they ever
    // disagree the reference itself is in doubt.
    assert!(
        refs.iter().all(|r| *r == want),
        "{what}: local file systems disagree: {refs:?}"
    );
    t.cases += 1;
    if nfs_cannot_carry(op) {
        t.uncarried += 1;
        let unchanged = Outcome {
            errno: 0,
            mode,
            uid: OWNER,
            gid: OWNER,
        };
        let unchanged = if kind == Kind::Symlink {
            Outcome {
                mode: got.mode,
                ..unchanged
            }
        } else {
            unchanged
        };
        if got != unchanged {
            t.mismatches.push(format!(
                "{what}: an empty SETATTR must change nothing, got {got:?}"
            ));
        }
    } else if want != got {
        t.mismatches
            .push(format!("{what}: linux {want:?}, granary {got:?}"));
    }
}

#[test]
fn setattr_ownership_rules_match_linux() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root to create files for other users and switch ids");
        return;
    }
    // /dev/shm is a tmpfs; the system temporary directory usually sits on the root file
    // system (ext4 here).
    let tmp = std::env::temp_dir();
    let dirs = [
        reference_dir("/dev/shm"),
        reference_dir(tmp.to_str().expect("utf-8 tmp")),
    ];
    let e = export();
    let mut t = Tally::default();
    for kind in [Kind::File, Kind::Dir, Kind::Symlink] {
        for &mode in start_modes(kind) {
            for who in callers() {
                for op in ops(kind) {
                    let n = t.cases + 1;
                    run_case(&dirs, &e, n, (kind, mode, &who, op), &mut t);
                }
            }
        }
    }
    for d in &dirs {
        std::fs::remove_dir_all(d).ok();
    }
    eprintln!(
        "{} cases, {} of them chown(-1, -1) that NFSv3 cannot carry, {} differences",
        t.cases,
        t.uncarried,
        t.mismatches.len()
    );
    assert!(
        t.mismatches.is_empty(),
        "{} of {} cases differ from Linux:\n{}",
        t.mismatches.len(),
        t.cases,
        t.mismatches.join("\n")
    );
}
