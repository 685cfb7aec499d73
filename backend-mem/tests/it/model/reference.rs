//! The reference model: nodes with whole-file byte vectors, explicit sets of allocated
//! chunks, and entries in sorted maps. Written for obviousness, not speed; it encodes the
//! order in which the backend reports errors (see `rename.rs` and `namespace.rs`).

use std::collections::{BTreeMap, BTreeSet};

use granary_backend_mem::{ENTRY_CHARGE_BYTES, INODE_CHARGE_BYTES};
use vfs::{FileType, FsError};

use super::{
    number_groups, write_data, How, Op, Out, Picker, Place, Res, Shape, Tree, C, CAPACITY_BYTES,
    MAX_FILES,
};

type NodeId = usize;
const ROOT: NodeId = 0;

/// Bytes one directory entry named `name` is charged (the backend's rule, restated).
fn entry(name: &str) -> u64 {
    ENTRY_CHARGE_BYTES + name.len() as u64
}

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
    /// Names of a non-directory (directories count their subdirectories instead).
    nlink: u32,
}

#[derive(Debug)]
pub(super) struct Model {
    nodes: BTreeMap<NodeId, Node>,
    next: NodeId,
    used_bytes: u64,
    files: u64,
}

fn to_usize(value: u64) -> usize {
    usize::try_from(value).expect("test sizes fit in memory")
}

impl Model {
    pub(super) fn new() -> Self {
        let root = Node {
            kind: Kind::Dir {
                entries: BTreeMap::new(),
                parent: ROOT,
            },
            nlink: 1,
        };
        Self {
            nodes: BTreeMap::from([(ROOT, root)]),
            next: 1,
            used_bytes: INODE_CHARGE_BYTES,
            files: 1,
        }
    }

    pub(super) fn used_bytes(&self) -> u64 {
        self.used_bytes
    }

    pub(super) fn files(&self) -> u64 {
        self.files
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

    fn resolve_dir(&self, path: &[String]) -> Res<NodeId> {
        path.iter()
            .try_fold(ROOT, |current, name| self.lookup(current, name))
    }

    fn resolve(&self, place: &Place) -> Res<NodeId> {
        self.lookup(self.resolve_dir(&place.dir)?, &place.name)
    }

    // ------------------------------------------------------------------------------------
    // Observations.

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

    pub(super) fn root_shape(&self) -> Shape {
        self.shape(ROOT)
    }

    /// Every entry as (place, id), depth first.
    fn walk(&self) -> Vec<(Place, NodeId)> {
        let mut out = Vec::new();
        let mut pending = vec![(Vec::new(), ROOT)];
        while let Some((path, dir)) = pending.pop() {
            for (name, &id) in self.entries(dir).expect("directory") {
                if self.is_dir(id) {
                    let mut child = path.clone();
                    child.push(name.clone());
                    pending.push((child, id));
                }
                let place = Place {
                    dir: path.clone(),
                    name: name.clone(),
                };
                out.push((place, id));
            }
        }
        out
    }

    pub(super) fn tree(&self) -> Tree {
        let paths = self
            .walk()
            .into_iter()
            .map(|(place, id)| (super::real::path_string(&place), (self.shape(id), id)))
            .collect();
        number_groups(paths)
    }

    pub(super) fn picker(&self) -> Picker {
        let entries: Vec<(Place, NodeId)> = self.walk();
        let mut dirs: Vec<Vec<String>> = entries
            .iter()
            .filter(|(_, id)| self.is_dir(*id))
            .map(|(place, _)| {
                let mut path = place.dir.clone();
                path.push(place.name.clone());
                path
            })
            .collect();
        dirs.push(Vec::new());
        dirs.sort();
        let by_path = |a: &Place, b: &Place| (&a.dir, &a.name).cmp(&(&b.dir, &b.name));
        let mut files: Vec<Place> = entries
            .iter()
            .filter(|(_, id)| matches!(self.node(*id).kind, Kind::File { .. }))
            .map(|(place, _)| place.clone())
            .collect();
        files.sort_by(by_path);
        let mut entries: Vec<Place> = entries.into_iter().map(|(place, _)| place).collect();
        entries.sort_by(by_path);
        Picker {
            dirs,
            entries,
            files,
        }
    }

    pub(super) fn files_by_path(&self) -> Vec<(Place, Vec<u8>)> {
        self.walk()
            .into_iter()
            .filter_map(|(place, id)| match &self.node(id).kind {
                Kind::File { data, .. } => Some((place, data.clone())),
                _ => None,
            })
            .collect()
    }

    // ------------------------------------------------------------------------------------
    // Operations.

    pub(super) fn apply(&mut self, op: &Op<Place>) -> Res<Out> {
        match op {
            Op::Create(at, how) => self.create(at, *how),
            Op::Mkdir(at) => {
                let dir = self.resolve_dir(&at.dir)?;
                let kind = Kind::Dir {
                    entries: BTreeMap::new(),
                    parent: dir,
                };
                self.add(dir, &at.name, kind)
            }
            Op::Symlink(at, len) => {
                self.add(self.resolve_dir(&at.dir)?, &at.name, Kind::Symlink(*len))
            }
            Op::Mknod(at) => self.add(self.resolve_dir(&at.dir)?, &at.name, Kind::Fifo),
            Op::Write {
                at,
                offset,
                len,
                byte,
                zero_head,
            } => self.write(at, *offset, &write_data(*len, *byte, *zero_head)),
            Op::Truncate(at, size) => self.truncate(at, *size),
            Op::Remove(at) => self.remove(at, false),
            Op::Rmdir(at) => self.remove(at, true),
            Op::Rename(from, to) => self.rename(from, to),
            Op::Link(source, to) => self.link(source, to),
            Op::Read(at, offset, count) => self.read(at, *offset, *count),
            Op::Readdir(at) => {
                let entries = self.entries(self.resolve(at)?)?;
                Ok(Out::Names(entries.keys().cloned().collect()))
            }
            Op::Getattr(at) => Ok(Out::Attr(self.shape(self.resolve(at)?))),
        }
    }

    /// Adds a new node after the checks every create-like operation makes, in order.
    fn add(&mut self, dir: NodeId, name: &str, kind: Kind) -> Res<Out> {
        if self.entries(dir)?.contains_key(name) {
            return Err(FsError::Exist);
        }
        if self.files + 1 > MAX_FILES {
            return Err(FsError::NoSpc);
        }
        let body = match kind {
            Kind::Symlink(len) => len as u64,
            _ => 0,
        };
        let bytes = INODE_CHARGE_BYTES + body + entry(name);
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

    fn create(&mut self, at: &Place, how: How) -> Res<Out> {
        let dir = self.resolve_dir(&at.dir)?;
        let Ok(existing) = self.lookup(dir, &at.name) else {
            let kind = match how {
                How::Guarded(size) | How::Unchecked(size) => Self::file(size.unwrap_or(0), None),
                How::Exclusive(v) => Self::file(0, Some(v)),
            };
            return self.add(dir, &at.name, kind);
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

    fn truncate(&mut self, at: &Place, size: u64) -> Res<Out> {
        let id = self.resolve(at)?;
        self.regular(id)?;
        self.truncate_node(id, size);
        Ok(Out::Done)
    }

    /// Chunks a write newly allocates: those it gives a non-zero byte that have none yet.
    fn new_chunks(chunks: &BTreeSet<u64>, offset: u64, data: &[u8]) -> BTreeSet<u64> {
        data.iter()
            .enumerate()
            .filter(|(_, &b)| b != 0)
            .map(|(i, _)| (offset + i as u64) / C)
            .filter(|index| !chunks.contains(index))
            .collect()
    }

    fn write(&mut self, at: &Place, offset: u64, data: &[u8]) -> Res<Out> {
        let id = self.resolve(at)?;
        self.regular(id)?;
        if data.is_empty() {
            return Ok(Out::Done);
        }
        let Some(Node {
            kind:
                Kind::File {
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
        if self.used_bytes + new.len() as u64 * C > CAPACITY_BYTES {
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

    fn read(&self, at: &Place, offset: u64, count: u32) -> Res<Out> {
        let id = self.resolve(at)?;
        self.regular(id)?;
        let Kind::File { data, .. } = &self.node(id).kind else {
            unreachable!("checked regular");
        };
        let start = to_usize(offset).min(data.len());
        let end = (start + count as usize).min(data.len());
        Ok(Out::Data(data[start..end].to_vec(), end >= data.len()))
    }

    /// Drops one name of `id`; frees it when none is left (directories have only one).
    fn unlink(&mut self, id: NodeId) {
        let node = self.nodes.get_mut(&id).expect("live node");
        node.nlink -= 1;
        if node.nlink == 0 || self.is_dir(id) {
            self.used_bytes -= self.charged(id) + INODE_CHARGE_BYTES;
            self.files -= 1;
            self.nodes.remove(&id);
        }
    }

    fn remove(&mut self, at: &Place, rmdir: bool) -> Res<Out> {
        let dir = self.resolve_dir(&at.dir)?;
        let victim = self.lookup(dir, &at.name)?;
        match (self.is_dir(victim), rmdir) {
            (true, false) => return Err(FsError::IsDir),
            (false, true) => return Err(FsError::NotDir),
            _ => {}
        }
        if rmdir && !self.entries(victim)?.is_empty() {
            return Err(FsError::NotEmpty);
        }
        self.entries_mut(dir).remove(&at.name);
        self.used_bytes -= entry(&at.name);
        self.unlink(victim);
        Ok(Out::Done)
    }

    /// True if `dir` is `moving` or below it.
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

    fn check_replace(&self, moving: NodeId, replaced: NodeId) -> Res<()> {
        match (self.is_dir(moving), self.is_dir(replaced)) {
            (false, true) => Err(FsError::IsDir),
            (true, false) => Err(FsError::NotDir),
            (true, true) if !self.entries(replaced)?.is_empty() => Err(FsError::NotEmpty),
            _ => Ok(()),
        }
    }

    fn rename(&mut self, from: &Place, to: &Place) -> Res<Out> {
        let from_dir = self.resolve_dir(&from.dir)?;
        let to_dir = self.resolve_dir(&to.dir)?;
        self.entries(from_dir)?;
        let replaced = self.entries(to_dir)?.get(&to.name).copied();
        let moving = self.lookup(from_dir, &from.name)?;
        if replaced == Some(moving) {
            return Ok(Out::Done);
        }
        if self.is_dir(moving) && self.inside(moving, to_dir) {
            return Err(FsError::Inval);
        }
        if let Some(replaced) = replaced {
            self.check_replace(moving, replaced)?;
        }
        // The names' charge moves from `from` (and a replaced `to`) to the new `to`.
        let old = entry(&from.name) + replaced.map_or(0, |_| entry(&to.name));
        let new = entry(&to.name);
        if self.used_bytes + new.saturating_sub(old) > CAPACITY_BYTES {
            return Err(FsError::NoSpc);
        }
        self.used_bytes = self.used_bytes + new - old;
        if let Some(replaced) = replaced {
            self.entries_mut(to_dir).remove(&to.name);
            self.unlink(replaced);
        }
        self.entries_mut(from_dir).remove(&from.name);
        self.entries_mut(to_dir).insert(to.name.clone(), moving);
        if let Some(Node {
            kind: Kind::Dir { parent, .. },
            ..
        }) = self.nodes.get_mut(&moving)
        {
            *parent = to_dir;
        }
        Ok(Out::Done)
    }

    fn link(&mut self, source: &Place, to: &Place) -> Res<Out> {
        let id = self.resolve(source)?;
        let to_dir = self.resolve_dir(&to.dir)?;
        let exists = self.entries(to_dir)?.contains_key(&to.name);
        if self.is_dir(id) {
            return Err(FsError::IsDir);
        }
        if exists {
            return Err(FsError::Exist);
        }
        if self.used_bytes + entry(&to.name) > CAPACITY_BYTES {
            return Err(FsError::NoSpc);
        }
        self.used_bytes += entry(&to.name);
        self.entries_mut(to_dir).insert(to.name.clone(), id);
        self.nodes.get_mut(&id).expect("live node").nlink += 1;
        Ok(Out::Done)
    }
}
