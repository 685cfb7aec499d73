//! The same operations on `MemFs`, through `vfs::Backend`, resolving paths with lookups.

use std::collections::BTreeMap;

use crate::fixture::Plain;
use granary_backend_mem::MemFs;
use vfs::{Cookie, CreateMode, FileId, FileType, SetAttr, SpecialFile, Stability};

use super::{number_groups, write_data, How, Op, Out, Place, Res, Shape, Tree};
use crate::fixture::{n, Fx, OWNER};

pub(super) fn path_string(place: &Place) -> String {
    let mut out = String::new();
    for component in place.dir.iter().chain([&place.name]) {
        out.push('/');
        out.push_str(component);
    }
    out
}

fn resolve_dir(fs: &MemFs, path: &[String]) -> Res<FileId> {
    path.iter()
        .try_fold(fs.root(), |current, name| fs.lookup(current, &n(name)))
}

fn resolve(fs: &MemFs, place: &Place) -> Res<FileId> {
    fs.lookup(resolve_dir(fs, &place.dir)?, &n(&place.name))
}

fn shape(fs: &MemFs, id: FileId) -> Shape {
    let attr = fs.getattr(id).expect("getattr of a listed file");
    assert_eq!((attr.fileid, attr.fsid, attr.generation), (id, 0, 0));
    Shape {
        file_type: attr.file_type,
        size_bytes: attr.size_bytes,
        used_bytes: attr.used_bytes,
        nlink: attr.nlink,
    }
}

pub(super) fn root_shape(fs: &MemFs) -> Shape {
    shape(fs, fs.root())
}

/// Names in `dir` with their ids, from a listing in small pages; checks `.` and `..`.
fn listing(fs: &MemFs, dir: FileId) -> Res<BTreeMap<String, FileId>> {
    let mut cookie = Cookie::START;
    let mut out = BTreeMap::new();
    loop {
        let page = fs.readdir(dir, cookie, 3)?;
        for entry in &page.entries {
            let name = String::from_utf8_lossy(&entry.name).into_owned();
            match name.as_str() {
                "." => assert_eq!(entry.fileid, dir),
                ".." => assert_eq!(Ok(entry.fileid), fs.parent(dir)),
                _ => assert!(out.insert(name, entry.fileid).is_none(), "listed twice"),
            }
            cookie = entry.cookie;
        }
        if page.eof {
            return Ok(out);
        }
    }
}

pub(super) fn tree(fs: &MemFs) -> Tree {
    let mut paths = BTreeMap::new();
    let mut pending = vec![(Vec::new(), fs.root())];
    while let Some((path, dir)) = pending.pop() {
        for (name, id) in listing(fs, dir).expect("listing a directory") {
            let shape = shape(fs, id);
            let place = Place {
                dir: path.clone(),
                name: name.clone(),
            };
            if shape.file_type == FileType::Directory {
                assert_eq!(fs.parent(id), Ok(dir));
                let mut child = path.clone();
                child.push(name);
                pending.push((child, id));
            }
            paths.insert(path_string(&place), (shape, id));
        }
    }
    number_groups(paths)
}

pub(super) fn contents(fx: &Fx, place: &Place) -> Vec<u8> {
    fx.contents(resolve(&fx.fs, place).expect("path of a file resolves"))
}

fn size_attr(size: Option<u64>) -> SetAttr {
    SetAttr {
        size_bytes: size,
        ..SetAttr::default()
    }
}

fn create(fs: &MemFs, at: &Place, how: How) -> Res<FileId> {
    let mode = match how {
        How::Guarded(size) => CreateMode::Guarded(size_attr(size)),
        How::Unchecked(size) => CreateMode::Unchecked(size_attr(size)),
        How::Exclusive(v) => CreateMode::Exclusive([v; 8]),
    };
    fs.create(resolve_dir(fs, &at.dir)?, &n(&at.name), &mode, OWNER)
}

fn make(fs: &MemFs, op: &Op<Place>) -> Res<FileId> {
    let none = SetAttr::default();
    match op {
        Op::Mkdir(at) => fs.mkdir(resolve_dir(fs, &at.dir)?, &n(&at.name), &none, OWNER),
        Op::Symlink(at, len) => {
            let target = vec![b't'; *len];
            fs.symlink(
                resolve_dir(fs, &at.dir)?,
                &n(&at.name),
                &target,
                &none,
                OWNER,
            )
        }
        Op::Mknod(at) => {
            let fifo = SpecialFile::Fifo;
            fs.mknod(resolve_dir(fs, &at.dir)?, &n(&at.name), fifo, &none, OWNER)
        }
        _ => unreachable!("not a make operation"),
    }
}

fn done<T>(_: T) -> Out {
    Out::Done
}

fn write(fs: &MemFs, at: &Place, offset: u64, data: &[u8]) -> Res<Out> {
    let reply = fs.write(resolve(fs, at)?, offset, data, Stability::FileSync)?;
    assert_eq!(reply.count as usize, data.len());
    assert_eq!(reply.committed, Stability::FileSync);
    Ok(Out::Done)
}

fn in_dir(fs: &MemFs, at: &Place) -> Res<(FileId, vfs::Name)> {
    Ok((resolve_dir(fs, &at.dir)?, n(&at.name)))
}

pub(super) fn apply(fs: &MemFs, op: &Op<Place>) -> Res<Out> {
    match op {
        Op::Create(at, how) => create(fs, at, *how).map(done),
        Op::Mkdir(_) | Op::Symlink(..) | Op::Mknod(_) => make(fs, op).map(done),
        Op::Write {
            at,
            offset,
            len,
            byte,
            zero_head,
        } => write(fs, at, *offset, &write_data(*len, *byte, *zero_head)),
        Op::Truncate(at, size) => {
            let attr = fs.setattr(resolve(fs, at)?, &size_attr(Some(*size)), None)?;
            assert_eq!(attr.size_bytes, *size);
            Ok(Out::Done)
        }
        Op::Remove(at) => in_dir(fs, at)
            .and_then(|(d, name)| fs.remove(d, &name))
            .map(done),
        Op::Rmdir(at) => in_dir(fs, at)
            .and_then(|(d, name)| fs.rmdir(d, &name))
            .map(done),
        Op::Rename(from, to) => {
            let (from_dir, from_name) = in_dir(fs, from)?;
            let (to_dir, to_name) = in_dir(fs, to)?;
            fs.rename(from_dir, &from_name, to_dir, &to_name).map(done)
        }
        Op::Link(source, to) => {
            let id = resolve(fs, source)?;
            let (to_dir, to_name) = in_dir(fs, to)?;
            fs.link(id, to_dir, &to_name).map(done)
        }
        Op::Read(at, offset, count) => {
            let reply = fs.read(resolve(fs, at)?, *offset, *count)?;
            Ok(Out::Data(reply.data.to_vec(), reply.eof))
        }
        Op::Readdir(at) => {
            let names = listing(fs, resolve(fs, at)?)?;
            Ok(Out::Names(names.into_keys().collect()))
        }
        Op::Getattr(at) => Ok(Out::Attr(shape(fs, resolve(fs, at)?))),
    }
}
