//! The mem backend as the oracle: the same seeded random operation sequences through the
//! `vfs::Backend` seam on mem and on the object backend (real PostgreSQL and S3, from
//! `scripts/object-env.sh`) give the same results: the same errors, types, sizes, link
//! counts and modes, the same names in each directory, the same bytes from every READ.
//! The object side also runs rounds of compaction now and then, which must change
//! nothing a client sees. `GRANARY_ORACLE_SEED=N` replays one sequence.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use backend_mem::{MemConfig, MemFs};
use bytes::BytesMut;
use granary_backend_object::{GcConfig, ObjectFs, TestEngines};
use gtime::SystemClock;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use vfs::{
    Attr, Backend, Cookie, CreateMode, FileId, FileType, FsResult, Name, SetAttr, Stability,
    Trusted,
};

const ROOT: Trusted = Trusted::ROOT;

/// Sequences run by default, and operations in each: about 10 s against the engines at
/// a load of 14 on two cores.
const SEEDS: u64 = 4;
const OPS: usize = 250;

/// Names are drawn from a few, so creates collide, removes find things, renames replace.
const NAMES: [&str; 5] = ["a", "b", "c", "d", "e"];

fn name(s: &str) -> Name {
    Name::new(s.as_bytes().to_vec()).unwrap()
}

/// What a client can see of a file's attributes, the same on both backends.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    file_type: FileType,
    mode: u32,
    nlink: u32,
    size: Option<u64>,
}

fn seen(a: &Attr) -> Seen {
    Seen {
        file_type: a.file_type,
        mode: a.mode,
        nlink: a.nlink,
        // Directory sizes are each backend's own count of its entries.
        size: (a.file_type != FileType::Directory).then_some(a.size_bytes),
    }
}

/// One file known to the test: its id on each side.
#[derive(Debug, Clone, Copy)]
struct Pair {
    mem: FileId,
    obj: FileId,
}

struct Run<'a> {
    mem: &'a MemFs,
    obj: &'a ObjectFs,
    rng: StdRng,
    /// Files and directories ever made (removed ones stay: using them must be STALE on
    /// both sides).
    known: Vec<Pair>,
    dirs: Vec<Pair>,
    log: Vec<String>,
}

impl Run<'_> {
    fn pick(&mut self) -> Pair {
        let i = self.rng.gen_range(0..self.known.len());
        self.known[i]
    }

    fn pick_dir(&mut self) -> Pair {
        let i = self.rng.gen_range(0..self.dirs.len());
        self.dirs[i]
    }

    fn pick_name(&mut self) -> Name {
        name(NAMES[self.rng.gen_range(0..NAMES.len())])
    }

    fn data(&mut self) -> (u64, Vec<u8>) {
        // Inline-sized files, and offsets in the first MiBs for objects and holes.
        let offset = match self.rng.gen_range(0..3) {
            0 => self.rng.gen_range(0..4096),
            1 => self.rng.gen_range(0..64 << 10),
            _ => self.rng.gen_range(0..5 << 20),
        };
        let len = match self.rng.gen_range(0..3) {
            0 => self.rng.gen_range(1..100),
            1 => self.rng.gen_range(1..8192),
            _ => self.rng.gen_range(1..200 << 10),
        };
        let byte: u8 = self.rng.gen();
        let data = (0..len)
            .map(|i| byte.wrapping_add((i % 251) as u8))
            .collect();
        (offset, data)
    }

    /// Compares two results, attribute by attribute; `Ok` carries the pair made, if any.
    fn same<T, U>(
        &mut self,
        what: &str,
        m: FsResult<T>,
        o: FsResult<U>,
        attr_m: impl Fn(&T) -> Vec<Seen>,
        attr_o: impl Fn(&U) -> Vec<Seen>,
    ) -> Option<(T, U)> {
        self.log.push(what.to_string());
        match (m, o) {
            (Ok(m), Ok(o)) => {
                assert_eq!(attr_m(&m), attr_o(&o), "{}", self.trail());
                Some((m, o))
            }
            (Err(m), Err(o)) => {
                assert_eq!(m, o, "errors differ: {}", self.trail());
                None
            }
            (m, o) => panic!(
                "mem {:?} but object {:?}: {}",
                m.err(),
                o.err(),
                self.trail()
            ),
        }
    }

    fn trail(&self) -> String {
        let from = self.log.len().saturating_sub(12);
        format!(
            "after {} operations, the last: {:#?}",
            self.log.len(),
            &self.log[from..]
        )
    }

    fn step(&mut self) {
        let (mem, obj) = (self.mem, self.obj);
        match self.rng.gen_range(0..100) {
            0..=11 => {
                let (d, n) = (self.pick_dir(), self.pick_name());
                let mode = match self.rng.gen_range(0..3) {
                    0 => CreateMode::Guarded(SetAttr::default()),
                    1 => CreateMode::Unchecked(SetAttr {
                        size_bytes: Some(self.rng.gen_range(0..10_000)),
                        ..SetAttr::default()
                    }),
                    _ => CreateMode::Exclusive(*b"oracle!!"),
                };
                let what = format!("create {d:?}/{n:?} {mode:?}");
                let m = mem.create(d.mem, &n, &mode, &ROOT);
                let o = obj.create(d.obj, &n, &mode, &ROOT);
                let f = |c: &vfs::Created| vec![seen(&c.attr)];
                if let Some((m, o)) = self.same(&what, m, o, f, f) {
                    self.known.push(Pair {
                        mem: m.attr.fileid,
                        obj: o.attr.fileid,
                    });
                }
            }
            12..=17 => {
                let (d, n) = (self.pick_dir(), self.pick_name());
                let what = format!("mkdir {d:?}/{n:?}");
                let m = mem.mkdir(d.mem, &n, &SetAttr::default(), &ROOT);
                let o = obj.mkdir(d.obj, &n, &SetAttr::default(), &ROOT);
                let f = |c: &vfs::Created| vec![seen(&c.attr)];
                if let Some((m, o)) = self.same(&what, m, o, f, f) {
                    let p = Pair {
                        mem: m.attr.fileid,
                        obj: o.attr.fileid,
                    };
                    self.known.push(p);
                    self.dirs.push(p);
                }
            }
            18..=39 => {
                let f = self.pick();
                let (offset, data) = self.data();
                let stable = if self.rng.gen_bool(0.3) {
                    Stability::FileSync
                } else {
                    Stability::Unstable
                };
                let what = format!("write {f:?} at {offset} len {} {stable:?}", data.len());
                let m = mem.write(f.mem, offset, &data, stable, &ROOT);
                let o = obj.write(f.obj, offset, &data, stable, &ROOT);
                let a = |w: &vfs::Written| vec![seen(&w.file.after)];
                if let Some((m, o)) = self.same(&what, m, o, a, a) {
                    assert_eq!(m.count, o.count, "{}", self.trail());
                }
            }
            40..=54 => {
                let f = self.pick();
                let offset = self.rng.gen_range(0..6 << 20);
                let count = self.rng.gen_range(1..1 << 20);
                let what = format!("read {f:?} at {offset} count {count}");
                let (mut bm, mut bo) = (BytesMut::new(), BytesMut::new());
                let m = mem.read_into(f.mem, offset, count, &mut bm, &ROOT);
                let o = obj.read_into(f.obj, offset, count, &mut bo, &ROOT);
                let a = |r: &vfs::ReadDone| vec![seen(&r.attr)];
                if let Some((m, o)) = self.same(&what, m, o, a, a) {
                    assert_eq!(m.eof, o.eof, "eof: {}", self.trail());
                    assert!(bm == bo, "READ returned other bytes: {}", self.trail());
                }
            }
            55..=60 => {
                let f = self.pick();
                let size = match self.rng.gen_range(0..3) {
                    0 => self.rng.gen_range(0..4096),
                    1 => self.rng.gen_range(0..1 << 20),
                    _ => self.rng.gen_range(0..6 << 20),
                };
                let set = SetAttr {
                    size_bytes: Some(size),
                    ..SetAttr::default()
                };
                let what = format!("truncate {f:?} to {size}");
                let m = mem.setattr(f.mem, &set, None, &ROOT);
                let o = obj.setattr(f.obj, &set, None, &ROOT);
                let a = |c: &vfs::Change| vec![seen(&c.after)];
                self.same(&what, m, o, a, a);
            }
            61..=64 => {
                let f = self.pick();
                let set = SetAttr {
                    mode: Some(self.rng.gen_range(0..0o1000)),
                    ..SetAttr::default()
                };
                let what = format!("chmod {f:?} {:o}", set.mode.unwrap_or(0));
                let m = mem.setattr(f.mem, &set, None, &ROOT);
                let o = obj.setattr(f.obj, &set, None, &ROOT);
                let a = |c: &vfs::Change| vec![seen(&c.after)];
                self.same(&what, m, o, a, a);
            }
            65..=68 => {
                let f = self.pick();
                let what = format!("commit {f:?}");
                let m = mem.commit(f.mem, 0, 0);
                let o = obj.commit(f.obj, 0, 0);
                let a = |c: &vfs::Change| vec![seen(&c.after)];
                self.same(&what, m, o, a, a);
            }
            69..=74 => {
                let (d, n) = (self.pick_dir(), self.pick_name());
                let what = format!("remove {d:?}/{n:?}");
                let m = mem.remove(d.mem, &n, &ROOT);
                let o = obj.remove(d.obj, &n, &ROOT);
                let a = |c: &vfs::Change| vec![seen(&c.after)];
                self.same(&what, m, o, a, a);
            }
            75..=77 => {
                let (d, n) = (self.pick_dir(), self.pick_name());
                let what = format!("rmdir {d:?}/{n:?}");
                let m = mem.rmdir(d.mem, &n, &ROOT);
                let o = obj.rmdir(d.obj, &n, &ROOT);
                let a = |c: &vfs::Change| vec![seen(&c.after)];
                self.same(&what, m, o, a, a);
            }
            78..=83 => {
                let (fd, fname) = (self.pick_dir(), self.pick_name());
                let (td, tname) = (self.pick_dir(), self.pick_name());
                let what = format!("rename {fd:?}/{fname:?} to {td:?}/{tname:?}");
                let m = mem.rename(fd.mem, &fname, td.mem, &tname, &ROOT);
                let o = obj.rename(fd.obj, &fname, td.obj, &tname, &ROOT);
                let a = |r: &vfs::Renamed| vec![seen(&r.from_dir.after), seen(&r.to_dir.after)];
                self.same(&what, m, o, a, a);
            }
            84..=86 => {
                let (f, d, n) = (self.pick(), self.pick_dir(), self.pick_name());
                let what = format!("link {f:?} as {d:?}/{n:?}");
                let m = mem.link(f.mem, d.mem, &n, &ROOT);
                let o = obj.link(f.obj, d.obj, &n, &ROOT);
                let a = |l: &vfs::Linked| vec![seen(&l.attr)];
                self.same(&what, m, o, a, a);
            }
            87..=91 => {
                let (d, n) = (self.pick_dir(), self.pick_name());
                let what = format!("lookup {d:?}/{n:?}");
                let m = mem.lookup(d.mem, &n, &ROOT);
                let o = obj.lookup(d.obj, &n, &ROOT);
                let a = |f: &vfs::Found| vec![seen(&f.attr)];
                if let Some((m, o)) = self.same(&what, m, o, a, a) {
                    // The same file on both sides, whatever renames did.
                    let pair = self.known.iter().find(|p| p.mem == m.attr.fileid).copied();
                    assert_eq!(pair.map(|p| p.obj), Some(o.attr.fileid), "{}", self.trail());
                }
            }
            92..=95 => {
                let d = self.pick_dir();
                let what = format!("readdir {d:?}");
                let m = list(mem, d.mem);
                let o = list(obj, d.obj);
                let none = |_: &BTreeMap<Vec<u8>, Seen>| Vec::new();
                if let Some((m, o)) = self.same(&what, m, o, none, none) {
                    assert_eq!(m, o, "{}", self.trail());
                }
            }
            96..=97 => {
                let f = self.pick();
                let what = format!("getattr {f:?}");
                let m = mem.getattr(f.mem);
                let o = obj.getattr(f.obj);
                let a = |a: &Attr| vec![seen(a)];
                self.same(&what, m, o, a, a);
            }
            _ => {
                // Compaction (and collection) on the object side only: nothing may change.
                self.log.push("gc round (object only)".to_string());
                obj.publish_all().expect("publish");
                let r = obj.gc_round().expect("a round of compaction");
                self.log.push(format!("  {r:?}"));
            }
        }
    }
}

/// A directory's names and what each names, through as many READDIR pages as it takes:
/// the attributes the listing carried (the object backend's), else GETATTR's (mem's).
fn list(fs: &dyn Backend, dir: FileId) -> FsResult<BTreeMap<Vec<u8>, Seen>> {
    let mut names = BTreeMap::new();
    let mut cookie = Cookie::START;
    loop {
        let (page, _) = fs.readdir(dir, cookie, 3, &ROOT)?;
        for e in &page.entries {
            let attr = match &e.attr {
                Some(a) => a.clone(),
                None => fs.getattr(e.fileid)?,
            };
            names.insert(e.name.to_vec(), seen(&attr));
            cookie = e.cookie;
        }
        if page.eof {
            return Ok(names);
        }
    }
}

#[test]
fn random_operation_sequences_give_the_same_results_on_mem_and_object() {
    let Some(env) = TestEngines::from_env() else {
        return;
    };
    let seeds: Vec<u64> = match std::env::var("GRANARY_ORACLE_SEED") {
        Ok(s) => vec![s.parse().expect("GRANARY_ORACLE_SEED is a number")],
        Err(_) => (1..=SEEDS).collect(),
    };
    let started = Instant::now();
    let mut gc_rounds = 0;
    for seed in seeds {
        let mut config = env.fresh(&format!("oracle{seed}"));
        config.gc = GcConfig {
            interval: Duration::ZERO,
            grace: Duration::from_secs(1),
            compact_slices: 2,
        };
        let obj = ObjectFs::open(&config, Arc::new(SystemClock::new())).expect("the head opens");
        let mem = MemFs::new(MemConfig::default(), Arc::new(SystemClock::new()));
        let root = Pair {
            mem: mem.root(),
            obj: obj.root(),
        };
        let mut run = Run {
            mem: &mem,
            obj: &obj,
            rng: StdRng::seed_from_u64(seed),
            known: vec![root],
            dirs: vec![root],
            log: vec![format!("seed {seed}")],
        };
        for _ in 0..OPS {
            run.step();
        }
        gc_rounds += run.log.iter().filter(|l| l.starts_with("gc round")).count();
        // At the end every file reads the same through both, after a last compaction.
        obj.publish_all().unwrap();
        obj.gc_round().unwrap();
        for p in run.known.clone() {
            let m = mem.getattr(p.mem);
            let o = obj.getattr(p.obj);
            let a = |a: &Attr| vec![seen(a)];
            if let Some((m, _)) = run.same("final getattr", m, o, a, a) {
                let mut at = 0;
                while m.file_type == FileType::Regular && at < m.size_bytes {
                    let (mut bm, mut bo) = (BytesMut::new(), BytesMut::new());
                    mem.read_into(p.mem, at, 1 << 20, &mut bm, &ROOT).unwrap();
                    obj.read_into(p.obj, at, 1 << 20, &mut bo, &ROOT).unwrap();
                    if bm != bo {
                        if let Ok(path) = std::env::var("GRANARY_ORACLE_LOG") {
                            std::fs::write(path, run.log.join("\n")).unwrap();
                        }
                        let first = bm.iter().zip(bo.iter()).position(|(x, y)| x != y);
                        let ops: Vec<&String> = run
                            .log
                            .iter()
                            .filter(|l| l.contains(&format!("{:?}", p.mem)) || l.contains("gc"))
                            .collect();
                        panic!(
                            "seed {seed}: {p:?} differs in the MiB at {at}, first at {first:?} \
                             (lengths {} and {}); its operations: {ops:#?}",
                            bm.len(),
                            bo.len()
                        );
                    }
                    assert!(!bm.is_empty());
                    at += bm.len() as u64;
                }
            }
        }
        let audit = obj.audit().unwrap();
        assert!(audit.missing.is_empty(), "seed {seed}: {audit:?}");
    }
    assert!(gc_rounds > 0, "no sequence ran a compaction");
    eprintln!(
        "{SEEDS} sequences of {OPS} operations ({gc_rounds} compaction rounds) in {:?}",
        started.elapsed()
    );
}
