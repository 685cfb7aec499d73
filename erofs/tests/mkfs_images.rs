//! Differential test of the reader: trees built by `mkfs.erofs` with every supported option
//! set are read back through the reader and compared with the source tree, file by file.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use granary_erofs::{Image, Inode};

fn resolve(image: &Image, rel: &Path) -> Inode {
    let mut inode = image.inode(image.root_nid()).unwrap();
    for part in rel.iter() {
        let e = image.lookup(&inode, part.as_encoded_bytes()).unwrap();
        let e = e.unwrap_or_else(|| panic!("{} missing in image", rel.display()));
        inode = image.inode(e.nid).unwrap();
    }
    inode
}

fn compare(image: &Image, src: &Path, rel: &Path, opts: &[&str]) {
    let path = src.join(rel);
    let meta = std::fs::symlink_metadata(&path).unwrap();
    let inode = resolve(image, rel);
    let what = format!("{} with {opts:?}", rel.display());
    assert_eq!(inode.mode, meta.mode(), "mode of {what}");
    if !opts.contains(&"--all-root") {
        assert_eq!(
            (inode.uid, inode.gid),
            (meta.uid(), meta.gid()),
            "owner of {what}"
        );
    }
    if !meta.is_dir() {
        assert_eq!(u64::from(inode.nlink), meta.nlink(), "nlink of {what}");
        assert_eq!(inode.size_bytes, meta.size(), "size of {what}");
    }
    if !opts.contains(&"-T") && !opts.contains(&"-Eforce-inode-compact") {
        assert_eq!(inode.mtime_s as i64, meta.mtime(), "mtime of {what}");
    }
    let ft = meta.file_type();
    if ft.is_file() {
        let mut got = vec![0; meta.size() as usize];
        image.read_simple(&inode, 0, &mut got).unwrap();
        assert!(got == std::fs::read(&path).unwrap(), "content of {what}");
        // Unaligned reads across extents.
        if got.len() > 13_332 {
            let mut part = vec![0; 9_999];
            image.read_simple(&inode, 3_333, &mut part).unwrap();
            assert!(part[..] == got[3_333..13_332], "partial read of {what}");
        }
    } else if ft.is_symlink() {
        let target = std::fs::read_link(&path).unwrap();
        assert_eq!(
            image.read_link(&inode).unwrap(),
            target.as_os_str().as_encoded_bytes()
        );
    } else if ft.is_dir() {
        let mut names: Vec<Vec<u8>> = Vec::new();
        for b in 0..image.dir_blocks(&inode).unwrap() {
            names.extend(
                image
                    .dir_block(&inode, b)
                    .unwrap()
                    .into_iter()
                    .map(|e| e.name),
            );
        }
        let mut want: Vec<Vec<u8>> = std::fs::read_dir(&path)
            .unwrap()
            .map(|e| e.unwrap().file_name().as_encoded_bytes().to_vec())
            .collect();
        want.push(b".".to_vec());
        want.push(b"..".to_vec());
        want.sort();
        assert_eq!(names, want, "entries of {what}");
    } else {
        use std::os::unix::fs::FileTypeExt;
        if ft.is_block_device() || ft.is_char_device() {
            let (ma, mi) = inode.rdev();
            let rdev = meta.rdev();
            let want = (
                ((rdev >> 8) & 0xfff) as u32,
                ((rdev & 0xff) | ((rdev >> 12) & !0xff)) as u32,
            );
            assert_eq!((ma, mi), want, "rdev of {what}");
        }
    }
}

fn walk(src: &Path, rel: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(src.join(rel)).unwrap() {
        let e = e.unwrap();
        let r = rel.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            walk(src, &r, out);
        }
        out.push(r);
    }
}

#[test]
fn every_option_set_reads_back_the_source_tree() {
    let dir = common::scratch("reader");
    let src = dir.join("tree");
    common::make_tree(&src, true, false);
    let mut paths = vec![std::path::PathBuf::new()];
    walk(&src, Path::new(""), &mut paths);
    // Two threads, each its half of the option sets: mkfs.erofs and the reads are CPU
    // work, and CI runs this binary alone.
    std::thread::scope(|scope| {
        for half in 0..2 {
            let (dir, src, paths) = (&dir, &src, &paths);
            scope.spawn(move || {
                let sets = common::OPTION_SETS.iter().enumerate();
                for (i, opts) in sets.filter(|(i, _)| i % 2 == half) {
                    let img = dir.join(format!("img-{i}.erofs"));
                    common::mkfs(&img, src, opts);
                    let image = Image::open_path(&img).unwrap();
                    for rel in paths {
                        compare(&image, src, rel, opts);
                    }
                    let _ = std::fs::remove_file(&img);
                }
            });
        }
    });
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn truncated_and_flipped_images_error_without_panicking() {
    let dir = common::scratch("corrupt");
    let src = dir.join("tree");
    common::make_tree(&src, false, false);
    let img = dir.join("img.erofs");
    common::mkfs(&img, &src, &["-zlz4hc", "-C16384", "-Eztailpacking"]);
    let bytes = std::fs::read(&img).unwrap();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for round in 0..300 {
        let mut b = bytes.clone();
        if round % 3 == 0 {
            b.truncate((seed as usize) % b.len());
        } else {
            for _ in 0..8 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let at = (seed as usize) % b.len();
                b[at] ^= (seed >> 32) as u8 | 1;
            }
        }
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        granary_erofs::walk::exercise(b);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
