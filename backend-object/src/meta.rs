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
//! entry in the statement that takes the locks ([`lock_seeing`]), in that statement's
//! snapshot, which predates the locks when it waited for one: its change then checks the
//! entry again under the locks, in the statement that makes it (changing nothing if the
//! entry moved), and the transaction runs again ([`Fail::Raced`]); a name that was free
//! and is taken meanwhile fails the insert of the entry (a unique violation), which runs
//! it again too. Nothing locks `granary_meta` on the way (the ctime floor is written by a
//! timer, see [`crate::backend`]).
//!
//! **Round trips.** A client that waits for each reply waits for every round trip of its
//! call, so each operation sends as few as its decisions allow: the reads an operation
//! decides on come with its locks (one statement), its changes go in one statement
//! (data-modifying CTEs) sent with the COMMIT ([`Sql::query_and_commit`]), and the BEGIN
//! travels with the first statement ([`crate::engine::Tx`]). docs/OBJECT.md has each
//! operation's count; `tests/costs.rs` pins them.
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

/// Step 2 of the lock order together with the reads it depends on: locks `ids` and,
/// when `children`, the inodes the entries `keys` (directory, name) name, all in one
/// statement in ascending id order; returns their rows and what each entry named, in
/// the statement's snapshot (taken before the locks were granted: the change that relies
/// on an entry checks it again, see the module's doc). `Stale` if one of `ids` is gone,
/// `Raced` if an entry named an inode that is gone now.
pub(crate) async fn lock_seeing<C: Sql + Sync>(
    c: &C,
    ids: &[i64],
    keys: &[(i64, &Name)],
    children: bool,
) -> Result<(Locked, Vec<Option<i64>>), Fail> {
    let mut ids = ids.to_vec();
    ids.sort_unstable();
    ids.dedup();
    let dirs: Vec<i64> = keys.iter().map(|k| k.0).collect();
    let names: Vec<&[u8]> = keys.iter().map(|k| k.1.as_bytes()).collect();
    let sql = format!(
        "WITH seen AS (SELECT k.i, e.child FROM unnest($2::bigint[], $3::bytea[]) \
         WITH ORDINALITY AS k(dir, name, i) JOIN entries e ON e.dir = k.dir AND e.name = k.name) \
         SELECT {}, ARRAY(SELECT s.child FROM generate_series(1, cardinality($2::bigint[])) g(i) \
         LEFT JOIN seen s ON s.i = g.i ORDER BY g.i) FROM inodes i \
         WHERE i.id = ANY($1::bigint[] || ARRAY(SELECT child FROM seen WHERE $4)) \
         ORDER BY i.id FOR UPDATE OF i",
        cols_of("i")
    );
    let rows = c.query(&sql, &[&ids, &dirs, &names, &children]).await?;
    let locked = Locked(rows.iter().map(inode).collect::<Result<_, _>>()?);
    if ids.iter().any(|&id| locked.of(id).is_err()) {
        return Err(Fail::Fs(FsError::Stale));
    }
    let seen: Vec<Option<i64>> = rows.first().map(|r| r.get(NCOLS)).unwrap_or_default();
    if children
        && seen
            .iter()
            .flatten()
            .any(|&child| locked.of(child).is_err())
    {
        return Err(Fail::Raced);
    }
    Ok((locked, seen))
}

/// The [`COLS`] at column `at` of `row`, or `None` where an outer join found no row.
fn inode_opt(row: &Row, at: usize) -> Result<Option<Inode>, Fail> {
    match row.get::<_, Option<i64>>(at) {
        Some(_) => inode_at(row, at).map(Some),
        None => Ok(None),
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

/// CREATE, MKDIR, SYMLINK, MKNOD: two round trips for a new name. The first locks the
/// directory (and, for a CREATE that may reuse a file, the file the name names) and reads
/// the entry; the second inserts the inode and the entry and stamps the directory, in one
/// statement sent with the COMMIT. A name taken since the first (another head's create
/// committed while this one waited for the lock) fails the entry's insert, and the
/// transaction runs again.
pub(crate) async fn make<C: Sql + Sync>(
    c: &C,
    dir: i64,
    name: &Name,
    what: &Make<'_>,
    checks: &dyn Checks,
    now: i64,
) -> Result<Made, Fail> {
    let reusable = matches!(
        what,
        Make::File(CreateMode::Unchecked(_) | CreateMode::Exclusive(_))
    );
    let (locked, seen) = lock_seeing(c, &[dir], &[(dir, name)], reusable).await?;
    let d = locked.of(dir)?;
    require_dir(d)?;
    checks.may_change_entries(&d.attr)?;
    if let Some(child) = seen.first().copied().flatten() {
        let Make::File(mode) = what else {
            return Err(Fail::Fs(FsError::Exist));
        };
        if !reusable {
            return Err(Fail::Fs(FsError::Exist));
        }
        // Read before the lock was granted: the name may name another file by now.
        if entry(c, dir, name).await? != Some(child) {
            return Err(Fail::Raced);
        }
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
    let time = |t: SetTime| match t {
        SetTime::Client(t) => ns(t),
        SetTime::DontChange | SetTime::ServerTime => now,
    };
    let size = match kind {
        FileType::Regular => attrs.size_bytes.unwrap_or(0),
        FileType::Symlink => target.map_or(0, |t| t.len() as u64),
        _ => 0,
    };
    // The new inode's row, its entry, the directory stamped (ctime and mtime as
    // `touch`): the new row's columns, then the directory's.
    let sql = format!(
        "WITH n AS (INSERT INTO inodes (id, kind, mode, uid, gid, nlink, size_bytes, \
         rdev_major, rdev_minor, atime_ns, mtime_ns, ctime_ns, parent, target, verifier) \
         VALUES (nextval('granary_inode_ids'), $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, \
         $13, $14, $15) RETURNING {COLS}), \
         e AS (INSERT INTO entries (dir, name, child, cookie) \
         SELECT $1::bigint, $16::bytea, n.id, nextval('granary_cookies') FROM n), \
         d AS (UPDATE inodes SET ctime_ns = GREATEST($12, ctime_ns + 1), \
         mtime_ns = GREATEST($12, ctime_ns + 1), size_bytes = size_bytes + $17, \
         nlink = nlink + $18, version = version + 1 WHERE id = $1 RETURNING {COLS}) \
         SELECT n.*, d.* FROM n, d"
    );
    let mode = i32::try_from(attrs.mode.unwrap_or(default_mode) & 0o7777).unwrap_or(0o644);
    let rows = c
        .query_and_commit(
            &sql,
            &[
                &dir,
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
                &name.as_bytes(),
                &(DIR_ENTRY_BYTES as i64),
                &i32::from(is_dir),
            ],
        )
        .await?;
    let row = rows.first().ok_or(Fail::Fs(FsError::ServerFault))?;
    let (new, after) = (inode(row)?, inode_at(row, NCOLS)?);
    Ok(Made {
        created: Created {
            attr: new.attr,
            dir: change(d, after),
        },
        truncated_to: None,
    })
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

/// REMOVE (`rmdir` false) or RMDIR: two round trips. The first locks the directory and
/// the file its entry names; the second, sent with the COMMIT, checks under the locks that
/// the entry still names that file (else it changes nothing and the transaction runs
/// again) and that a directory is empty, drops the entry, drops the file's row or one of
/// its links, and stamps the directory.
pub(crate) async fn remove<C: Sql + Sync>(
    c: &C,
    dir: i64,
    name: &Name,
    rmdir: bool,
    checks: &dyn Checks,
    now: i64,
) -> Result<Removed, Fail> {
    let (locked, seen) = lock_seeing(c, &[dir], &[(dir, name)], true).await?;
    let d = locked.of(dir)?;
    require_dir(d)?;
    checks.may_change_entries(&d.attr)?;
    let child = seen
        .first()
        .copied()
        .flatten()
        .ok_or(Fail::Fs(FsError::NoEnt))?;
    let v = locked.of(child)?;
    checks.may_unlink(&d.attr, &v.attr)?;
    match (rmdir, v.attr.is_dir()) {
        (true, false) => return Err(Fail::Fs(FsError::NotDir)),
        (false, true) => return Err(Fail::Fs(FsError::IsDir)),
        _ => {}
    }
    // A directory or a file's last link goes with its row (its slices with it), else the
    // file loses a link and its ctime moves.
    let drop_row = v.attr.is_dir() || v.attr.nlink <= 1;
    let sql = format!(
        "WITH ok AS (SELECT \
         EXISTS (SELECT 1 FROM entries WHERE dir = $1 AND name = $2 AND child = $3) AS named, \
         EXISTS (SELECT 1 FROM entries WHERE dir = $3) AS occupied), \
         gone AS (DELETE FROM entries WHERE dir = $1 AND name = $2 AND child = $3 \
         AND (SELECT named AND NOT occupied FROM ok) RETURNING child), \
         dropped AS (DELETE FROM inodes WHERE id = $3 AND $4 AND EXISTS (SELECT 1 FROM gone)), \
         kept AS (UPDATE inodes SET ctime_ns = GREATEST($5, ctime_ns + 1), nlink = nlink - 1, \
         version = version + 1 WHERE id = $3 AND NOT $4 AND EXISTS (SELECT 1 FROM gone)), \
         d AS (UPDATE inodes SET ctime_ns = GREATEST($5, ctime_ns + 1), \
         mtime_ns = GREATEST($5, ctime_ns + 1), size_bytes = size_bytes - $6, \
         nlink = nlink - $7, version = version + 1 \
         WHERE id = $1 AND EXISTS (SELECT 1 FROM gone) RETURNING {COLS}) \
         SELECT ok.named, ok.occupied, d.* FROM ok LEFT JOIN d ON true"
    );
    let rows = c
        .query_and_commit(
            &sql,
            &[
                &dir,
                &name.as_bytes(),
                &child,
                &drop_row,
                &now,
                &(DIR_ENTRY_BYTES as i64),
                &i32::from(rmdir),
            ],
        )
        .await?;
    let row = rows.first().ok_or(Fail::Fs(FsError::ServerFault))?;
    let (named, occupied): (bool, bool) = (row.get(0), row.get(1));
    if !named {
        return Err(Fail::Raced);
    }
    if occupied {
        return Err(Fail::Fs(FsError::NotEmpty));
    }
    let after = inode_opt(row, 2)?.ok_or(Fail::Fs(FsError::ServerFault))?;
    Ok(Removed {
        dir: change(d, after),
        gone: drop_row.then_some(child),
    })
}

/// What RENAME did.
pub(crate) struct Moved {
    pub renamed: Renamed,
    /// A file whose last link the rename replaced.
    pub gone: Option<i64>,
}

/// RENAME: two round trips for a file (or a directory kept in its parent). The first
/// locks both directories and the files both entries name and reads the entries; the
/// second, sent with the COMMIT, checks under the locks that both entries still name
/// what they named (else it changes nothing and the transaction runs again) and that a
/// directory it replaces is empty, moves the entry (or points the replaced one at the
/// moved file), drops the replaced file's row or one of its links, and stamps the moved
/// file and both directories.
///
/// A directory moved to another parent takes the rename lock before anything else (see
/// the module's lock order), so the first try, which finds that out under its row locks,
/// ends with [`Fail::DirMove`] and the caller runs it again with `dir_move` set; then
/// the new parent's ancestors are walked (one statement): finding the directory among
/// them is a cycle, refused with `Inval`.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn rename<C: Sql + Sync>(
    c: &C,
    from_dir: i64,
    from: &Name,
    to_dir: i64,
    to: &Name,
    checks: &dyn Checks,
    now: i64,
    dir_move: bool,
) -> Result<Moved, Fail> {
    if dir_move {
        c.execute("SELECT pg_advisory_xact_lock($1)", &[&RENAME_LOCK])
            .await?;
    }
    let keys = [(from_dir, from), (to_dir, to)];
    let (locked, seen) = lock_seeing(c, &[from_dir, to_dir], &keys, true).await?;
    let (fd, td) = (locked.of(from_dir)?, locked.of(to_dir)?);
    let named = |i: usize| seen.get(i).copied().flatten();
    let Some(moving) = named(0) else {
        // What the directories say comes first (a file is not "no entry").
        for d in [fd, td] {
            require_dir(d)?;
            checks.may_change_entries(&d.attr)?;
        }
        return Err(Fail::Fs(FsError::NoEnt));
    };
    let replaced = named(1);
    let m = locked.of(moving)?;
    let m_dir = m.attr.is_dir();
    let reparent = m_dir && from_dir != to_dir;
    if reparent && !dir_move {
        return Err(Fail::DirMove);
    }
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
    let r = match replaced {
        Some(r) => Some(locked.of(r)?),
        None => None,
    };
    if let Some(r) = r {
        checks.may_unlink(&td.attr, &r.attr)?;
    }
    // Linux's order: a move into the moved directory's own subtree is EINVAL before
    // anything about the name it would replace.
    if reparent {
        checks.may_move_dir(&m.attr)?;
        refuse_cycle(c, moving, to_dir).await?;
    }
    if let Some(r) = r {
        match (m_dir, r.attr.is_dir()) {
            (true, false) => return Err(Fail::Fs(FsError::NotDir)),
            (false, true) => return Err(Fail::Fs(FsError::IsDir)),
            _ => {}
        }
    }
    // The replaced file's row goes if it is a directory or this was its last link.
    let drop_replaced = r.is_some_and(|r| r.attr.is_dir() || r.attr.nlink <= 1);
    // Sizes and link counts of the directories: the one directory's, or each one's.
    let entry_bytes = DIR_ENTRY_BYTES as i64;
    let is_replaced = replaced.is_some();
    let (from_delta, to_delta) = if from_dir == to_dir {
        let size = if is_replaced { -entry_bytes } else { 0 };
        ((size, -i32::from(is_replaced && m_dir)), (0, 0))
    } else {
        // A directory replacing a directory leaves the target's link count as it was.
        let to_size = if is_replaced { 0 } else { entry_bytes };
        (
            (-entry_bytes, -i32::from(m_dir)),
            (to_size, i32::from(m_dir && !is_replaced)),
        )
    };
    let sql = format!(
        "WITH ok AS (SELECT \
         EXISTS (SELECT 1 FROM entries WHERE dir = $1 AND name = $2 AND child = $5) \
         AND CASE WHEN $6::bigint IS NULL \
         THEN NOT EXISTS (SELECT 1 FROM entries WHERE dir = $3 AND name = $4) \
         ELSE EXISTS (SELECT 1 FROM entries WHERE dir = $3 AND name = $4 AND child = $6) END \
         AS named, EXISTS (SELECT 1 FROM entries WHERE dir = $6) AS occupied), \
         go AS (SELECT named AND NOT occupied AS go FROM ok), \
         moved AS (UPDATE entries SET dir = $3, name = $4, cookie = nextval('granary_cookies') \
         WHERE $6::bigint IS NULL AND dir = $1 AND name = $2 AND child = $5 \
         AND (SELECT go FROM go)), \
         over AS (UPDATE entries SET child = $5, cookie = nextval('granary_cookies') \
         WHERE dir = $3 AND name = $4 AND child = $6 AND (SELECT go FROM go)), \
         left_behind AS (DELETE FROM entries WHERE $6::bigint IS NOT NULL AND dir = $1 \
         AND name = $2 AND child = $5 AND (SELECT go FROM go)), \
         dropped AS (DELETE FROM inodes WHERE id = $6 AND $7 AND (SELECT go FROM go)), \
         files AS (UPDATE inodes SET ctime_ns = GREATEST($8, ctime_ns + 1), \
         parent = CASE WHEN id = $5 AND $9 THEN $3 ELSE parent END, \
         nlink = nlink - CASE WHEN id = $5 THEN 0 ELSE 1 END, version = version + 1 \
         WHERE (id = $5 OR (id = $6 AND NOT $7)) AND (SELECT go FROM go)), \
         d AS (UPDATE inodes SET ctime_ns = GREATEST($8, ctime_ns + 1), \
         mtime_ns = GREATEST($8, ctime_ns + 1), \
         size_bytes = size_bytes + CASE WHEN id = $1 THEN $10::bigint ELSE $12::bigint END, \
         nlink = nlink + CASE WHEN id = $1 THEN $11::int ELSE $13::int END, version = version + 1 \
         WHERE (id = $1 OR id = $3) AND (SELECT go FROM go) RETURNING {COLS}) \
         SELECT ok.named, ok.occupied, d.* FROM ok LEFT JOIN d ON true"
    );
    let rows = c
        .query_and_commit(
            &sql,
            &[
                &from_dir,
                &from.as_bytes(),
                &to_dir,
                &to.as_bytes(),
                &moving,
                &replaced,
                &drop_replaced,
                &now,
                &reparent,
                &from_delta.0,
                &from_delta.1,
                &to_delta.0,
                &to_delta.1,
            ],
        )
        .await?;
    let first = rows.first().ok_or(Fail::Fs(FsError::ServerFault))?;
    let (named, occupied): (bool, bool) = (first.get(0), first.get(1));
    if !named {
        return Err(Fail::Raced);
    }
    if occupied {
        return Err(Fail::Fs(FsError::NotEmpty));
    }
    let mut after = Vec::new();
    for row in &rows {
        after.extend(inode_opt(row, 2)?);
    }
    let after = Locked(after);
    let renamed = Renamed {
        from_dir: change(fd, after.of(from_dir)?.clone()),
        to_dir: change(td, after.of(to_dir)?.clone()),
    };
    let gone = r
        .filter(|r| drop_replaced && !r.attr.is_dir())
        .map(Inode::id);
    Ok(Moved { renamed, gone })
}

/// `Inval` if `moving` is `to_dir` or one of its ancestors: `to_dir`'s chain of parents
/// walked in one statement, up to [`MAX_DEPTH`].
async fn refuse_cycle<C: Sql + Sync>(c: &C, moving: i64, to_dir: i64) -> Result<(), Fail> {
    let depth = i32::try_from(MAX_DEPTH).unwrap_or(i32::MAX);
    let row = c
        .query_one(
            "WITH RECURSIVE up(id, parent, depth) AS (\
             SELECT id, parent, 1 FROM inodes WHERE id = $1 \
             UNION ALL SELECT i.id, i.parent, up.depth + 1 FROM up \
             JOIN inodes i ON i.id = up.parent \
             WHERE up.parent <> up.id AND up.id <> $2 AND up.depth < $3) \
             SELECT coalesce(bool_or(id = $2), false), \
             coalesce(bool_or(parent IS NULL OR parent = id), false) FROM up",
            &[&to_dir, &moving, &depth],
        )
        .await?;
    let (cycle, rooted): (bool, bool) = (row.get(0), row.get(1));
    if cycle {
        return Err(Fail::Fs(FsError::Inval));
    }
    if !rooted {
        tracing::error!(
            dir = to_dir,
            "object backend: a directory's parent chain has no root"
        );
        return Err(Fail::Fs(FsError::ServerFault));
    }
    Ok(())
}

/// LINK: two round trips. The first locks the file and the directory and reads the
/// entry; the second, sent with the COMMIT, inserts the entry (a name taken since fails
/// it, and the transaction runs again) and stamps both.
pub(crate) async fn link<C: Sql + Sync>(
    c: &C,
    file: i64,
    dir: i64,
    name: &Name,
    checks: &dyn Checks,
    now: i64,
) -> Result<Linked, Fail> {
    let (locked, seen) = lock_seeing(c, &[file, dir], &[(dir, name)], false).await?;
    let (f, d) = (locked.of(file)?, locked.of(dir)?);
    require_dir(d)?;
    if f.attr.is_dir() {
        return Err(Fail::Fs(FsError::IsDir));
    }
    checks.may_change_entries(&d.attr)?;
    if seen.first().copied().flatten().is_some() {
        return Err(Fail::Fs(FsError::Exist));
    }
    if f.attr.nlink >= vfs::limits::MAX_LINKS {
        return Err(Fail::Fs(FsError::MLink));
    }
    // The file gains a link and a ctime, the directory an entry, a ctime and an mtime.
    let sql = format!(
        "WITH e AS (INSERT INTO entries (dir, name, child, cookie) \
         VALUES ($1, $2, $3, nextval('granary_cookies'))) \
         UPDATE inodes SET ctime_ns = GREATEST($4, ctime_ns + 1), \
         mtime_ns = CASE WHEN id = $1 THEN GREATEST($4, ctime_ns + 1) ELSE mtime_ns END, \
         size_bytes = size_bytes + CASE WHEN id = $1 THEN $5::bigint ELSE 0 END, \
         nlink = nlink + CASE WHEN id = $3 THEN 1 ELSE 0 END, version = version + 1 \
         WHERE id = $1 OR id = $3 RETURNING {COLS}"
    );
    let rows = c
        .query_and_commit(
            &sql,
            &[
                &dir,
                &name.as_bytes(),
                &file,
                &now,
                &(DIR_ENTRY_BYTES as i64),
            ],
        )
        .await?;
    let after = Locked(rows.iter().map(inode).collect::<Result<_, _>>()?);
    Ok(Linked {
        attr: after.of(file)?.attr.clone(),
        dir: change(d, after.of(dir)?.clone()),
    })
}

/// SETATTR: two round trips. The first locks the row; the second, sent with the
/// COMMIT, changes it (and, for a size, the slices: those past a new, smaller end go and
/// a zero slice masks one that straddles it, as [`resize`]). Returns the change and,
/// when the size was set, the new size.
///
/// A `guard` (NFSv3's sattrguard3) is compared with the ctime of the row locked here, so
/// a change committed through any head since the client read it answers `NotSync`; or,
/// when this head holds buffered writes of the file, with the ctime their last WRITE
/// told the client (`told`, ns), if later: what this head's GETATTR answers.
///
/// `cut(size)` is called once the row is locked and every check passed, before the
/// statement and its COMMIT are sent: the head cuts its buffered writes there (see
/// `truncated` in lib.rs).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn setattr<C: Sql + Sync>(
    c: &C,
    id: i64,
    set: &SetAttr,
    guard: Option<Timestamp>,
    told: Option<i64>,
    checks: &dyn Checks,
    now: i64,
    cut: &(dyn Fn(u64) + Sync),
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
    let time = |t: SetTime| -> Option<i64> {
        match t {
            SetTime::DontChange => None,
            SetTime::ServerTime => Some(now),
            SetTime::Client(t) => Some(ns(t)),
        }
    };
    let mode = set.mode.map(|m| i32::try_from(m & 0o7777).unwrap_or(0));
    let (uid, gid) = (set.uid.map(i64::from), set.gid.map(i64::from));
    let (atime, mtime) = (time(set.atime), time(set.mtime));
    let rows = match set.size_bytes {
        None => {
            let sql = format!(
                "UPDATE inodes SET mode = COALESCE($2, mode), uid = COALESCE($3, uid), \
                 gid = COALESCE($4, gid), atime_ns = COALESCE($5, atime_ns), \
                 mtime_ns = COALESCE($6, mtime_ns), ctime_ns = GREATEST($7, ctime_ns + 1), \
                 version = version + 1 WHERE id = $1 RETURNING {COLS}"
            );
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 7] =
                [&id, &mode, &uid, &gid, &atime, &mtime, &now];
            c.query_and_commit(&sql, &params).await?
        }
        Some(size) => {
            let new = i64::try_from(size).map_err(|_| Fail::Fs(FsError::FBig))?;
            let old = i64::try_from(f.attr.size_bytes).unwrap_or(i64::MAX);
            cut(size);
            // A shrink ($8 < $9) deletes the slices past the new end and masks what is
            // left past it with a zero slice up to the farthest end of any slice left
            // (an earlier mask past the new end goes with the rows above, and what it hid
            // must stay hidden); a size that moves moves mtime too, unless it is set.
            let sql = format!(
                "WITH gone AS (DELETE FROM slices WHERE $8::bigint < $9::bigint AND file = $1 \
                 AND offset_bytes >= $8), \
                 mask AS (INSERT INTO slices (file, seq, offset_bytes, length_bytes) \
                 SELECT $1, nextval('granary_slice_seq'), $8, reach - $8 FROM \
                 (SELECT max(offset_bytes + length_bytes) AS reach FROM slices \
                 WHERE file = $1 AND offset_bytes < $8) s WHERE $8 < $9 AND reach > $8) \
                 UPDATE inodes SET mode = COALESCE($2, mode), uid = COALESCE($3, uid), \
                 gid = COALESCE($4, gid), atime_ns = COALESCE($5, atime_ns), \
                 mtime_ns = COALESCE($6, CASE WHEN $8 <> $9 \
                 THEN GREATEST($7, ctime_ns + 1) ELSE mtime_ns END), \
                 ctime_ns = GREATEST($7, ctime_ns + 1), size_bytes = $8, \
                 version = version + 1 WHERE id = $1 RETURNING {COLS}"
            );
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 9] =
                [&id, &mode, &uid, &gid, &atime, &mtime, &now, &new, &old];
            c.query_and_commit(&sql, &params).await?
        }
    };
    let row = rows.first().ok_or(Fail::Fs(FsError::Stale))?;
    let after = inode(row)?;
    Ok((change(f, after), set.size_bytes))
}

/// LOOKUP: the child and the directory, as read now, in one statement.
pub(crate) async fn lookup<C: Sql + Sync>(
    c: &C,
    dir: i64,
    name: &Name,
    checks: &dyn Checks,
) -> Result<(Inode, Inode), Fail> {
    let sql = format!(
        "SELECT {}, {} FROM inodes d LEFT JOIN entries e ON e.dir = d.id AND e.name = $2 \
         LEFT JOIN inodes i ON i.id = e.child WHERE d.id = $1",
        cols_of("d"),
        cols_of("i")
    );
    let row = c
        .query_opt(&sql, &[&dir, &name.as_bytes()])
        .await?
        .ok_or(Fail::Fs(FsError::Stale))?;
    let d = inode(&row)?;
    require_dir(&d)?;
    checks.may_search(&d.attr)?;
    let child = inode_opt(&row, NCOLS)?.ok_or(Fail::Fs(FsError::NoEnt))?;
    Ok((child, d))
}

/// The parent of directory `dir`, in one statement.
pub(crate) async fn parent<C: Sql + Sync>(
    c: &C,
    dir: i64,
    checks: &dyn Checks,
) -> Result<(Inode, Inode), Fail> {
    let sql = format!(
        "SELECT {}, {} FROM inodes d LEFT JOIN inodes p ON p.id = d.parent WHERE d.id = $1",
        cols_of("d"),
        cols_of("p")
    );
    let row = c
        .query_opt(&sql, &[&dir])
        .await?
        .ok_or(Fail::Fs(FsError::Stale))?;
    let d = inode(&row)?;
    require_dir(&d)?;
    checks.may_search(&d.attr)?;
    let p = inode_opt(&row, NCOLS)?.ok_or(Fail::Fs(FsError::Stale))?;
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
