//! Random operation sequences against `MemFs` and against a small reference model
//! ([`reference`]), over a tiny name space so that names collide, directories nest and the
//! caps are hit. Every result (error kind, bytes read, listings, attributes) is compared,
//! and after every step the whole tree: paths, types, sizes, allocated bytes, link counts,
//! which paths name the same file, `..` of every directory, and the free bytes and files.
//! File contents are compared at the end of each case.
//!
//! Operations are generated with abstract places ([`At`]) and made concrete against the
//! model's tree just before they run ([`Picker`]), so most of them hit existing files
//! while some still walk paths that do not exist.
//!
//! Set `PROPTEST_CASES` to run more than the default 64 cases.

mod real;
mod reference;

use std::collections::BTreeMap;

use granary_backend_mem::{MemConfig, RangeLockMode, TimestampMode, CHUNK_BYTES};
use proptest::prelude::*;
use vfs::{FileType, FsError};

use crate::fixture::Fx;
use reference::Model;

const C: u64 = CHUNK_BYTES;
const CAPACITY_BYTES: u64 = 3 * C;
const MAX_FILES: u64 = 7;
const NAMES: [&str; 4] = ["a", "b", "c", "d"];
/// Directory paths that may or may not exist (or be directories) when an operation runs.
const FIXED_DIRS: [&[&str]; 5] = [&[], &["a"], &["b"], &["a", "b"], &["b", "a", "c"]];
/// Range of place selectors: three in four pick something that exists (so operations
/// mostly do something), one in four a fixed path (so path walks fail too).
const SELECTORS: usize = 64;

type Res<T> = Result<T, FsError>;

/// A generated, abstract place: a selector and a name index.
#[derive(Debug, Clone, Copy)]
struct At(usize, usize);

/// A concrete place: a directory path from the root and a name in it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Place {
    dir: Vec<String>,
    name: String,
}

#[derive(Debug, Clone, Copy)]
enum How {
    Guarded(Option<u64>),
    Unchecked(Option<u64>),
    Exclusive(u8),
}

#[derive(Debug, Clone)]
enum Op<P> {
    Create(P, How),
    Mkdir(P),
    Symlink(P, usize),
    Mknod(P),
    Write {
        at: P,
        offset: u64,
        len: usize,
        byte: u8,
        zero_head: bool,
    },
    Truncate(P, u64),
    Remove(P),
    Rmdir(P),
    Rename(P, P),
    Link(P, P),
    Read(P, u64, u32),
    /// Lists the directory the place names.
    Readdir(P),
    Getattr(P),
}

/// What an operation answered, in a form both sides can produce.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Out {
    Done,
    Data(Vec<u8>, bool),
    Names(Vec<String>),
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

fn write_data(len: usize, byte: u8, zero_head: bool) -> Vec<u8> {
    (0..len)
        .map(|i| if zero_head && i < len / 2 { 0 } else { byte })
        .collect()
}

// ----------------------------------------------------------------------------------------
// Generation.

fn at() -> impl Strategy<Value = At> {
    (0..SELECTORS, 0..NAMES.len()).prop_map(|(s, n)| At(s, n))
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

fn write() -> impl Strategy<Value = Op<At>> {
    let len = prop_oneof![0..16usize, 0..(2 * C as usize)];
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

fn op() -> impl Strategy<Value = Op<At>> {
    prop_oneof![
        3 => (at(), how()).prop_map(|(a, h)| Op::Create(a, h)),
        2 => at().prop_map(Op::Mkdir),
        1 => (at(), 1..6usize).prop_map(|(a, len)| Op::Symlink(a, len)),
        1 => at().prop_map(Op::Mknod),
        8 => write(),
        2 => (at(), size()).prop_map(|(a, s)| Op::Truncate(a, s)),
        2 => at().prop_map(Op::Remove),
        1 => at().prop_map(Op::Rmdir),
        3 => (at(), at()).prop_map(|(a, b)| Op::Rename(a, b)),
        2 => (at(), at()).prop_map(|(a, b)| Op::Link(a, b)),
        2 => (at(), offset(), 0..(2 * C as u32)).prop_map(|(a, o, c)| Op::Read(a, o, c)),
        1 => at().prop_map(Op::Readdir),
        1 => at().prop_map(Op::Getattr),
    ]
}

// ----------------------------------------------------------------------------------------
// Making places concrete.

/// True for the quarter of selectors that pick a fixed path.
fn fixed(At(selector, _): At) -> bool {
    selector < SELECTORS / 4
}

/// What exists in the model before a step: every directory and every entry.
#[derive(Debug)]
struct Picker {
    dirs: Vec<Vec<String>>,
    entries: Vec<Place>,
    /// Entries that are regular files.
    files: Vec<Place>,
}

impl Picker {
    fn fixed_place(At(selector, name): At) -> Place {
        let dir = FIXED_DIRS[selector % FIXED_DIRS.len()];
        Place {
            dir: dir.iter().map(|&c| c.to_owned()).collect(),
            name: NAMES[name].to_owned(),
        }
    }

    /// A place for something new: an existing directory (or a fixed path), any name.
    fn fresh(&self, at: At) -> Place {
        if fixed(at) || self.dirs.is_empty() {
            return Self::fixed_place(at);
        }
        Place {
            dir: self.dirs[at.0 % self.dirs.len()].clone(),
            name: NAMES[at.1].to_owned(),
        }
    }

    /// A place that mostly names an existing entry.
    fn existing(&self, at: At) -> Place {
        if fixed(at) || self.entries.is_empty() {
            return Self::fixed_place(at);
        }
        self.entries[(at.0 + at.1 * 16) % self.entries.len()].clone()
    }

    /// A place that mostly names an existing regular file, for data operations.
    fn file(&self, at: At) -> Place {
        if fixed(at) || self.files.is_empty() {
            return self.existing(at);
        }
        self.files[(at.0 + at.1 * 16) % self.files.len()].clone()
    }

    fn place(&self, op: &Op<At>) -> Op<Place> {
        let (f, e) = (|a| self.fresh(a), |a| self.existing(a));
        match *op {
            Op::Create(a, how) => Op::Create(f(a), how),
            Op::Mkdir(a) => Op::Mkdir(f(a)),
            Op::Symlink(a, len) => Op::Symlink(f(a), len),
            Op::Mknod(a) => Op::Mknod(f(a)),
            Op::Write {
                at,
                offset,
                len,
                byte,
                zero_head,
            } => Op::Write {
                at: self.file(at),
                offset,
                len,
                byte,
                zero_head,
            },
            Op::Truncate(a, size) => Op::Truncate(self.file(a), size),
            Op::Remove(a) => Op::Remove(e(a)),
            Op::Rmdir(a) => Op::Rmdir(e(a)),
            Op::Rename(a, b) => Op::Rename(e(a), f(b)),
            Op::Link(a, b) => Op::Link(e(a), f(b)),
            Op::Read(a, offset, count) => Op::Read(self.file(a), offset, count),
            Op::Readdir(a) => Op::Readdir(e(a)),
            Op::Getattr(a) => Op::Getattr(e(a)),
        }
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

fn check_step(fx: &Fx, model: &Model) {
    assert_eq!(real::tree(&fx.fs), model.tree());
    assert_eq!(real::root_shape(&fx.fs), model.root_shape());
    let stat = vfs::Backend::fsstat(&fx.fs).expect("fsstat");
    assert_eq!(stat.free_bytes, CAPACITY_BYTES - model.used_bytes());
    assert_eq!(stat.free_files, MAX_FILES - model.files());
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64)
}

fn matches_the_model(config: MemConfig, ops: &[Op<At>]) -> Result<(), TestCaseError> {
    let fx = Fx::with(MemConfig {
        capacity_bytes: CAPACITY_BYTES,
        max_files: MAX_FILES,
        ..config
    });
    let mut model = Model::new();
    for (step, op) in ops.iter().enumerate() {
        let op = model.picker().place(op);
        let want = model.apply(&op);
        let got = real::apply(&fx.fs, &op);
        prop_assert_eq!(&got, &want, "step {} {:?}", step, op);
        check_step(&fx, &model);
    }
    for (path, data) in model.files_by_path() {
        prop_assert!(
            real::contents(&fx, &path) == data,
            "contents of {:?} differ",
            path
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn mem_matches_the_model(ops in proptest::collection::vec(op(), 1..48)) {
        matches_the_model(MemConfig::default(), &ops)?;
    }

    /// The same, with every range lock and every timestamp mode (seeds 000 and 003):
    /// none of them may change what a single client sees.
    #[test]
    fn every_mode_matches_the_model(
        lock in proptest::sample::select(RangeLockMode::ALL.to_vec()),
        stamps in proptest::sample::select(TimestampMode::ALL.to_vec()),
        ops in proptest::collection::vec(op(), 1..48),
    ) {
        let config = MemConfig { rangelock: lock, timestamps: stamps, ..MemConfig::default() };
        matches_the_model(config, &ops)?;
    }
}
