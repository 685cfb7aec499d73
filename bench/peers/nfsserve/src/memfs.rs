//! An in-memory file system for nfsserve's `NFSFileSystem`: regular files, directories
//! and symbolic links in one map from file id to node, behind one mutex. Directory
//! entries are kept sorted by name, so READDIR resumes after the name of the entry whose
//! id the client sends back. The bytes of all files together are bounded by the capacity
//! given at start (NOSPC beyond it).

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use nfsserve::nfs::{
    fattr3, fileid3, filename3, ftype3, nfspath3, nfsstat3, nfsstring, nfstime3, sattr3, set_atime,
    set_gid3, set_mode3, set_mtime, set_size3, set_uid3, specdata3,
};
use nfsserve::vfs::{DirEntry, NFSFileSystem, ReadDirResult, VFSCapabilities};

const ROOT: fileid3 = 1;
const NAME_MAX: usize = 255;

enum Body {
    File(Vec<u8>),
    Dir(BTreeMap<Vec<u8>, fileid3>),
    Symlink(Vec<u8>),
}

struct Node {
    attr: fattr3,
    /// The name in its parent directory (READDIR resumes after it).
    name: Vec<u8>,
    /// The directory that holds it (the root holds itself).
    parent: fileid3,
    body: Body,
}

struct State {
    nodes: HashMap<fileid3, Node>,
    next_id: fileid3,
    used_bytes: u64,
}

pub struct MemFs {
    state: Mutex<State>,
    capacity_bytes: u64,
}

fn now() -> nfstime3 {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    nfstime3 {
        seconds: u32::try_from(d.as_secs()).unwrap_or(u32::MAX),
        nseconds: d.subsec_nanos(),
    }
}

fn new_attr(id: fileid3, ftype: ftype3, mode: u32) -> fattr3 {
    let t = now();
    fattr3 {
        ftype,
        mode,
        nlink: if matches!(ftype, ftype3::NF3DIR) {
            2
        } else {
            1
        },
        uid: 0,
        gid: 0,
        size: 0,
        used: 0,
        rdev: specdata3::default(),
        fsid: 0,
        fileid: id,
        atime: t,
        mtime: t,
        ctime: t,
    }
}

fn check_name(name: &filename3) -> Result<(), nfsstat3> {
    match name.0.as_slice() {
        [] | b"." | b".." => Err(nfsstat3::NFS3ERR_INVAL),
        n if n.contains(&b'/') => Err(nfsstat3::NFS3ERR_INVAL),
        n if n.len() > NAME_MAX => Err(nfsstat3::NFS3ERR_NAMETOOLONG),
        _ => Ok(()),
    }
}

impl State {
    fn node(&self, id: fileid3) -> Result<&Node, nfsstat3> {
        self.nodes.get(&id).ok_or(nfsstat3::NFS3ERR_STALE)
    }

    fn node_mut(&mut self, id: fileid3) -> Result<&mut Node, nfsstat3> {
        self.nodes.get_mut(&id).ok_or(nfsstat3::NFS3ERR_STALE)
    }

    fn dir(&self, id: fileid3) -> Result<&BTreeMap<Vec<u8>, fileid3>, nfsstat3> {
        match &self.node(id)?.body {
            Body::Dir(d) => Ok(d),
            _ => Err(nfsstat3::NFS3ERR_NOTDIR),
        }
    }

    fn dir_mut(&mut self, id: fileid3) -> Result<&mut BTreeMap<Vec<u8>, fileid3>, nfsstat3> {
        match &mut self.node_mut(id)?.body {
            Body::Dir(d) => Ok(d),
            _ => Err(nfsstat3::NFS3ERR_NOTDIR),
        }
    }

    fn touch_dir(&mut self, id: fileid3) {
        if let Some(n) = self.nodes.get_mut(&id) {
            let t = now();
            n.attr.mtime = t;
            n.attr.ctime = t;
        }
    }

    /// Adds a new node named `name` to directory `dir`; EXIST if the name is taken.
    fn add(
        &mut self,
        dir: fileid3,
        name: &filename3,
        ftype: ftype3,
        mode: u32,
        body: Body,
    ) -> Result<fattr3, nfsstat3> {
        check_name(name)?;
        if self.dir(dir)?.contains_key(&name.0) {
            return Err(nfsstat3::NFS3ERR_EXIST);
        }
        let id = self.next_id;
        self.next_id += 1;
        let mut attr = new_attr(id, ftype, mode);
        if let Body::Symlink(target) = &body {
            attr.size = target.len() as u64;
        }
        self.nodes.insert(
            id,
            Node {
                attr,
                name: name.0.clone(),
                parent: dir,
                body,
            },
        );
        self.dir_mut(dir)?.insert(name.0.clone(), id);
        if matches!(ftype, ftype3::NF3DIR) {
            self.node_mut(dir)?.attr.nlink += 1;
        }
        self.touch_dir(dir);
        Ok(attr)
    }

    /// Removes the node `id` and everything it holds from the map.
    fn forget(&mut self, id: fileid3) {
        if let Some(n) = self.nodes.remove(&id) {
            match n.body {
                Body::File(data) => self.used_bytes -= data.len() as u64,
                Body::Dir(d) => d.into_values().for_each(|c| self.forget(c)),
                Body::Symlink(_) => {}
            }
        }
    }

    fn resize(&mut self, id: fileid3, size: u64, capacity: u64) -> Result<(), nfsstat3> {
        let n = self.nodes.get_mut(&id).ok_or(nfsstat3::NFS3ERR_STALE)?;
        let Body::File(data) = &mut n.body else {
            return Err(nfsstat3::NFS3ERR_INVAL);
        };
        let old = data.len() as u64;
        if size > old && self.used_bytes + (size - old) > capacity {
            return Err(nfsstat3::NFS3ERR_NOSPC);
        }
        let len = usize::try_from(size).map_err(|_| nfsstat3::NFS3ERR_FBIG)?;
        data.resize(len, 0);
        n.attr.size = size;
        n.attr.used = size;
        self.used_bytes = self.used_bytes - old + size;
        Ok(())
    }
}

impl MemFs {
    pub fn new(capacity_bytes: u64) -> Self {
        let root = Node {
            attr: new_attr(ROOT, ftype3::NF3DIR, 0o777),
            name: Vec::new(),
            parent: ROOT,
            body: Body::Dir(BTreeMap::new()),
        };
        MemFs {
            state: Mutex::new(State {
                nodes: HashMap::from([(ROOT, root)]),
                next_id: ROOT + 1,
                used_bytes: 0,
            }),
            capacity_bytes,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while the lock was held left the map as it was at the panic; serving
        // it beats stopping the benchmark's peer.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[async_trait]
impl NFSFileSystem for MemFs {
    fn capabilities(&self) -> VFSCapabilities {
        VFSCapabilities::ReadWrite
    }

    fn root_dir(&self) -> fileid3 {
        ROOT
    }

    async fn lookup(&self, dirid: fileid3, filename: &filename3) -> Result<fileid3, nfsstat3> {
        let s = self.lock();
        let dir = s.dir(dirid)?;
        match filename.0.as_slice() {
            b"." => Ok(dirid),
            b".." => Ok(s.node(dirid)?.parent),
            name => dir.get(name).copied().ok_or(nfsstat3::NFS3ERR_NOENT),
        }
    }

    async fn getattr(&self, id: fileid3) -> Result<fattr3, nfsstat3> {
        Ok(self.lock().node(id)?.attr)
    }

    async fn setattr(&self, id: fileid3, setattr: sattr3) -> Result<fattr3, nfsstat3> {
        let mut s = self.lock();
        if let set_size3::size(size) = setattr.size {
            s.resize(id, size, self.capacity_bytes)?;
            s.node_mut(id)?.attr.mtime = now();
        }
        let a = &mut s.node_mut(id)?.attr;
        if let set_mode3::mode(m) = setattr.mode {
            a.mode = m & 0o7777;
        }
        if let set_uid3::uid(u) = setattr.uid {
            a.uid = u;
        }
        if let set_gid3::gid(g) = setattr.gid {
            a.gid = g;
        }
        match setattr.atime {
            set_atime::SET_TO_CLIENT_TIME(t) => a.atime = t,
            set_atime::SET_TO_SERVER_TIME => a.atime = now(),
            set_atime::DONT_CHANGE => {}
        }
        match setattr.mtime {
            set_mtime::SET_TO_CLIENT_TIME(t) => a.mtime = t,
            set_mtime::SET_TO_SERVER_TIME => a.mtime = now(),
            set_mtime::DONT_CHANGE => {}
        }
        a.ctime = now();
        Ok(*a)
    }

    async fn read(
        &self,
        id: fileid3,
        offset: u64,
        count: u32,
    ) -> Result<(Vec<u8>, bool), nfsstat3> {
        let s = self.lock();
        let Body::File(data) = &s.node(id)?.body else {
            return Err(nfsstat3::NFS3ERR_ISDIR);
        };
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(data.len());
        let end = start.saturating_add(count as usize).min(data.len());
        Ok((data[start..end].to_vec(), end == data.len()))
    }

    async fn write(&self, id: fileid3, offset: u64, data: &[u8]) -> Result<fattr3, nfsstat3> {
        let mut s = self.lock();
        let end = offset
            .checked_add(data.len() as u64)
            .ok_or(nfsstat3::NFS3ERR_FBIG)?;
        if end > s.node(id)?.attr.size {
            s.resize(id, end, self.capacity_bytes)?;
        }
        let n = s.node_mut(id)?;
        let Body::File(file) = &mut n.body else {
            return Err(nfsstat3::NFS3ERR_ISDIR);
        };
        let start = usize::try_from(offset).map_err(|_| nfsstat3::NFS3ERR_FBIG)?;
        file[start..start + data.len()].copy_from_slice(data);
        let t = now();
        n.attr.mtime = t;
        n.attr.ctime = t;
        Ok(n.attr)
    }

    async fn create(
        &self,
        dirid: fileid3,
        filename: &filename3,
        attr: sattr3,
    ) -> Result<(fileid3, fattr3), nfsstat3> {
        let a = self.lock().add(
            dirid,
            filename,
            ftype3::NF3REG,
            0o644,
            Body::File(Vec::new()),
        )?;
        let a = self.setattr(a.fileid, attr).await?;
        Ok((a.fileid, a))
    }

    async fn create_exclusive(
        &self,
        dirid: fileid3,
        filename: &filename3,
    ) -> Result<fileid3, nfsstat3> {
        Ok(self
            .lock()
            .add(
                dirid,
                filename,
                ftype3::NF3REG,
                0o644,
                Body::File(Vec::new()),
            )?
            .fileid)
    }

    async fn mkdir(
        &self,
        dirid: fileid3,
        dirname: &filename3,
    ) -> Result<(fileid3, fattr3), nfsstat3> {
        let a = self.lock().add(
            dirid,
            dirname,
            ftype3::NF3DIR,
            0o755,
            Body::Dir(BTreeMap::new()),
        )?;
        Ok((a.fileid, a))
    }

    async fn remove(&self, dirid: fileid3, filename: &filename3) -> Result<(), nfsstat3> {
        let mut s = self.lock();
        let id = *s
            .dir(dirid)?
            .get(&filename.0)
            .ok_or(nfsstat3::NFS3ERR_NOENT)?;
        if let Body::Dir(d) = &s.node(id)?.body {
            if !d.is_empty() {
                return Err(nfsstat3::NFS3ERR_NOTEMPTY);
            }
            s.node_mut(dirid)?.attr.nlink -= 1;
        }
        s.dir_mut(dirid)?.remove(&filename.0);
        s.forget(id);
        s.touch_dir(dirid);
        Ok(())
    }

    async fn rename(
        &self,
        from_dirid: fileid3,
        from_filename: &filename3,
        to_dirid: fileid3,
        to_filename: &filename3,
    ) -> Result<(), nfsstat3> {
        check_name(to_filename)?;
        let mut s = self.lock();
        let id = *s
            .dir(from_dirid)?
            .get(&from_filename.0)
            .ok_or(nfsstat3::NFS3ERR_NOENT)?;
        s.dir(to_dirid)?;
        let moving_dir = matches!(s.node(id)?.body, Body::Dir(_));
        // A directory cannot move below itself.
        if moving_dir {
            let mut at = to_dirid;
            while at != ROOT {
                if at == id {
                    return Err(nfsstat3::NFS3ERR_INVAL);
                }
                at = s.node(at)?.parent;
            }
        }
        if let Some(&old) = s.dir(to_dirid)?.get(&to_filename.0) {
            if old == id {
                return Ok(());
            }
            match (&s.node(old)?.body, moving_dir) {
                (Body::Dir(d), true) if !d.is_empty() => return Err(nfsstat3::NFS3ERR_NOTEMPTY),
                (Body::Dir(_), true) => s.node_mut(to_dirid)?.attr.nlink -= 1,
                (Body::Dir(_), false) => return Err(nfsstat3::NFS3ERR_ISDIR),
                (_, true) => return Err(nfsstat3::NFS3ERR_NOTDIR),
                (_, false) => {}
            }
            s.forget(old);
        }
        s.dir_mut(from_dirid)?.remove(&from_filename.0);
        s.dir_mut(to_dirid)?.insert(to_filename.0.clone(), id);
        if moving_dir && from_dirid != to_dirid {
            s.node_mut(from_dirid)?.attr.nlink -= 1;
            s.node_mut(to_dirid)?.attr.nlink += 1;
        }
        let n = s.node_mut(id)?;
        n.name = to_filename.0.clone();
        n.parent = to_dirid;
        n.attr.ctime = now();
        s.touch_dir(from_dirid);
        s.touch_dir(to_dirid);
        Ok(())
    }

    async fn readdir(
        &self,
        dirid: fileid3,
        start_after: fileid3,
        max_entries: usize,
    ) -> Result<ReadDirResult, nfsstat3> {
        let s = self.lock();
        let dir = s.dir(dirid)?;
        let from = if start_after == 0 {
            Bound::Unbounded
        } else {
            let n = s
                .node(start_after)
                .map_err(|_| nfsstat3::NFS3ERR_BAD_COOKIE)?;
            Bound::Excluded(n.name.clone())
        };
        let mut rest = dir.range((from, Bound::Unbounded));
        let mut entries = Vec::new();
        for (name, &id) in rest.by_ref().take(max_entries) {
            entries.push(DirEntry {
                fileid: id,
                name: nfsstring(name.clone()),
                attr: s.node(id)?.attr,
            });
        }
        Ok(ReadDirResult {
            entries,
            end: rest.next().is_none(),
        })
    }

    async fn symlink(
        &self,
        dirid: fileid3,
        linkname: &filename3,
        symlink: &nfspath3,
        attr: &sattr3,
    ) -> Result<(fileid3, fattr3), nfsstat3> {
        let a = self.lock().add(
            dirid,
            linkname,
            ftype3::NF3LNK,
            0o777,
            Body::Symlink(symlink.0.clone()),
        )?;
        let a = self.setattr(a.fileid, *attr).await?;
        Ok((a.fileid, a))
    }

    async fn readlink(&self, id: fileid3) -> Result<nfspath3, nfsstat3> {
        match &self.lock().node(id)?.body {
            Body::Symlink(t) => Ok(nfsstring(t.clone())),
            _ => Err(nfsstat3::NFS3ERR_INVAL),
        }
    }
}
