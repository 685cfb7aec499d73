//! Random operation sequences against `MemFs` and against a small reference model, over a
//! tiny name space so that names collide, directories nest and caps are hit. Every result
//! (error kind, bytes read, listings) is compared, and after every step the whole tree:
//! paths, types, sizes, allocated bytes, link counts, which paths are the same file, and
//! the free space and file counts. File contents are compared at the end of each case.
//!
//! Set `PROPTEST_CASES` to run more than the default 64 cases.

use std::collections::{BTreeMap, BTreeSet};

use granary_backend_mem::{MemConfig, MemFs, CHUNK_BYTES};
use proptest::prelude::*;
use vfs::{Backend, Cookie, CreateMode, FileId, FileType, FsError, SetAttr, SpecialFile, Stability};

use crate::fixture::{n, Fx, OWNER};

const C: u64 = CHUNK_BYTES;
const CAPACITY_BYTES: u64 = 6 * C;
const MAX_FILES: u64 = 10;
const NAMES: [&str; 4] = ["a", "b", "c", "d"];
/// Directory paths that may or may not exist (or be directories) when an operation runs.
const FIXED_DIRS: [&[&str]; 5] = [&[], &["a"], &["b"], &["a", "b"], &["b", "a", "c"]];
/// Range of directory selectors: three in four pick an existing directory (so operations
/// mostly do something), one in four a fixed path (so path walking fails too).
const DIR_SELECTORS: usize = 64;

/// The directory paths a step may start from, fixed before the step runs.
#[derive(Debug, Default)]
struct Dirs {
    existing: Vec<Vec<String>>,
}

impl Dirs {
    fn path(&self, selector: usize) -> Vec<String> {
        if selector % 4 == 0 || self.existing.is_empty() {
            let fixed = FIXED_DIRS[(selector / 4) % FIXED_DIRS.len()];
            return fixed.iter().map(|&c| c.to_owned()).collect();
        }
        self.existing[(selector / 4) % self.existing.len()].clone()
    }
}

type Res<T> = Result<T, FsError>;

// ----------------------------------------------------------------------------------------
// Operations.

#[derive(Debug, Clone, Copy)]
enum How {
    Guarded(Option<u64>),
    Unchecked(Option<u64>),
    Exclusive(u8),
}

/// A place: a directory path (index into `DIRS`) and a name (index into `NAMES`).
#[derive(Debug, Clone, Copy)]
struct At(usize, usize);

#[derive(Debug, Clone)]
enum Op {
    Create(At, How),
    Mkdir(At),
    Symlink(At, usize),
    Mknod(At),
    Write {
        at: At,
        offset: u64,
        len: usize,
        byte: u8,
        zero_head: bool,
    },
    Truncate(At, u64),
    Remove(At),
    Rmdir(At),
    Rename(At, At),
    Link(At, At),
    Read(At, u64, u32),
    Readdir(usize),
    Getattr(At),
}

/// What an operation answered, in a form both sides can produce.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Out {
    Done,
    Data(Vec<u8>, bool),
    Names(BTreeSet<String>),
    Attr(Shape),
}

/// The attributes the model predicts.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Shape {
    file_type: FileType,
    size_bytes: u64,
    used_bytes: u64,
    nlink: u32,
}

fn at() -> impl Strategy<Value = At> {
    (0..DIR_SELECTORS, 0..NAMES.len()).prop_map(|(d, n)| At(d, n))
}

fn offset() -> impl Strategy<Value = u64> {
    prop_oneof![
        0..4 * C,
        0..300u64,
        (0..5u64).prop_map(|k| k * C),
        (1..5u64).prop_map(|k| k * C - 1),
    ]
}

fn size() -> impl Strategy<Value = u64> {
    prop_oneof![0..3 * C, Just(0), (0..4u64).prop_map(|k| k * C + 1)]
}

fn how() -> impl Strategy<Value = How> {
    prop_oneof![
        proptest::option::of(size()).prop_map(How::Guarded),
        proptest::option::of(size()).prop_map(How::Unchecked),
        (0..2u8).prop_map(How::Exclusive),
    ]
}

fn write() -> impl Strategy<Value = Op> {
    let len = prop_oneof![0..16usize, 0..(C as usize + 16)];
    let byte = prop_oneof![Just(0u8), 1..=255u8];
    (at(), offset(), len, byte, any::<bool>()).prop_map(|(at, offset, len, byte, zero_head)| {
        Op::Write {
            at,
            offset,
            len,
            byte,
            zero_head,
        }
    })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (at(), how()).prop_map(|(a, h)| Op::Create(a, h)),
        3 => at().prop_map(Op::Mkdir),
        1 => (at(), 1..6usize).prop_map(|(a, len)| Op::Symlink(a, len)),
        1 => at().prop_map(Op::Mknod),
        4 => write(),
        2 => (at(), size()).prop_map(|(a, s)| Op::Truncate(a, s)),
        2 => at().prop_map(Op::Remove),
        2 => at().prop_map(Op::Rmdir),
        3 => (at(), at()).prop_map(|(a, b)| Op::Rename(a, b)),
        2 => (at(), at()).prop_map(|(a, b)| Op::Link(a, b)),
        2 => (at(), offset(), 0..(2 * C as u32)).prop_map(|(a, o, c)| Op::Read(a, o, c)),
        1 => (0..DIR_SELECTORS).prop_map(Op::Readdir),
        1 => at().prop_map(Op::Getattr),
    ]
}

fn write_data(len: usize, byte: u8, zero_head: bool) -> Vec<u8> {
    (0..len)
        .map(|i| if zero_head && i < len / 2 { 0 } else { byte })
        .collect()
}

fn to_usize(value: u64) -> usize {
    usize::try_from(value).expect("test sizes fit in memory")
}

// ----------------------------------------------------------------------------------------
// The reference model: nodes with whole-file byte vectors and explicit chunk sets.

type NodeId = usize;
const ROOT: NodeId = 0;

#[derive(Debug, Clone)]
enum Kind {
    File {
        data: Vec<u8>,
        chunks: BTreeSet<u64>,
        verifier: Option<u8>,
    },
    Dir {
        entries: BTreeMap<String, NodeId>,
        parent: NodeId,
    },
    Symlink(usize),
    Fifo,
}

#[derive(Debug, Clone)]
struct Node {
    kind: Kind,
    nlink: u32,
}

#[derive(Debug)]
struct Model {
    nodes: BTreeMap<NodeId, Node>,
    next: NodeId,
    used_bytes: u64,
    files: u64,
    dirs: Dirs,
}

impl Model {
    fn new() -> Self {
        let root = Node {
            kind: Kind::Dir {
                entries: BTreeMap::new(),
                parent: ROOT,
            },
            nlink: 2,
        };
        Self {
            nodes: BTreeMap::from([(ROOT, root)]),
            next: 1,
            used_bytes: 0,
            files: 1,
            dirs: Dirs::default(),
        }
    }

    /// Fixes the directories the next step may pick.
    fn refresh_dirs(&mut self) {
        let mut existing = vec![Vec::new()];
        let mut pending = vec![(Vec::new(), ROOT)];
        while let Some((path, dir)) = pending.pop() {
            for (name, &id) in self.entries(dir).expect("directory") {
                if self.is_dir(id) {
                    let mut child: Vec<String> = path.clone();
                    child.push(name.clone());
                    existing.push(child.clone());
                    pending.push((child, id));
                }
            }
        }
        existing.sort();
        self.dirs = Dirs { existing };
    }

    fn node(&self, id: NodeId) -> &Node {
        &self.nodes[&id]
    }

    fn entries(&self, id: NodeId) -> Res<&BTreeMap<String, NodeId>> {
        match &self.node(id).kind {
            Kind::Dir { entries, .. } => Ok(entries),
            _ => Err(FsError::NotDir),
        }
    }

    fn entries_mut(&mut self, id: NodeId) -> &mut BTreeMap<String, NodeId> {
        match &mut self.nodes.get_mut(&id).expect("live node").kind {
            Kind::Dir { entries, .. } => entries,
            _ => panic!("not a directory"),
        }
    }

    fn is_dir(&self, id: NodeId) -> bool {
        matches!(self.node(id).kind, Kind::Dir { .. })
    }

    fn lookup(&self, dir: NodeId, name: &str) -> Res<NodeId> {
        self.entries(dir)?.get(name).copied().ok_or(FsError::NoEnt)
    }

    fn resolve(&self, dir: usize) -> Res<NodeId> {
        self.dirs
            .path(dir)
            .iter()
            .try_fold(ROOT, |current, name| self.lookup(current, name))
    }

    fn resolve_at(&self, At(dir, name): At) -> Res<NodeId> {
        self.lookup(self.resolve(dir)?, NAMES[name])
    }

    fn nlink(&self, id: NodeId) -> u32 {
        match &self.node(id).kind {
            Kind::Dir { entries, .. } => {
                2 + entries.values().filter(|&&c| self.is_dir(c)).count() as u32
            }
            _ => self.node(id).nlink,
        }
    }

    fn charged(&self, id: NodeId) -> u64 {
        match &self.node(id).kind {
            Kind::File { chunks, .. } => chunks.len() as u64 * C,
            Kind::Symlink(len) => *len as u64,
            Kind::Dir { .. } | Kind::Fifo => 0,
        }
    }

    fn shape(&self, id: NodeId) -> Shape {
        let (file_type, size_bytes) = match &self.node(id).kind {
            Kind::File { data, .. } => (FileType::Regular, data.len() as u64),
            Kind::Dir { entries, .. } => (FileType::Directory, 32 * (entries.len() as u64 + 2)),
            Kind::Symlink(len) => (FileType::Symlink, *len as u64),
            Kind::Fifo => (FileType::Fifo, 0),
        };
        Shape {
            file_type,
            size_bytes,
            used_bytes: self.charged(id),
            nlink: self.nlink(id),
        }
    }

    /// Adds a new node after the common checks of every create-like operation.
    fn add(&mut self, dir: NodeId, name: &str, kind: Kind) -> Res<Out> {
        if self.entries(dir)?.contains_key(name) {
            return Err(FsError::Exist);
        }
        if self.files + 1 > MAX_FILES {
            return Err(FsError::NoSpc);
        }
        let bytes = match kind {
            Kind::Symlink(len) => len as u64,
            _ => 0,
        };
        if self.used_bytes + bytes > CAPACITY_BYTES {
            return Err(FsError::NoSpc);
        }
        self.used_bytes += bytes;
        self.files += 1;
        let id = self.next;
        self.next += 1;
        self.nodes.insert(id, Node { kind, nlink: 1 });
        self.entries_mut(dir).insert(name.to_owned(), id);
        Ok(Out::Done)
    }

    fn file(size: u64, verifier: Option<u8>) -> Kind {
        Kind::File {
            data: vec![0; to_usize(size)],
            chunks: BTreeSet::new(),
            verifier,
        }
    }

    fn create(&mut self, At(dir, name): At, how: How) -> Res<Out> {
        let dir = self.resolve(dir)?;
        let name = NAMES[name];
        let Ok(existing) = self.lookup(dir, name) else {
            let kind = match how {
                How::Guarded(size) | How::Unchecked(size) => Self::file(size.unwrap_or(0), None),
                How::Exclusive(v) => Self::file(0, Some(v)),
            };
            return self.add(dir, name, kind);
        };
        let Kind::File { verifier, .. } = &self.node(existing).kind else {
            return Err(FsError::Exist);
        };
        match how {
            How::Guarded(_) => Err(FsError::Exist),
            How::Exclusive(v) if *verifier == Some(v) => Ok(Out::Done),
            How::Exclusive(_) => Err(FsError::Exist),
            How::Unchecked(size) => {
                if let Some(size) = size {
                    self.truncate_node(existing, size);
                }
                Ok(Out::Done)
            }
        }
    }

    fn regular(&self, id: NodeId) -> Res<()> {
        match self.node(id).kind {
            Kind::File { .. } => Ok(()),
            Kind::Dir { .. } => Err(FsError::IsDir),
            _ => Err(FsError::Inval),
        }
    }

    fn truncate_node(&mut self, id: NodeId, size: u64) {
        let Some(Node {
            kind: Kind::File { data, chunks, .. },
            ..
        }) = self.nodes.get_mut(&id)
        else {
            panic!("truncating a non-file");
        };
        data.resize(to_usize(size), 0);
        let before = chunks.len() as u64;
        chunks.retain(|&index| index < size.div_ceil(C));
        self.used_bytes -= (before - chunks.len() as u64) * C;
    }

    fn truncate(&mut self, at: At, size: u64) -> Res<Out> {
        let id = self.resolve_at(at)?;
        self.regular(id)?;
        self.truncate_node(id, size);
        Ok(Out::Done)
    }

    /// Chunks a write of `data` at `offset` newly allocates: the ones it touches that are
    /// not allocated yet and receive a non-zero byte.
    fn new_chunks(chunks: &BTreeSet<u64>, offset: u64, data: &[u8]) -> BTreeSet<u64> {
        data.iter()
            .enumerate()
            .filter(|(_, &b)| b != 0)
            .map(|(i, _)| (offset + i as u64) / C)
            .filter(|index| !chunks.contains(index))
            .collect()
    }

    fn write(&mut self, at: At, offset: u64, data: &[u8]) -> Res<Out> {
        let id = self.resolve_at(at)?;
        self.regular(id)?;
        if data.is_empty() {
            return Ok(Out::Done);
        }
        let used = self.used_bytes;
        let Some(Node {
            kind: Kind::File {
                data: contents,
                chunks,
                ..
            },
            ..
        }) = self.nodes.get_mut(&id)
        else {
            unreachable!("checked regular");
        };
        let new = Self::new_chunks(chunks, offset, data);
        if used + new.len() as u64 * C > CAPACITY_BYTES {
            return Err(FsError::NoSpc);
        }
        let start = to_usize(offset);
        let end = start + data.len();
        if contents.len() < end {
            contents.resize(end, 0);
        }
        contents[start..end].copy_from_slice(data);
        self.used_bytes += new.len() as u64 * C;
        chunks.extend(new);
        Ok(Out::Done)
    }

    fn read(&self, at: At, offset: u64, count: u32) -> Res<Out> {
        let id = self.resolve_at(at)?;
        self.regular(id)?;
        let Kind::File { data, .. } = &self.node(id).kind else {
            unreachable!("checked regular");
        };
        let start = to_usize(offset).min(data.len());
        let end = (start + count as usize).min(data.len());
        Ok(Out::Data(data[start..end].to_vec(), end >= data.len()))
    }

    /// Drops one name of `id`; frees it when none is left.
    fn unlink(&mut self, id: NodeId) {
        let node = self.nodes.get_mut(&id).expect("live node");
        node.nlink -= 1;
        if node.nlink == 0 || self.is_dir(id) {
            self.used_bytes -= self.charged(id);
            self.files -= 1;
            self.nodes.remove(&id);
        }
    }

    fn remove(&mut self, At(dir, name): At, rmdir: bool) -> Res<Out> {
        let dir = self.resolve(dir)?;
        let name = NAMES[name];
        let victim = self.lookup(dir, name)?;
        match (self.is_dir(victim), rmdir) {
            (true, false) => return Err(FsError::IsDir),
            (false, true) => return Err(FsError::NotDir),
            _ => {}
        }
        if rmdir && !self.entries(victim)?.is_empty() {
            return Err(FsError::NotEmpty);
        }
        self.entries_mut(dir).remove(name);
        self.unlink(victim);
        Ok(Out::Done)
    }

    fn inside(&self, moving: NodeId, dir: NodeId) -> bool {
        let mut current = dir;
        loop {
            if current == moving {
                return true;
            }
            if current == ROOT {
                return false;
            }
            let Kind::Dir { parent, .. } = self.node(current).kind else {
                unreachable!("parents are directories");
            };
            current = parent;
        }
    }

    fn rename(&mut self, At(fd, f): At, At(td, t): At) -> Res<Out> {
        let (from_dir, to_dir) = (self.resolve(fd)?, self.resolve(td)?);
        let (from, to) = (NAMES[f], NAMES[t]);
        self.entries(from_dir)?;
        let replaced = self.entries(to_dir)?.get(to).copied();
        let moving = self.lookup(from_dir, from)?;
        if replaced == Some(moving) {
            return Ok(Out::Done);
        }
        let moving_dir = self.is_dir(moving);
        if moving_dir && self.inside(moving, to_dir) {
            return Err(FsError::Inval);
        }
        if let Some(replaced) = replaced {
            match (moving_dir, self.is_dir(replaced)) {
                (false, true) => return Err(FsError::IsDir),
                (true, false) => return Err(FsError::NotDir),
                (true, true) if !self.entries(replaced)?.is_empty() => {
                    return Err(FsError::NotEmpty)
                }
                _ => {}
            }
            self.entries_mut(to_dir).remove(to);
            self.unlink(replaced);
        }
        self.entries_mut(from_dir).remove(from);
        self.entries_mut(to_dir).insert(to.to_owned(), moving);
        if let Some(Node {
            kind: Kind::Dir { parent, .. },
            ..
        }) = self.nodes.get_mut(&moving)
        {
            *parent = to_dir;
        }
        Ok(Out::Done)
    }

    fn link(&mut self, source: At, At(td, t): At) -> Res<Out> {
        let id = self.resolve_at(source)?;
        let to_dir = self.resolve(td)?;
        self.entries(to_dir)?;
        if self.is_dir(id) {
            return Err(FsError::IsDir);
        }
        if self.entries(to_dir)?.contains_key(NAMES[t]) {
            return Err(FsError::Exist);
        }
        self.entries_mut(to_dir).insert(NAMES[t].to_owned(), id);
        self.nodes.get_mut(&id).expect("live node").nlink += 1;
        Ok(Out::Done)
    }

    fn apply(&mut self, op: &Op) -> Res<Out> {
        match *op {
            Op::Create(at, how) => self.create(at, how),
            Op::Mkdir(At(d, name)) => {
                let dir = self.resolve(d)?;
                let kind = Kind::Dir {
                    entries: BTreeMap::new(),
                    parent: dir,
                };
                self.add(dir, NAMES[name], kind)
            }
            Op::Symlink(At(d, name), len) => {
                let dir = self.resolve(d)?;
                self.add(dir, NAMES[name], Kind::Symlink(len))
            }
            Op::Mknod(At(d, name)) => {
                let dir = self.resolve(d)?;
                self.add(dir, NAMES[name], Kind::Fifo)
            }
            Op::Write {
                at,
                offset,
                len,
                byte,
                zero_head,
            } => self.write(at, offset, &write_data(len, byte, zero_head)),
            Op::Truncate(at, size) => self.truncate(at, size),
            Op::Remove(at) => self.remove(at, false),
            Op::Rmdir(at) => self.remove(at, true),
            Op::Rename(from, to) => self.rename(from, to),
            Op::Link(source, to) => self.link(source, to),
            Op::Read(at, offset, count) => self.read(at, offset, count),
            Op::Readdir(d) => {
                let entries = self.entries(self.resolve(d)?)?;
                Ok(Out::Names(entries.keys().cloned().collect()))
            }
            Op::Getattr(at) => Ok(Out::Attr(self.shape(self.resolve_at(at)?))),
        }
    }
}

// ----------------------------------------------------------------------------------------
// The same operations on `MemFs`.

fn resolve(fs: &MemFs, dirs: &Dirs, dir: usize) -> Res<FileId> {
    dirs.path(dir)
        .iter()
        .try_fold(fs.root(), |current, name| fs.lookup(current, &n(name)))
}

fn resolve_at(fs: &MemFs, dirs: &Dirs, At(dir, name): At) -> Res<FileId> {
    fs.lookup(resolve(fs, dirs, dir)?, &n(NAMES[name]))
}

fn shape(fs: &MemFs, id: FileId) -> Shape {
    let attr = fs.getattr(id).expect("getattr of a listed file");
    Shape {
        file_type: attr.file_type,
        size_bytes: attr.size_bytes,
        used_bytes: attr.used_bytes,
        nlink: attr.nlink,
    }
}

/// Names in `dir` without `.` and `..`, with their ids, from a listing in small pages.
fn listing(fs: &MemFs, dir: FileId) -> Res<BTreeMap<String, FileId>> {
    let mut cookie = Cookie::START;
    let mut out = BTreeMap::new();
    loop {
        let page = fs.readdir(dir, cookie, 3)?;
        for entry in &page.entries {
            let name = String::from_utf8_lossy(&entry.name).into_owned();
            if name != "." && name != ".." {
                assert!(out.insert(name, entry.fileid).is_none(), "listed twice");
            }
            cookie = entry.cookie;
        }
        if page.eof {
            return Ok(out);
        }
    }
}

fn size_attr(size: Option<u64>) -> SetAttr {
    SetAttr {
        size_bytes: size,
        ..SetAttr::default()
    }
}

fn real_create(fs: &MemFs, dirs: &Dirs, At(d, name): At, how: How) -> Res<FileId> {
    let mode = match how {
        How::Guarded(size) => CreateMode::Guarded(size_attr(size)),
        How::Unchecked(size) => CreateMode::Unchecked(size_attr(size)),
        How::Exclusive(v) => CreateMode::Exclusive([v; 8]),
    };
    fs.create(resolve(fs, dirs, d)?, &n(NAMES[name]), &mode, OWNER)
}

fn real_make(fs: &MemFs, dirs: &Dirs, op: &Op) -> Res<FileId> {
    let none = SetAttr::default();
    match *op {
        Op::Mkdir(At(d, name)) => fs.mkdir(resolve(fs, dirs, d)?, &n(NAMES[name]), &none, OWNER),
        Op::Symlink(At(d, name), len) => {
            let target = vec![b't'; len];
            fs.symlink(resolve(fs, dirs, d)?, &n(NAMES[name]), &target, &none, OWNER)
        }
        Op::Mknod(At(d, name)) => {
            let fifo = SpecialFile::Fifo;
            fs.mknod(resolve(fs, dirs, d)?, &n(NAMES[name]), fifo, &none, OWNER)
        }
        _ => unreachable!("not a make operation"),
    }
}

fn done<T>(_: T) -> Out {
    Out::Done
}

fn real_apply(fs: &MemFs, dirs: &Dirs, op: &Op) -> Res<Out> {
    match *op {
        Op::Create(at, how) => real_create(fs, dirs, at, how).map(done),
        Op::Mkdir(_) | Op::Symlink(..) | Op::Mknod(_) => real_make(fs, dirs, op).map(done),
        Op::Write {
            at,
            offset,
            len,
            byte,
            zero_head,
        } => {
            let data = write_data(len, byte, zero_head);
            let reply = fs.write(resolve_at(fs, dirs, at)?, offset, &data, Stability::FileSync)?;
            assert_eq!(reply.count as usize, len);
            Ok(Out::Done)
        }
        Op::Truncate(at, size) => {
            let attr = fs.setattr(resolve_at(fs, dirs, at)?, &size_attr(Some(size)), None)?;
            assert_eq!(attr.size_bytes, size);
            Ok(Out::Done)
        }
        Op::Remove(At(d, name)) => fs.remove(resolve(fs, dirs, d)?, &n(NAMES[name])).map(done),
        Op::Rmdir(At(d, name)) => fs.rmdir(resolve(fs, dirs, d)?, &n(NAMES[name])).map(done),
        Op::Rename(At(fd, f), At(td, t)) => {
            let (from_dir, to_dir) = (resolve(fs, dirs, fd)?, resolve(fs, dirs, td)?);
            fs.rename(from_dir, &n(NAMES[f]), to_dir, &n(NAMES[t])).map(done)
        }
        Op::Link(source, At(td, t)) => {
            let id = resolve_at(fs, dirs, source)?;
            fs.link(id, resolve(fs, dirs, td)?, &n(NAMES[t])).map(done)
        }
        Op::Read(at, offset, count) => {
            let reply = fs.read(resolve_at(fs, dirs, at)?, offset, count)?;
            Ok(Out::Data(reply.data.to_vec(), reply.eof))
        }
        Op::Readdir(d) => {
            let names = listing(fs, resolve(fs, dirs, d)?)?;
            Ok(Out::Names(names.into_keys().collect()))
        }
        Op::Getattr(at) => Ok(Out::Attr(shape(fs, resolve_at(fs, dirs, at)?))),
    }
}

// ----------------------------------------------------------------------------------------
// Whole-tree comparison.

/// Every path with its shape and a group number shared by paths naming the same file
/// (numbered by first appearance in path order, so both sides number alike).
type Tree = BTreeMap<String, (Shape, usize)>;

fn number_groups<K: Ord + Copy>(paths: BTreeMap<String, (Shape, K)>) -> Tree {
    let mut groups = BTreeMap::new();
    paths
        .into_iter()
        .map(|(path, (shape, key))| {
            let next = groups.len();
            let group = *groups.entry(key).or_insert(next);
            (path, (shape, group))
        })
        .collect()
}

fn real_tree(fs: &MemFs) -> Tree {
    let mut paths = BTreeMap::new();
    let mut pending = vec![(String::new(), fs.root())];
    while let Some((path, dir)) = pending.pop() {
        for (name, id) in listing(fs, dir).expect("listing a directory") {
            let child = format!("{path}/{name}");
            let shape = shape(fs, id);
            if shape.file_type == FileType::Directory {
                assert_eq!(fs.parent(id), Ok(dir));
                pending.push((child.clone(), id));
            }
            paths.insert(child, (shape, id));
        }
    }
    number_groups(paths)
}

fn model_tree(model: &Model) -> Tree {
    let mut paths = BTreeMap::new();
    let mut pending = vec![(String::new(), ROOT)];
    while let Some((path, dir)) = pending.pop() {
        for (name, &id) in model.entries(dir).expect("directory") {
            let child = format!("{path}/{name}");
            if model.is_dir(id) {
                pending.push((child.clone(), id));
            }
            paths.insert(child, (model.shape(id), id));
        }
    }
    number_groups(paths)
}

fn check_trees(fs: &MemFs, model: &Model) {
    assert_eq!(real_tree(fs), model_tree(model));
    assert_eq!(shape(fs, fs.root()), model.shape(ROOT));
    let stat = fs.fsstat().expect("fsstat");
    assert_eq!(stat.free_bytes, CAPACITY_BYTES - model.used_bytes);
    assert_eq!(stat.free_files, MAX_FILES - model.files);
}

fn check_contents(fx: &Fx, model: &Model) {
    for (path, _) in model_tree(model) {
        let components: Vec<&str> = path.split('/').skip(1).collect();
        let id = components
            .iter()
            .try_fold(fx.root(), |dir, name| fx.fs.lookup(dir, &n(name)))
            .expect("path resolves");
        let mut node = ROOT;
        for name in &components {
            node = model.lookup(node, name).expect("model path");
        }
        if let Kind::File { data, .. } = &model.node(node).kind {
            assert!(fx.contents(id) == *data, "contents of {path} differ");
        }
    }
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn mem_matches_the_model(ops in proptest::collection::vec(op(), 1..48)) {
        let fx = Fx::with(MemConfig {
            capacity_bytes: CAPACITY_BYTES,
            max_files: MAX_FILES,
            ..MemConfig::default()
        });
        let mut model = Model::new();
        for (step, op) in ops.iter().enumerate() {
            model.refresh_dirs();
            let want = model.apply(op);
            let got = real_apply(&fx.fs, &model.dirs, op);
            prop_assert_eq!(&got, &want, "step {} {:?}", step, op);
            eprintln!("STAT {:?} {:?}", std::mem::discriminant(op), got.as_ref().map(|_| ()).map_err(|e| *e));
            check_trees(&fx.fs, &model);
        }
        check_contents(&fx, &model);
    }
}
