//! Metadata operations: one database transaction each, row locks in one order.
//!
//! **Lock order** (the same in every operation, so two heads never deadlock on each
//! other; JuiceFS's PostgreSQL deadlocks came from orders that differed):
//!
//! 1. the rename lock (`pg_advisory_xact_lock(RENAME_LOCK)`), taken only by a rename that
//!    moves a directory to another parent, before anything else: such renames run one at
//!    a time across all heads, so the cycle check that follows sees every earlier move
//!    (Linux's `s_vfs_rename_mutex` plays the same part);
//! 2. the `inodes` rows the operation changes or checks, all in one statement, in
//!    ascending id order (`WHERE id = ANY($1) ORDER BY id FOR UPDATE`);
//! 3. `entries` and `slices` rows, only of inodes locked in step 2 (a directory's entries
//!    belong to its inode's lock, a file's slices to the file's).
//!
//! An operation that must know which inodes to lock (the child an entry names) reads the
//! entry first without a lock, locks, and reads it again: if it changed meanwhile, the
//! transaction runs again ([`Fail::Raced`]). Nothing locks `granary_meta` on the way
//! (the ctime floor is written by a timer, see [`crate::backend`]).
//!
//! Timestamps are nanoseconds since the epoch. A change stamps `ctime` (and `mtime` where
//! it moves) with `GREATEST(now, ctime + 1)`: whatever the heads' clocks say, a file's
//! ctime only goes forward, and two changes never share one (seed 000's promise, with
//! the floor per row).

use bytes::Bytes;
use gtime::Timestamp;
use tokio_postgres::Row;
use vfs::{
    Attr, Change, Checks, Cookie, CreateMode, Created, DeviceNumber, DirEntry, DirPage, FileId,
    FileType, FsError, Linked, Name, PreAttr, Renamed, SetAttr, SetTime, SpecialFile,
};

use crate::engine::{Fail, Sql};
use crate::limits::{DIR_ENTRY_BYTES, MAX_DEPTH};

/// `inodes.kind` of each file type.
pub(crate) const KIND_FILE: i16 = 1;
pub(crate) const KIND_DIR: i16 = 2;
const KIND_BLOCK: i16 = 3;
const KIND_CHAR: i16 = 4;
const KIND_SYMLINK: i16 = 5;
const KIND_SOCKET: i16 = 6;
const KIND_FIFO: i16 = 7;

/// Key of the advisory lock of directory moves ("renamedr").
const RENAME_LOCK: i64 = 0x7265_6e61_6d65_6472;

/// Cookies of `.` and `..`; entries' cookies come from a sequence starting past them.
const DOT_COOKIE: u64 = 1;
const DOTDOT_COOKIE: u64 = 2;

/// The `inodes` columns every query returns, in [`inode`]'s order.
pub(crate) const COLS: &str = "id, kind, mode, uid, gid, nlink, size_bytes, rdev_major, \
     rdev_minor, atime_ns, mtime_ns, ctime_ns, parent";

/// One `inodes` row.
#[derive(Debug, Clone)]
pub(crate) struct Inode {
    pub attr: Attr,
    /// The directory holding a directory (the root holds itself); 0 for other files.
    pub parent: i64,
}

impl Inode {
    pub(crate) fn id(&self) -> i64 {
        to_db(self.attr.fileid)
    }
}

pub(crate) fn to_db(id: FileId) -> i64 {
    i64::try_from(id.0).unwrap_or(i64::MAX)
}

fn file_id(id: i64) -> FileId {
    FileId(u64::try_from(id).unwrap_or(0))
}

pub(crate) fn ts(ns: i64) -> Timestamp {
    Timestamp::from_nanos(u64::try_from(ns).unwrap_or(0))
}

pub(crate) fn ns(t: Timestamp) -> i64 {
    i64::try_from(t.as_nanos()).unwrap_or(i64::MAX)
}

fn kind_of(t: FileType) -> i16 {
    match t {
        FileType::Regular => KIND_FILE,
        FileType::Directory => KIND_DIR,
        FileType::BlockDevice => KIND_BLOCK,
        FileType::CharDevice => KIND_CHAR,
        FileType::Symlink => KIND_SYMLINK,
        FileType::Socket => KIND_SOCKET,
        FileType::Fifo => KIND_FIFO,
    }
}

fn file_type(kind: i16) -> Result<FileType, Fail> {
    Ok(match kind {
        KIND_FILE => FileType::Regular,
        KIND_DIR => FileType::Directory,
        KIND_BLOCK => FileType::BlockDevice,
        KIND_CHAR => FileType::CharDevice,
        KIND_SYMLINK => FileType::Symlink,
        KIND_SOCKET => FileType::Socket,
        KIND_FIFO => FileType::Fifo,
        other => {
            tracing::error!(kind = other, "object backend: an inode row of unknown kind");
            return Err(Fail::Fs(FsError::ServerFault));
        }
    })
}

/// An `inodes` row selected with [`COLS`].
pub(crate) fn inode(row: &Row) -> Result<Inode, Fail> {
    inode_at(row, 0)
}

/// The [`COLS`] of an `inodes` row that start at column `at` of `row`.
fn inode_at(row: &Row, at: usize) -> Result<Inode, Fail> {
    let u32_of = |i: usize| u32::try_from(row.get::<_, i64>(at + i)).unwrap_or(0);
    let size = u64::try_from(row.get::<_, i64>(at + 6)).unwrap_or(0);
    Ok(Inode {
        attr: Attr {
            file_type: file_type(row.get(at + 1))?,
            mode: u32::try_from(row.get::<_, i32>(at + 2)).unwrap_or(0) & 0o7777,
            nlink: u32::try_from(row.get::<_, i32>(at + 5)).unwrap_or(0),
            uid: u32_of(3),
            gid: u32_of(4),
            size_bytes: size,
            used_bytes: size,
            rdev: DeviceNumber {
                major: u32_of(7),
                minor: u32_of(8),
            },
            fsid: 0,
            fileid: file_id(row.get(at)),
            generation: 0,
            atime: ts(row.get(at + 9)),
            mtime: ts(row.get(at + 10)),
            ctime: ts(row.get(at + 11)),
        },
        parent: row.get::<_, Option<i64>>(at + 12).unwrap_or(0),
    })
}

/// Columns in [`COLS`]'s order.
pub(crate) const NCOLS: usize = 13;

/// [`COLS`], each qualified by the table alias `t`.
pub(crate) fn cols_of(t: &str) -> String {
    COLS.split(", ")
        .map(|c| format!("{t}.{c}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// One inode, unlocked (`Stale` if it is gone).
pub(crate) async fn get<C: Sql + Sync>(c: &C, id: i64) -> Result<Inode, Fail> {
    let sql = format!("SELECT {COLS} FROM inodes WHERE id = $1");
    match c.query_opt(&sql, &[&id]).await? {
        Some(row) => inode(&row),
        None => Err(Fail::Fs(FsError::Stale)),
    }
}

/// Locks `ids` in ascending order (step 2 of the lock order) and returns their rows;
/// `Stale` if one is gone.
pub(crate) async fn lock<C: Sql + Sync>(c: &C, ids: &[i64]) -> Result<Locked, Fail> {
    let mut ids = ids.to_vec();
    ids.sort_unstable();
    ids.dedup();
    let sql = format!("SELECT {COLS} FROM inodes WHERE id = ANY($1) ORDER BY id FOR UPDATE");
    let rows = c.query(&sql, &[&ids]).await?;
    if rows.len() != ids.len() {
        return Err(Fail::Fs(FsError::Stale));
    }
    Ok(Locked(rows.iter().map(inode).collect::<Result<_, _>>()?))
}

/// Rows locked by [`lock`].
pub(crate) struct Locked(Vec<Inode>);

impl Locked {
    pub(crate) fn of(&self, id: i64) -> Result<&Inode, Fail> {
        self.0
            .iter()
            .find(|i| i.id() == id)
            .ok_or(Fail::Fs(FsError::ServerFault))
    }
}

/// The child `name` names in `dir`.
async fn entry<C: Sql + Sync>(c: &C, dir: i64, name: &Name) -> Result<Option<i64>, Fail> {
    let row = c
        .query_opt(
            "SELECT child FROM entries WHERE dir = $1 AND name = $2",
            &[&dir, &name.as_bytes()],
        )
        .await?;
    Ok(row.map(|r| r.get(0)))
}

/// Stamps a change of `id`: ctime (and mtime when `data`) to `GREATEST(now, ctime + 1)`,
/// size and nlink moved by the deltas.
async fn touch<C: Sql + Sync>(
    c: &C,
    id: i64,
    now: i64,
    data: bool,
    size_delta: i64,
    nlink_delta: i32,
) -> Result<Inode, Fail> {
    let mtime = if data {
        "GREATEST($2, ctime_ns + 1)"
    } else {
        "mtime_ns"
    };
    let sql = format!(
        "UPDATE inodes SET ctime_ns = GREATEST($2, ctime_ns + 1), mtime_ns = {mtime}, \
         size_bytes = size_bytes + $3, nlink = nlink + $4, version = version + 1 \
         WHERE id = $1 RETURNING {COLS}"
    );
    let row = c
        .query_one(&sql, &[&id, &now, &size_delta, &nlink_delta])
        .await?;
    inode(&row)
}

/// A directory's change, bracketed.
fn change(before: &Inode, after: Inode) -> Change {
    Change {
        before: Some(PreAttr::of(&before.attr)),
        after: after.attr,
    }
}

fn require_dir(i: &Inode) -> Result<(), Fail> {
    if i.attr.is_dir() {
        Ok(())
    } else {
        Err(Fail::Fs(FsError::NotDir))
    }
}

/// What a new entry will be.
pub(crate) enum Make<'a> {
    File(&'a CreateMode),
    Dir(&'a SetAttr),
    Symlink(&'a [u8], &'a SetAttr),
    Special(SpecialFile, &'a SetAttr),
}

/// A created (or, for CREATE, reused) file, and whether it was truncated to a size.
pub(crate) struct Made {
    pub created: Created,
    pub truncated_to: Option<u64>,
}

/// CREATE, MKDIR, SYMLINK, MKNOD.
pub(crate) async fn make<C: Sql + Sync>(
    c: &C,
    dir: i64,
    name: &Name,
    what: &Make<'_>,
    checks: &dyn Checks,
    now: i64,
) -> Result<Made, Fail> {
    let seen = entry(c, dir, name).await?;
    let locked = lock(c, &[dir, seen.unwrap_or(dir)]).await?;
    let d = locked.of(dir)?;
    require_dir(d)?;
    checks.may_change_entries(&d.attr)?;
    if entry(c, dir, name).await? != seen {
        return Err(Fail::Raced);
    }
    if let Some(child) = seen {
        let Make::File(mode) = what else {
            return Err(Fail::Fs(FsError::Exist));
        };
        return reuse(c, d, locked.of(child)?, mode, checks, now).await;
    }
    let empty = SetAttr::default();
    let (kind, default_mode, attrs, verifier, target, rdev) = match what {
        Make::File(CreateMode::Unchecked(a) | CreateMode::Guarded(a)) => (
            FileType::Regular,
            0o644,
            a,
            None,
            None,
            DeviceNumber::default(),
        ),
        Make::File(CreateMode::Exclusive(v)) => (
            FileType::Regular,
            0o644,
            &empty,
            Some(&v[..]),
            None,
            DeviceNumber::default(),
        ),
        Make::Dir(a) => (
            FileType::Directory,
            0o755,
            *a,
            None,
            None,
            DeviceNumber::default(),
        ),
        Make::Symlink(t, a) => (
            FileType::Symlink,
            0o777,
            *a,
            None,
            Some(*t),
            DeviceNumber::default(),
        ),
        Make::Special(s, a) => {
            let rdev = match s {
                SpecialFile::BlockDevice(n) | SpecialFile::CharDevice(n) => *n,
                SpecialFile::Socket | SpecialFile::Fifo => DeviceNumber::default(),
            };
            (s.file_type(), 0o644, *a, None, None, rdev)
        }
    };
    let (owner, attrs) = checks.new_file(&d.attr, kind, attrs);
    let is_dir = kind == FileType::Directory;
    let id: i64 = c
        .query_one("SELECT nextval('granary_inode_ids')", &[])
        .await?
        .get(0);
    let time = |t: SetTime| match t {
        SetTime::Client(t) => ns(t),
        SetTime::DontChange | SetTime::ServerTime => now,
    };
    let size = match kind {
        FileType::Regular => attrs.size_bytes.unwrap_or(0),
        FileType::Symlink => target.map_or(0, |t| t.len() as u64),
        _ => 0,
    };
    let sql = format!(
        "INSERT INTO inodes (id, kind, mode, uid, gid, nlink, size_bytes, rdev_major, \
         rdev_minor, atime_ns, mtime_ns, ctime_ns, parent, target, verifier) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15) RETURNING {COLS}"
    );
    let mode = i32::try_from(attrs.mode.unwrap_or(default_mode) & 0o7777).unwrap_or(0o644);
    let row = c
        .query_one(
            &sql,
            &[
                &id,
                &kind_of(kind),
                &mode,
                &i64::from(owner.uid),
                &i64::from(owner.gid),
                &(if is_dir { 2i32 } else { 1i32 }),
                &i64::try_from(size).map_err(|_| Fail::Fs(FsError::FBig))?,
                &i64::from(rdev.major),
                &i64::from(rdev.minor),
                &time(attrs.atime),
                &time(attrs.mtime),
                &now,
                &(if is_dir { Some(dir) } else { None }),
                &target,
                &verifier,
            ],
        )
        .await?;
    let new = inode(&row)?;
    add_entry(c, dir, name, id).await?;
    let after = touch(c, dir, now, true, DIR_ENTRY_BYTES as i64, i32::from(is_dir)).await?;
    Ok(Made {
        created: Created {
            attr: new.attr,
            dir: change(d, after),
        },
        truncated_to: None,
    })
}

async fn add_entry<C: Sql + Sync>(c: &C, dir: i64, name: &Name, child: i64) -> Result<(), Fail> {
    c.execute(
        "INSERT INTO entries (dir, name, child, cookie) \
         VALUES ($1, $2, $3, nextval('granary_cookies'))",
        &[&dir, &name.as_bytes(), &child],
    )
    .await?;
    Ok(())
}

/// CREATE over an existing name (see `Backend::create` and the mem backend's rules).
async fn reuse<C: Sql + Sync>(
    c: &C,
    d: &Inode,
    existing: &Inode,
    mode: &CreateMode,
    checks: &dyn Checks,
    now: i64,
) -> Result<Made, Fail> {
    if existing.attr.file_type != FileType::Regular {
        return Err(Fail::Fs(FsError::Exist));
    }
    let same_dir = Change {
        before: Some(PreAttr::of(&d.attr)),
        after: d.attr.clone(),
    };
    let made = |attr: Attr, truncated_to| Made {
        created: Created {
            attr,
            dir: same_dir.clone(),
        },
        truncated_to,
    };
    match mode {
        CreateMode::Guarded(_) => Err(Fail::Fs(FsError::Exist)),
        CreateMode::Exclusive(v) => {
            let row = c
                .query_one(
                    "SELECT verifier FROM inodes WHERE id = $1",
                    &[&existing.id()],
                )
                .await?;
            let stored: Option<Vec<u8>> = row.get(0);
            if stored.as_deref() == Some(&v[..]) {
                Ok(made(existing.attr.clone(), None))
            } else {
                Err(Fail::Fs(FsError::Exist))
            }
        }
        CreateMode::Unchecked(attrs) => {
            let Some(size) = attrs.size_bytes else {
                return Ok(made(existing.attr.clone(), None));
            };
            checks.may_truncate(&existing.attr)?;
            let after = resize(c, existing, size, now).await?;
            Ok(made(after.attr, Some(size)))
        }
    }
}

/// Sets the size of locked regular file `file`: a shrink deletes the slices past the new
/// end and masks any that straddle it with a zero slice up to the farthest end of any
/// slice left, so a later extension reads zeros (newest wins).
pub(crate) async fn resize<C: Sql + Sync>(
    c: &C,
    file: &Inode,
    size: u64,
    now: i64,
) -> Result<Inode, Fail> {
    let id = file.id();
    let new = i64::try_from(size).map_err(|_| Fail::Fs(FsError::FBig))?;
    let old = i64::try_from(file.attr.size_bytes).unwrap_or(i64::MAX);
    if new < old {
        c.execute(
            "DELETE FROM slices WHERE file = $1 AND offset_bytes >= $2",
            &[&id, &new],
        )
        .await?;
        // The mask reaches as far as any slice left does, not just to the old size: an
        // earlier truncation's mask past the new end is gone with the rows above, and the
        // data it hid must stay hidden.
        c.execute(
            "INSERT INTO slices (file, seq, offset_bytes, length_bytes) \
             SELECT $1, nextval('granary_slice_seq'), $2, reach - $2 FROM \
             (SELECT max(offset_bytes + length_bytes) AS reach FROM slices WHERE file = $1) s \
             WHERE reach > $2",
            &[&id, &new],
        )
        .await?;
    }
    touch(c, id, now, new != old, new - old, 0).await
}

/// What REMOVE or RMDIR did.
pub(crate) struct Removed {
    pub dir: Change,
    /// The file, if its last link went (its buffered writes are dropped).
    pub gone: Option<i64>,
}

/// REMOVE (`rmdir` false) or RMDIR.
pub(crate) async fn remove<C: Sql + Sync>(
    c: &C,
    dir: i64,
    name: &Name,
    rmdir: bool,
    checks: &dyn Checks,
    now: i64,
) -> Result<Removed, Fail> {
    let d = get(c, dir).await?;
    require_dir(&d)?;
    checks.may_change_entries(&d.attr)?;
    let child = entry(c, dir, name).await?.ok_or(Fail::Fs(FsError::NoEnt))?;
    let locked = lock(c, &[dir, child]).await?;
    if entry(c, dir, name).await? != Some(child) {
        return Err(Fail::Raced);
    }
    let (d, v) = (locked.of(dir)?, locked.of(child)?);
    checks.may_change_entries(&d.attr)?;
    checks.may_unlink(&d.attr, &v.attr)?;
    match (rmdir, v.attr.is_dir()) {
        (true, false) => return Err(Fail::Fs(FsError::NotDir)),
        (false, true) => return Err(Fail::Fs(FsError::IsDir)),
        (true, true) if has_entries(c, child).await? => return Err(Fail::Fs(FsError::NotEmpty)),
        _ => {}
    }
    c.execute(
        "DELETE FROM entries WHERE dir = $1 AND name = $2",
        &[&dir, &name.as_bytes()],
    )
    .await?;
    let gone = unlink(c, v, now).await?;
    let after = touch(
        c,
        dir,
        now,
        true,
        -(DIR_ENTRY_BYTES as i64),
        -i32::from(rmdir),
    )
    .await?;
    Ok(Removed {
        dir: change(d, after),
        gone: gone.then_some(child),
    })
}

/// Drops one link of locked `v` (whose entry is already gone): deletes a directory or a
/// file's last link (its slices go with it), else stamps its ctime. True if deleted.
async fn unlink<C: Sql + Sync>(c: &C, v: &Inode, now: i64) -> Result<bool, Fail> {
    if v.attr.is_dir() || v.attr.nlink <= 1 {
        c.execute("DELETE FROM inodes WHERE id = $1", &[&v.id()])
            .await?;
        return Ok(true);
    }
    touch(c, v.id(), now, false, 0, -1).await?;
    Ok(false)
}

async fn has_entries<C: Sql + Sync>(c: &C, dir: i64) -> Result<bool, Fail> {
    Ok(
        c.query_opt("SELECT 1 FROM entries WHERE dir = $1 LIMIT 1", &[&dir])
            .await?
            .is_some(),
    )
}

/// What RENAME did.
pub(crate) struct Moved {
    pub renamed: Renamed,
    /// A file whose last link the rename replaced.
    pub gone: Option<i64>,
}

/// RENAME. A directory moved to another parent first takes the rename lock (see the
/// module's lock order), then its new parent's ancestors are walked: finding the
/// directory among them is a cycle, refused with `Inval`.
pub(crate) async fn rename<C: Sql + Sync>(
    c: &C,
    from_dir: i64,
    from: &Name,
    to_dir: i64,
    to: &Name,
    checks: &dyn Checks,
    now: i64,
) -> Result<Moved, Fail> {
    let Some(moving) = entry(c, from_dir, from).await? else {
        // What the directories say comes first (a file or a stale id is not "no entry").
        for dir in [from_dir, to_dir] {
            let d = get(c, dir).await?;
            require_dir(&d)?;
            checks.may_change_entries(&d.attr)?;
        }
        return Err(Fail::Fs(FsError::NoEnt));
    };
    let moving_row = get(c, moving).await?;
    if moving_row.attr.is_dir() && from_dir != to_dir {
        c.execute("SELECT pg_advisory_xact_lock($1)", &[&RENAME_LOCK])
            .await?;
    }
    let replaced = entry(c, to_dir, to).await?;
    let mut ids = vec![from_dir, to_dir, moving];
    ids.extend(replaced);
    let locked = lock(c, &ids).await?;
    if entry(c, from_dir, from).await? != Some(moving) || entry(c, to_dir, to).await? != replaced {
        return Err(Fail::Raced);
    }
    let (fd, td, m) = (locked.of(from_dir)?, locked.of(to_dir)?, locked.of(moving)?);
    require_dir(fd)?;
    require_dir(td)?;
    checks.may_change_entries(&fd.attr)?;
    checks.may_change_entries(&td.attr)?;
    checks.may_unlink(&fd.attr, &m.attr)?;
    let unchanged = |d: &Inode| Change {
        before: Some(PreAttr::of(&d.attr)),
        after: d.attr.clone(),
    };
    if replaced == Some(moving) {
        // Two names of one file: POSIX says do nothing.
        return Ok(Moved {
            renamed: Renamed {
                from_dir: unchanged(fd),
                to_dir: unchanged(td),
            },
            gone: None,
        });
    }
    let m_dir = m.attr.is_dir();
    if let Some(r) = replaced {
        checks.may_unlink(&td.attr, &locked.of(r)?.attr)?;
    }
    // Linux's order: a move into the moved directory's own subtree is EINVAL before
    // anything about the name it would replace.
    if m_dir && from_dir != to_dir {
        checks.may_move_dir(&m.attr)?;
        refuse_cycle(c, moving, to_dir).await?;
    }
    if let Some(r) = replaced {
        let r = locked.of(r)?;
        match (m_dir, r.attr.is_dir()) {
            (true, false) => return Err(Fail::Fs(FsError::NotDir)),
            (false, true) => return Err(Fail::Fs(FsError::IsDir)),
            (true, true) if has_entries(c, r.id()).await? => {
                return Err(Fail::Fs(FsError::NotEmpty))
            }
            _ => {}
        }
    }
    let mut gone = None;
    if let Some(r) = replaced {
        let r = locked.of(r)?;
        c.execute(
            "DELETE FROM entries WHERE dir = $1 AND name = $2",
            &[&to_dir, &to.as_bytes()],
        )
        .await?;
        if unlink(c, r, now).await? && !r.attr.is_dir() {
            gone = Some(r.id());
        }
    }
    c.execute(
        "UPDATE entries SET dir = $3, name = $4, cookie = nextval('granary_cookies') \
         WHERE dir = $1 AND name = $2",
        &[&from_dir, &from.as_bytes(), &to_dir, &to.as_bytes()],
    )
    .await?;
    if m_dir && from_dir != to_dir {
        c.execute(
            "UPDATE inodes SET parent = $2 WHERE id = $1",
            &[&moving, &to_dir],
        )
        .await?;
    }
    touch(c, moving, now, false, 0, 0).await?;
    let renamed = moved_dirs(c, fd, td, m_dir, replaced.is_some(), now).await?;
    Ok(Moved { renamed, gone })
}

/// Stamps both directories of a rename and moves their sizes and link counts.
async fn moved_dirs<C: Sql + Sync>(
    c: &C,
    fd: &Inode,
    td: &Inode,
    m_dir: bool,
    replaced: bool,
    now: i64,
) -> Result<Renamed, Fail> {
    let entry_bytes = DIR_ENTRY_BYTES as i64;
    if fd.id() == td.id() {
        let size = if replaced { -entry_bytes } else { 0 };
        let replaced_dir = i32::from(replaced && m_dir);
        let after = touch(c, fd.id(), now, true, size, -replaced_dir).await?;
        let ch = change(fd, after);
        return Ok(Renamed {
            from_dir: ch.clone(),
            to_dir: ch,
        });
    }
    let from_after = touch(c, fd.id(), now, true, -entry_bytes, -i32::from(m_dir)).await?;
    // A directory replacing a directory leaves the target's link count as it was.
    let to_links = i32::from(m_dir && !replaced);
    let to_size = if replaced { 0 } else { entry_bytes };
    let to_after = touch(c, td.id(), now, true, to_size, to_links).await?;
    Ok(Renamed {
        from_dir: change(fd, from_after),
        to_dir: change(td, to_after),
    })
}

/// `Inval` if `moving` is `to_dir` or one of its ancestors.
async fn refuse_cycle<C: Sql + Sync>(c: &C, moving: i64, to_dir: i64) -> Result<(), Fail> {
    let mut at = to_dir;
    for _ in 0..MAX_DEPTH {
        if at == moving {
            return Err(Fail::Fs(FsError::Inval));
        }
        let row = c
            .query_one("SELECT parent FROM inodes WHERE id = $1", &[&at])
            .await?;
        let parent: Option<i64> = row.get(0);
        match parent {
            Some(p) if p != at => at = p,
            _ => return Ok(()),
        }
    }
    tracing::error!(
        dir = to_dir,
        "object backend: a directory's parent chain has no root"
    );
    Err(Fail::Fs(FsError::ServerFault))
}

/// LINK.
pub(crate) async fn link<C: Sql + Sync>(
    c: &C,
    file: i64,
    dir: i64,
    name: &Name,
    checks: &dyn Checks,
    now: i64,
) -> Result<Linked, Fail> {
    let locked = lock(c, &[file, dir]).await?;
    let (f, d) = (locked.of(file)?, locked.of(dir)?);
    require_dir(d)?;
    if f.attr.is_dir() {
        return Err(Fail::Fs(FsError::IsDir));
    }
    checks.may_change_entries(&d.attr)?;
    if entry(c, dir, name).await?.is_some() {
        return Err(Fail::Fs(FsError::Exist));
    }
    if f.attr.nlink >= vfs::limits::MAX_LINKS {
        return Err(Fail::Fs(FsError::MLink));
    }
    add_entry(c, dir, name, file).await?;
    let attr = touch(c, file, now, false, 0, 1).await?.attr;
    let after = touch(c, dir, now, true, DIR_ENTRY_BYTES as i64, 0).await?;
    Ok(Linked {
        attr,
        dir: change(d, after),
    })
}

/// SETATTR. Returns the change and, when the size moved, the new size.
///
/// A `guard` (NFSv3's sattrguard3) is compared with the ctime of the row locked here, so
/// a change committed through any head since the client read it answers `NotSync`; or,
/// when this head holds buffered writes of the file, with the ctime their last WRITE
/// told the client (`told`, ns), if later: what this head's GETATTR answers.
pub(crate) async fn setattr<C: Sql + Sync>(
    c: &C,
    id: i64,
    set: &SetAttr,
    guard: Option<Timestamp>,
    told: Option<i64>,
    checks: &dyn Checks,
    now: i64,
) -> Result<(Change, Option<u64>), Fail> {
    let locked = lock(c, &[id]).await?;
    let f = locked.of(id)?;
    let set = checks.setattr_rules(&f.attr, set)?;
    let ctime = told.map_or(f.attr.ctime, |t| f.attr.ctime.max(ts(t)));
    if guard.is_some_and(|g| g != ctime) {
        return Err(Fail::Fs(FsError::NotSync));
    }
    if set.size_bytes.is_some() {
        match f.attr.file_type {
            FileType::Regular => {}
            FileType::Directory => return Err(Fail::Fs(FsError::IsDir)),
            _ => return Err(Fail::Fs(FsError::Inval)),
        }
    }
    if let Some(size) = set.size_bytes {
        resize(c, f, size, now).await?;
    }
    let time = |t: SetTime| -> Option<i64> {
        match t {
            SetTime::DontChange => None,
            SetTime::ServerTime => Some(now),
            SetTime::Client(t) => Some(ns(t)),
        }
    };
    let sql = format!(
        "UPDATE inodes SET mode = COALESCE($2, mode), uid = COALESCE($3, uid), \
         gid = COALESCE($4, gid), atime_ns = COALESCE($5, atime_ns), \
         mtime_ns = COALESCE($6, mtime_ns), ctime_ns = GREATEST($7, ctime_ns + 1), \
         version = version + 1 WHERE id = $1 RETURNING {COLS}"
    );
    let mode = set.mode.map(|m| i32::try_from(m & 0o7777).unwrap_or(0));
    let row = c
        .query_one(
            &sql,
            &[
                &id,
                &mode,
                &set.uid.map(i64::from),
                &set.gid.map(i64::from),
                &time(set.atime),
                &time(set.mtime),
                &now,
            ],
        )
        .await?;
    let after = inode(&row)?;
    Ok((change(f, after), set.size_bytes))
}

/// LOOKUP: the child and the directory, as read now.
pub(crate) async fn lookup<C: Sql + Sync>(
    c: &C,
    dir: i64,
    name: &Name,
    checks: &dyn Checks,
) -> Result<(Inode, Inode), Fail> {
    let d = get(c, dir).await?;
    require_dir(&d)?;
    checks.may_search(&d.attr)?;
    let sql = format!(
        "SELECT {} FROM entries e JOIN inodes i ON i.id = e.child WHERE e.dir = $1 AND e.name = $2",
        cols_of("i")
    );
    let row = c
        .query_opt(&sql, &[&dir, &name.as_bytes()])
        .await?
        .ok_or(Fail::Fs(FsError::NoEnt))?;
    Ok((inode(&row)?, d))
}

/// The parent of directory `dir`.
pub(crate) async fn parent<C: Sql + Sync>(
    c: &C,
    dir: i64,
    checks: &dyn Checks,
) -> Result<(Inode, Inode), Fail> {
    let d = get(c, dir).await?;
    require_dir(&d)?;
    checks.may_search(&d.attr)?;
    let p = get(c, d.parent).await?;
    Ok((p, d))
}

/// READDIR: `.`, `..`, then entries in cookie order, each with its attributes, in one
/// statement (the directory's row and its parent's, and its entries after `cookie`
/// joined to their inodes' rows): a READDIRPLUS reply costs one transaction per page, not
/// one per entry (nor one for `..`), and every attribute in it is as of one snapshot.
pub(crate) async fn readdir<C: Sql + Sync>(
    c: &C,
    dir: i64,
    cookie: Cookie,
    max_entries: usize,
    checks: &dyn Checks,
) -> Result<(DirPage, Attr), Fail> {
    if max_entries == 0 {
        return Err(Fail::Fs(FsError::TooSmall));
    }
    let after =
        i64::try_from(cookie.0.max(DOTDOT_COOKIE)).map_err(|_| Fail::Fs(FsError::BadCookie))?;
    let dots = [DOT_COOKIE, DOTDOT_COOKIE]
        .iter()
        .filter(|&&c_no| c_no > cookie.0)
        .count()
        .min(max_entries);
    let want = (max_entries - dots).min(crate::limits::READDIR_MAX_ENTRIES);
    // The directory's columns and its parent's, then the entry's name and cookie, then
    // the child's columns (NULL after them when the directory has no entries past the
    // cookie). One more entry than wanted says whether the listing goes on.
    let sql = format!(
        "SELECT {}, {}, e.name, e.cookie, {} FROM inodes d \
         LEFT JOIN inodes p ON p.id = d.parent LEFT JOIN LATERAL (\
         SELECT en.name, en.cookie, {} FROM entries en JOIN inodes ch ON ch.id = en.child \
         WHERE en.dir = d.id AND en.cookie > $2 ORDER BY en.cookie LIMIT $3) e ON true \
         WHERE d.id = $1 ORDER BY e.cookie",
        cols_of("d"),
        cols_of("p"),
        cols_of("e"),
        cols_of("ch"),
    );
    let rows = c
        .query(
            &sql,
            &[&dir, &after, &(i64::try_from(want).unwrap_or(0) + 1)],
        )
        .await?;
    let Some(first) = rows.first() else {
        return Err(Fail::Fs(FsError::Stale));
    };
    let d = inode(first)?;
    require_dir(&d)?;
    checks.may_list(&d.attr)?;
    // The parent's row (a directory's parent is never removed before it: RMDIR refuses
    // a directory with entries); should it lack, `..` goes without attributes.
    let p = match first.get::<_, Option<i64>>(NCOLS) {
        Some(_) => Some(inode_at(first, NCOLS)?.attr),
        None => None,
    };
    let mut entries = Vec::new();
    for (c_no, name, id, attr) in [
        (DOT_COOKIE, ".", dir, Some(d.attr.clone())),
        (DOTDOT_COOKIE, "..", d.parent, p),
    ] {
        if c_no > cookie.0 && entries.len() < max_entries {
            entries.push(DirEntry {
                name: Bytes::from_static(name.as_bytes()),
                fileid: file_id(id),
                cookie: Cookie(c_no),
                attr,
            });
        }
    }
    let at = 2 * NCOLS;
    let listed: Vec<&Row> = rows
        .iter()
        .filter(|r| r.get::<_, Option<Vec<u8>>>(at).is_some())
        .collect();
    let more = listed.len() > want;
    for row in listed.into_iter().take(want) {
        let name: Vec<u8> = row.get(at);
        let child = inode_at(row, at + 2)?;
        entries.push(DirEntry {
            name: Bytes::from(name),
            fileid: child.attr.fileid,
            cookie: Cookie(u64::try_from(row.get::<_, i64>(at + 1)).unwrap_or(0)),
            attr: Some(child.attr),
        });
    }
    // With `.`/`..` filling the page, the query still fetched one row (LIMIT 1): `more`.
    let eof = !more;
    Ok((
        DirPage {
            entries,
            eof,
            verifier: 0,
        },
        d.attr,
    ))
}

/// READLINK.
pub(crate) async fn readlink<C: Sql + Sync>(c: &C, id: i64) -> Result<(Bytes, Attr), Fail> {
    let sql = format!("SELECT {COLS}, target FROM inodes WHERE id = $1");
    let row = c
        .query_opt(&sql, &[&id])
        .await?
        .ok_or(Fail::Fs(FsError::Stale))?;
    let i = inode(&row)?;
    if i.attr.file_type != FileType::Symlink {
        return Err(Fail::Fs(FsError::Inval));
    }
    let target: Option<Vec<u8>> = row.get(13);
    Ok((Bytes::from(target.unwrap_or_default()), i.attr))
}
