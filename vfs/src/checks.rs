//! The permission and ownership rules that depend on a file's current attributes, written
//! once for every backend.
//!
//! A check that reads an attribute and a change that relies on it must not be separated
//! by another client's change (an UNCHECKED CREATE that finds an existing file must check
//! write permission on *that* file before truncating it; a sticky-directory REMOVE must
//! check the owner of the entry it removes). So the export does not check and then call:
//! it passes a [`Checks`] down, and the backend calls it at the documented points, inside
//! the critical section of the change, with the attributes it is about to act on.
//!
//! [`Caller`] is the one implementation for requests: the rules of Linux's VFS
//! (`inode_permission`, `may_delete`, `setattr_prepare`, `chown_ok`, `chgrp_ok`,
//! `inode_owner_or_capable`, `mode_strip_sgid`) for a squashed credential, where uid 0
//! holds every capability. [`Trusted`] allows everything and changes nothing; it is for
//! the server's own setup, tests and the lab, never for a client's request.

use crate::access::{access_mask, mode_allows, R, W, X};
use crate::error::{FsError, FsResult};
use crate::types::{AccessMask, Attr, Cred, FileType, Owner, SetAttr, SetTime};

/// Checks a backend runs under its locks. Each method gets the attributes the backend is
/// about to act on and either allows (`Ok`), refuses (`Access`: mode bits; `Perm`:
/// ownership), or returns the adjusted change to apply instead of the requested one.
///
/// Where a backend calls each (every backend must, at these points and nowhere else):
///
/// | call | checks, in order, after the directory/file was found and type-checked |
/// |---|---|
/// | lookup, parent | `may_search(dir)` |
/// | readdir | `may_list(dir)` |
/// | read_into | `may_read(file)` |
/// | write | `may_write(file)` (then applies the mode it returns, if any) |
/// | setattr | `setattr_rules(file, set)`, then the guard, then applies what it returned |
/// | create, mkdir, symlink, mknod | `may_change_entries(dir)`, then for an existing name under UNCHECKED CREATE with a size, `may_truncate(existing)`; a new file gets `new_file(dir, kind, attrs)` |
/// | remove, rmdir | `may_change_entries(dir)`, `may_unlink(dir, victim)` |
/// | rename | `may_change_entries` of both directories, `may_unlink(from_dir, moving)`, `may_unlink(to_dir, replaced)` if a file is replaced, `may_move_dir(moving)` for a directory changing parent |
/// | link | `may_change_entries(dir)` |
pub trait Checks: Sync {
    /// Search (execute) permission on directory `dir`.
    fn may_search(&self, dir: &Attr) -> FsResult<()>;
    /// Read permission on directory `dir`, to list it.
    fn may_list(&self, dir: &Attr) -> FsResult<()>;
    /// Write and search permission on directory `dir`, to add, remove or rename entries.
    fn may_change_entries(&self, dir: &Attr) -> FsResult<()>;
    /// Removing (or replacing, or renaming away) `victim` from `dir`: the sticky bit.
    fn may_unlink(&self, dir: &Attr, victim: &Attr) -> FsResult<()>;
    /// Moving directory `moving` to another parent rewrites its `..`: write permission.
    fn may_move_dir(&self, moving: &Attr) -> FsResult<()>;
    /// An UNCHECKED CREATE with a size over `existing`, as `open(O_CREAT|O_TRUNC)`.
    fn may_truncate(&self, existing: &Attr) -> FsResult<()>;
    /// The owner and the attributes to apply for a new file of `kind` in `dir`.
    fn new_file(&self, dir: &Attr, kind: FileType, attrs: &SetAttr) -> (Owner, SetAttr);
    /// A SETATTR of `set` on a file with `attr`: refuses, or returns the change to apply
    /// (which may differ, e.g. set-id bits cleared).
    fn setattr_rules(&self, attr: &Attr, set: &SetAttr) -> FsResult<SetAttr>;
    /// Reading file data.
    fn may_read(&self, attr: &Attr) -> FsResult<()>;
    /// Writing file data. `Some(mode)`: the file's mode must become `mode` first (a
    /// write by a non-root caller drops set-id bits).
    fn may_write(&self, attr: &Attr) -> FsResult<Option<u32>>;
    /// Which of `want` the mode bits grant (the default [`crate::Backend::access`]).
    fn access(&self, attr: &Attr, want: AccessMask) -> AccessMask;
    /// The client's squashed credential, for a backend whose host enforces permissions
    /// itself (the host backend run as root acts as it); `None` for the server's own calls.
    fn cred(&self) -> Option<&Cred>;
    /// The caller's access to the file was checked when it opened it (NFSv4 I/O through
    /// an open, [`Opened`]): a backend that asks its host for permission on every call
    /// asks nothing for reading or writing.
    fn opened(&self) -> bool {
        false
    }
}

/// Allows everything and changes nothing; new files get `owner`. For the server's own
/// setup, tests and the lab: never for a request from a client.
#[derive(Debug, Clone, Copy)]
pub struct Trusted {
    pub owner: Owner,
}

impl Trusted {
    /// Owned by root.
    pub const ROOT: Trusted = Trusted {
        owner: Owner { uid: 0, gid: 0 },
    };
}

impl Checks for Trusted {
    fn may_search(&self, _: &Attr) -> FsResult<()> {
        Ok(())
    }
    fn may_list(&self, _: &Attr) -> FsResult<()> {
        Ok(())
    }
    fn may_change_entries(&self, _: &Attr) -> FsResult<()> {
        Ok(())
    }
    fn may_unlink(&self, _: &Attr, _: &Attr) -> FsResult<()> {
        Ok(())
    }
    fn may_move_dir(&self, _: &Attr) -> FsResult<()> {
        Ok(())
    }
    fn may_truncate(&self, _: &Attr) -> FsResult<()> {
        Ok(())
    }
    fn new_file(&self, _: &Attr, _: FileType, attrs: &SetAttr) -> (Owner, SetAttr) {
        (self.owner, attrs.clone())
    }
    fn setattr_rules(&self, _: &Attr, set: &SetAttr) -> FsResult<SetAttr> {
        Ok(set.clone())
    }
    fn may_read(&self, _: &Attr) -> FsResult<()> {
        Ok(())
    }
    fn may_write(&self, _: &Attr) -> FsResult<Option<u32>> {
        Ok(None)
    }
    fn access(&self, _: &Attr, want: AccessMask) -> AccessMask {
        want
    }
    fn cred(&self) -> Option<&Cred> {
        None
    }
}

/// A client's request, as the export's squashed credential. uid 0 is privileged (every
/// capability Linux checks here: `CAP_DAC_OVERRIDE`, `CAP_FOWNER`, `CAP_CHOWN`,
/// `CAP_FSETID`, `CAP_MKNOD`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller<'c> {
    pub cred: &'c Cred,
}

impl<'c> Caller<'c> {
    #[must_use]
    pub fn new(cred: &'c Cred) -> Self {
        Self { cred }
    }

    fn require(&self, attr: &Attr, want: u32) -> FsResult<()> {
        if mode_allows(attr, self.cred, want) {
            Ok(())
        } else {
            Err(FsError::Access)
        }
    }

    /// Linux `inode_owner_or_capable`.
    fn owner_or_capable(&self, attr: &Attr) -> bool {
        self.cred.is_root() || self.cred.uid == attr.uid
    }

    /// Linux `in_group_or_capable` (`CAP_FSETID`).
    fn in_group_or_capable(&self, gid: u32) -> bool {
        self.cred.is_root() || self.cred.in_group(gid)
    }
}

impl Checks for Caller<'_> {
    fn may_search(&self, dir: &Attr) -> FsResult<()> {
        self.require(dir, X)
    }

    fn may_list(&self, dir: &Attr) -> FsResult<()> {
        self.require(dir, R)
    }

    fn may_change_entries(&self, dir: &Attr) -> FsResult<()> {
        self.require(dir, W | X)
    }

    /// Linux `check_sticky`: in a sticky directory only the owner of the entry or of the
    /// directory (or a privileged caller) may remove or rename it.
    fn may_unlink(&self, dir: &Attr, victim: &Attr) -> FsResult<()> {
        let sticky = dir.mode & 0o1000 != 0;
        if !sticky || self.cred.uid == dir.uid || self.owner_or_capable(victim) {
            return Ok(());
        }
        Err(FsError::Perm)
    }

    fn may_move_dir(&self, moving: &Attr) -> FsResult<()> {
        self.require(moving, W)
    }

    /// The owner may always truncate (Linux nfsd's owner override), others need `w`.
    fn may_truncate(&self, existing: &Attr) -> FsResult<()> {
        if self.cred.uid == existing.uid {
            return Ok(());
        }
        self.require(existing, W)
    }

    /// The caller owns the new file; its group is the directory's if the directory is
    /// setgid (and a new directory is setgid too), else the caller's. A new non-directory
    /// in a setgid directory whose group the caller is not in cannot be a
    /// group-executable setgid file (Linux `mode_strip_sgid`, the fix of CVE-2018-13405).
    fn new_file(&self, dir: &Attr, kind: FileType, attrs: &SetAttr) -> (Owner, SetAttr) {
        let inherit = dir.mode & 0o2000 != 0;
        let gid = if inherit { dir.gid } else { self.cred.gid };
        let mut attrs = attrs.clone();
        if inherit && kind == FileType::Directory {
            attrs.mode = Some(attrs.mode.unwrap_or(0o755) | 0o2000);
        } else if let Some(mode) = attrs.mode {
            if inherit && mode & 0o2010 == 0o2010 && !self.in_group_or_capable(dir.gid) {
                attrs.mode = Some(mode & !0o2000);
            }
        }
        let owner = Owner {
            uid: self.cred.uid,
            gid,
        };
        (owner, attrs)
    }

    fn setattr_rules(&self, attr: &Attr, set: &SetAttr) -> FsResult<SetAttr> {
        setattr_rules(self, attr, set)
    }

    /// The owner may always read (Linux nfsd's owner override, so a file opened before a
    /// chmod stays readable); others need read or execute permission.
    fn may_read(&self, attr: &Attr) -> FsResult<()> {
        let cred = self.cred;
        if cred.uid == attr.uid || mode_allows(attr, cred, R) || mode_allows(attr, cred, X) {
            Ok(())
        } else {
            Err(FsError::Access)
        }
    }

    /// The owner may always write (owner override), others need `w`. Writing a set-id
    /// program drops its privilege, so a writer cannot plant code that runs as the owner.
    fn may_write(&self, attr: &Attr) -> FsResult<Option<u32>> {
        if self.cred.uid != attr.uid {
            self.require(attr, W)?;
        }
        let cleared = without_set_id(attr.mode);
        Ok((!self.cred.is_root() && cleared != attr.mode).then_some(cleared))
    }

    fn access(&self, attr: &Attr, want: AccessMask) -> AccessMask {
        access_mask(attr, self.cred, want, true)
    }

    fn cred(&self) -> Option<&Cred> {
        Some(self.cred)
    }
}

/// A client's I/O through an NFSv4 open ([`crate::Backend::read_opened`],
/// [`crate::Backend::write_opened`]): the open checked the caller's access, so reading
/// and writing need no permission here, as a local process's open file needs none after
/// its `open` (knfsd reads and writes through the open's `nfsd_file`). Writing still drops
/// set-id bits as [`Caller`] does; every other rule is [`Caller`]'s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opened<'c>(pub Caller<'c>);

impl<'c> Opened<'c> {
    #[must_use]
    pub fn new(cred: &'c Cred) -> Self {
        Self(Caller::new(cred))
    }
}

impl Checks for Opened<'_> {
    fn may_search(&self, dir: &Attr) -> FsResult<()> {
        self.0.may_search(dir)
    }
    fn may_list(&self, dir: &Attr) -> FsResult<()> {
        self.0.may_list(dir)
    }
    fn may_change_entries(&self, dir: &Attr) -> FsResult<()> {
        self.0.may_change_entries(dir)
    }
    fn may_unlink(&self, dir: &Attr, victim: &Attr) -> FsResult<()> {
        self.0.may_unlink(dir, victim)
    }
    fn may_move_dir(&self, moving: &Attr) -> FsResult<()> {
        self.0.may_move_dir(moving)
    }
    fn may_truncate(&self, existing: &Attr) -> FsResult<()> {
        self.0.may_truncate(existing)
    }
    fn new_file(&self, dir: &Attr, kind: FileType, attrs: &SetAttr) -> (Owner, SetAttr) {
        self.0.new_file(dir, kind, attrs)
    }
    fn setattr_rules(&self, attr: &Attr, set: &SetAttr) -> FsResult<SetAttr> {
        self.0.setattr_rules(attr, set)
    }
    fn may_read(&self, _: &Attr) -> FsResult<()> {
        Ok(())
    }
    fn may_write(&self, attr: &Attr) -> FsResult<Option<u32>> {
        let cleared = without_set_id(attr.mode);
        Ok((!self.0.cred.is_root() && cleared != attr.mode).then_some(cleared))
    }
    fn access(&self, attr: &Attr, want: AccessMask) -> AccessMask {
        self.0.access(attr, want)
    }
    fn cred(&self) -> Option<&Cred> {
        Some(self.0.cred)
    }
    fn opened(&self) -> bool {
        true
    }
}

/// SETATTR as Linux's `setattr_prepare` and nfsd's `nfsd_sanitize_attrs` apply it.
fn setattr_rules(c: &Caller<'_>, attr: &Attr, set: &SetAttr) -> FsResult<SetAttr> {
    let cred = c.cred;
    let privileged = cred.is_root();
    let owner = cred.uid == attr.uid;
    if let Some(uid) = set.uid {
        // chown_ok: the owner may "change" the owner to itself; only a privileged caller
        // may give a file away.
        if !(privileged || owner && uid == attr.uid) {
            return Err(FsError::Perm);
        }
    }
    if let Some(gid) = set.gid {
        // chgrp_ok: the owner may set the current group or one it belongs to.
        if !(privileged || owner && (gid == attr.gid || cred.in_group(gid))) {
            return Err(FsError::Perm);
        }
    }
    if set.mode.is_some() && !c.owner_or_capable(attr) {
        return Err(FsError::Perm);
    }
    let client_time =
        matches!(set.atime, SetTime::Client(_)) || matches!(set.mtime, SetTime::Client(_));
    if client_time && !c.owner_or_capable(attr) {
        return Err(FsError::Perm);
    }
    let server_time = set.atime == SetTime::ServerTime || set.mtime == SetTime::ServerTime;
    let writes = set.size_bytes.is_some() || server_time;
    if writes && !c.owner_or_capable(attr) && !mode_allows(attr, cred, W) {
        return Err(FsError::Access);
    }
    Ok(mode_rules(c, attr, set))
}

/// The mode part of a SETATTR: a symlink's mode never changes; a SETATTR that carries a
/// uid or a gid (changed or not: Linux's `chown_common` asks to kill the bits on every
/// chown of a non-directory, and nfsd's `nfsd_sanitize_attrs` does the same for a SETATTR)
/// clears set-id bits (also from a mode set in the same call); a caller outside the file's
/// (new) group cannot keep setgid in a mode it sets.
fn mode_rules(c: &Caller<'_>, attr: &Attr, set: &SetAttr) -> SetAttr {
    let mut set = set.clone();
    if attr.file_type == FileType::Symlink {
        set.mode = None;
    }
    let chown = set.uid.is_some() || set.gid.is_some();
    let keeps_bits = matches!(attr.file_type, FileType::Directory | FileType::Symlink);
    if chown && !keeps_bits {
        let killed = match set.mode {
            Some(mode) => without_set_id(mode),
            None => chown_kill(c, attr),
        };
        if set.mode.is_some() || killed != attr.mode {
            set.mode = Some(killed);
        }
    }
    if let Some(mode) = set.mode {
        let gid = set.gid.unwrap_or(attr.gid);
        if mode & 0o2000 != 0 && !c.in_group_or_capable(gid) {
            set.mode = Some(mode & !0o2000);
        }
    }
    set
}

/// The mode a chown leaves on a non-directory (Linux `ATTR_KILL_SUID` and
/// `setattr_should_drop_sgid`): setuid goes; setgid goes if the group may execute, or if
/// the caller is neither in the file's current group nor privileged.
fn chown_kill(c: &Caller<'_>, attr: &Attr) -> u32 {
    let mut mode = attr.mode & !0o4000;
    let group_exec = mode & 0o010 != 0;
    if mode & 0o2000 != 0 && (group_exec || !c.in_group_or_capable(attr.gid)) {
        mode &= !0o2000;
    }
    mode
}

/// What a server that lets its host's kernel decide SETATTR (the host backend acting as
/// its caller) still changes in a SETATTR, as knfsd's `nfsd_sanitize_attrs` does: a
/// symlink's mode is never set, and a mode set together with an owner or group of a
/// non-directory loses its set-id bits ([`without_set_id`]); the kernel clears them on a
/// chown that sets no mode itself.
#[must_use]
pub fn sanitize_setattr(attr: &Attr, set: &SetAttr) -> SetAttr {
    let mut set = set.clone();
    if attr.file_type == FileType::Symlink {
        set.mode = None;
    }
    let chown = set.uid.is_some() || set.gid.is_some();
    if chown && attr.file_type != FileType::Directory {
        set.mode = set.mode.map(without_set_id);
    }
    set
}

/// `mode` without setuid, and without setgid if the group may execute (setgid without
/// group execute means mandatory locking on some systems and is kept).
#[must_use]
pub fn without_set_id(mode: u32) -> u32 {
    let mut m = mode & !0o4000;
    if m & 0o2010 == 0o2010 {
        m &= !0o2000;
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_id_bits_are_cleared_like_linux() {
        assert_eq!(without_set_id(0o4755), 0o755);
        assert_eq!(without_set_id(0o2755), 0o755);
        assert_eq!(without_set_id(0o2745), 0o2745);
        assert_eq!(without_set_id(0o1777), 0o1777);
    }
}
