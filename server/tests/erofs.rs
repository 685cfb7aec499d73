//! Differential tests of the erofs backend: trees built by `mkfs.erofs` with every
//! supported option set are served by the real `granary` binary and read over NFS by
//! granary's client (READDIRPLUS attributes, READ, READLINK) and by libnfs-utils
//! (`nfs-cat`, a client nobody here wrote). Every file must equal the source tree, the
//! Linux kernel's own loop mount of the image (as root) and `fsck.erofs --extract`.
//! Needs erofs-utils and libnfs-utils (scripts/test-all.sh installs them).

mod common;
#[path = "../../erofs/tests/common/mod.rs"]
mod tree;

use std::collections::HashMap;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use client::Nfs3Client;
use common::Server;
use nfs3::nfs::{Fattr3, Ftype3, NfsFh3, ReadlinkArgs, Res3};

fn ftype_of(ft: std::fs::FileType) -> Ftype3 {
    if ft.is_dir() {
        Ftype3::Dir
    } else if ft.is_symlink() {
        Ftype3::Lnk
    } else if ft.is_block_device() {
        Ftype3::Blk
    } else if ft.is_char_device() {
        Ftype3::Chr
    } else if ft.is_fifo() {
        Ftype3::Fifo
    } else if ft.is_socket() {
        Ftype3::Sock
    } else {
        Ftype3::Reg
    }
}

/// Compares NFS attributes with a local file's metadata (the source tree or a mount).
fn same_attrs(a: &Fattr3, m: &std::fs::Metadata, opts: &[&str], what: &str) {
    assert_eq!(a.ftype, ftype_of(m.file_type()), "type of {what}");
    assert_eq!(a.mode, m.mode() & 0o7777, "mode of {what}");
    if !opts.contains(&"--all-root") {
        assert_eq!((a.uid, a.gid), (m.uid(), m.gid()), "owner of {what}");
    }
    if !m.is_dir() {
        assert_eq!(a.size, m.size(), "size of {what}");
    }
    assert_eq!(u64::from(a.nlink), m.nlink(), "nlink of {what}");
    if !opts.contains(&"-T") {
        assert_eq!(i64::from(a.mtime.seconds), m.mtime(), "mtime of {what}");
        assert_eq!(
            i64::from(a.mtime.nseconds),
            m.mtime_nsec(),
            "mtime ns of {what}"
        );
    }
    if m.file_type().is_block_device() || m.file_type().is_char_device() {
        let (ma, mi) = (libc_major(m.rdev()), libc_minor(m.rdev()));
        assert_eq!(
            (a.rdev.specdata1, a.rdev.specdata2),
            (ma, mi),
            "rdev of {what}"
        );
    }
}

fn libc_major(dev: u64) -> u32 {
    (((dev >> 32) & 0xffff_f000) | ((dev >> 8) & 0xfff)) as u32
}

fn libc_minor(dev: u64) -> u32 {
    (((dev >> 12) & 0xffff_ff00) | (dev & 0xff)) as u32
}

/// Walks the export over NFS and compares every entry with `reference` (a directory on
/// this machine holding the same tree). Returns the paths of the regular files seen.
async fn walk_nfs(
    client: &Nfs3Client,
    root: NfsFh3,
    reference: &Path,
    opts: &[&str],
) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut fileids: HashMap<u64, u64> = HashMap::new();
    let mut todo = vec![(root, PathBuf::new())];
    while let Some((dir, rel)) = todo.pop() {
        let entries = client.list_dir_plus(&dir).await.expect("READDIRPLUS");
        let mut names: Vec<Vec<u8>> = Vec::new();
        for e in entries {
            let name = e.name.0.to_vec();
            if name == b"." || name == b".." {
                continue;
            }
            names.push(name.clone());
            let path = rel.join(String::from_utf8(name).unwrap());
            let what = format!("{} {opts:?}", path.display());
            let attr = e
                .name_attributes
                .0
                .unwrap_or_else(|| panic!("no attributes: {what}"));
            let fh = e
                .name_handle
                .0
                .unwrap_or_else(|| panic!("no handle: {what}"));
            let meta = std::fs::symlink_metadata(reference.join(&path)).unwrap();
            same_attrs(&attr, &meta, opts, &what);
            assert_eq!(attr.fileid, e.fileid, "fileid of {what}");
            let prior = fileids.insert(meta.ino(), attr.fileid);
            assert!(
                prior.is_none_or(|f| f == attr.fileid),
                "hard links share a fileid: {what}"
            );
            match attr.ftype {
                Ftype3::Dir => todo.push((fh, path)),
                Ftype3::Reg => {
                    let data = client.read_all(&fh).await.expect("READ");
                    let want = std::fs::read(reference.join(&path)).unwrap();
                    assert!(data == want, "content of {what}");
                    files.push(path);
                }
                Ftype3::Lnk => {
                    let res = client
                        .readlink(&ReadlinkArgs { symlink: fh })
                        .await
                        .unwrap();
                    let Res3::Ok(ok) = res else {
                        panic!("READLINK {what}")
                    };
                    let want = std::fs::read_link(reference.join(&path)).unwrap();
                    assert_eq!(
                        &ok.data.0[..],
                        want.as_os_str().as_encoded_bytes(),
                        "{what}"
                    );
                }
                _ => {}
            }
        }
        let mut want: Vec<Vec<u8>> = std::fs::read_dir(reference.join(&rel))
            .unwrap()
            .map(|e| e.unwrap().file_name().as_encoded_bytes().to_vec())
            .collect();
        want.sort();
        names.sort();
        assert_eq!(names, want, "entries of {}", rel.display());
    }
    files
}

fn nfs_cat(server: &Server, rel: &Path) -> Vec<u8> {
    let url = server.url_of(rel.to_str().unwrap());
    let out = Command::new("nfs-cat")
        .arg(&url)
        .output()
        .expect("nfs-cat (libnfs-utils)");
    assert!(
        out.status.success(),
        "nfs-cat {url}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Loop-mounts `image` read-only with the kernel's erofs driver; `None` when not root.
struct KernelMount(PathBuf);

impl KernelMount {
    fn new(image: &Path, at: &Path) -> Option<Self> {
        if unsafe_free_uid() != 0 {
            eprintln!("not root: skipping the comparison with the kernel's erofs mount");
            return None;
        }
        std::fs::create_dir_all(at).unwrap();
        let st = Command::new("mount")
            .args(["-t", "erofs", "-o", "loop,ro"])
            .arg(image)
            .arg(at)
            .status()
            .unwrap();
        assert!(st.success(), "mount -t erofs -o loop {}", image.display());
        Some(Self(at.to_path_buf()))
    }
}

impl Drop for KernelMount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

fn unsafe_free_uid() -> u32 {
    std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(u32::MAX)
}

fn fsck_extract(image: &Path, to: &Path) {
    let out = Command::new("fsck.erofs")
        .arg(format!("--extract={}", to.display()))
        .arg(image)
        .output()
        .expect("fsck.erofs (erofs-utils)");
    assert!(
        out.status.success(),
        "fsck.erofs: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

async fn serve_and_compare(image: &Path, src: &Path, opts: &[&str], scratch: &Path) {
    // No squashing: root must read files that only their owner may read.
    let state = scratch.join("state");
    let server = Server::start(&[
        image.to_str().unwrap(),
        "--squash",
        "none",
        "--state-dir",
        state.to_str().unwrap(),
    ]);
    let client = Nfs3Client::connect(server.addr, server.addr).await.unwrap();
    let root = client.mount("/").await.expect("mount");
    let files = walk_nfs(&client, root.clone(), src, opts).await;
    for rel in files
        .iter()
        .filter(|p| !p.starts_with("big"))
        .chain(files.iter().take(3))
    {
        assert!(
            nfs_cat(&server, rel) == std::fs::read(src.join(rel)).unwrap(),
            "nfs-cat {}",
            rel.display()
        );
    }
    if let Some(kernel) = KernelMount::new(image, &scratch.join("mnt")) {
        walk_nfs(&client, root, &kernel.0, opts).await;
    }
    let extracted = scratch.join("extract");
    let _ = std::fs::remove_dir_all(&extracted);
    fsck_extract(image, &extracted);
    for rel in &files {
        let got = std::fs::read(extracted.join(rel)).unwrap();
        assert!(
            got == std::fs::read(src.join(rel)).unwrap(),
            "fsck.erofs --extract {}",
            rel.display()
        );
    }
    std::fs::remove_dir_all(&extracted).unwrap();
}

#[test]
fn every_option_set_serves_the_source_tree_over_nfs() {
    let dir = tree::scratch("nfs");
    // The 10,000-entry directory goes into the images whose options change how
    // directories and inodes are laid out; the others only change how regular files'
    // data is stored, so they get the same tree without it (the big directory read over
    // NFS, through the kernel's mount and from fsck.erofs was most of this test's time).
    let (with_big, without_big) = (dir.join("tree-big"), dir.join("tree"));
    tree::make_tree(&with_big, true, false);
    tree::make_tree(&without_big, false, false);
    // Two halves of the option sets at once, each on a thread with its own runtime and
    // scratch (server state, kernel mount point, extraction): most of the time is
    // mkfs.erofs, fsck.erofs and nfs-cat processes, and CI runs this binary alone on two
    // cores.
    std::thread::scope(|scope| {
        for half in 0..2 {
            let (with_big, without_big) = (&with_big, &without_big);
            let scratch = dir.join(format!("half-{half}"));
            scope.spawn(move || {
                std::fs::create_dir_all(&scratch).unwrap();
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                let sets = tree::OPTION_SETS.iter().enumerate();
                for (i, opts) in sets.filter(|(i, _)| i % 2 == half) {
                    let src = if tree::lays_out_directories(opts) {
                        with_big
                    } else {
                        without_big
                    };
                    let image = scratch.join(format!("img-{i}.erofs"));
                    tree::mkfs(&image, src, opts);
                    rt.block_on(serve_and_compare(&image, src, opts, &scratch));
                    std::fs::remove_file(&image).unwrap();
                }
            });
        }
    });
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_64_mib_file_reads_back_through_nfs_cat_and_the_kernel() {
    let dir = tree::scratch("huge");
    let src = dir.join("tree");
    std::fs::create_dir_all(&src).unwrap();
    let data = tree::bytes(64, 64 << 20, false);
    let mut data = data;
    for chunk in data.chunks_mut(3 << 20).step_by(2) {
        chunk.copy_from_slice(&tree::bytes(65, chunk.len(), true));
    }
    std::fs::write(src.join("huge"), &data).unwrap();
    let image = dir.join("huge.erofs");
    // lz4, not lz4hc: both write the same LZ4 clusters (the option sets cover lz4hc), and
    // lz4hc took 31 s of this test here to compress the 32 MiB of noise.
    tree::mkfs(&image, &src, &["-zlz4", "-C65536", "-Eztailpacking"]);
    let state = dir.join("state");
    let server = Server::start(&[
        image.to_str().unwrap(),
        "--state-dir",
        state.to_str().unwrap(),
    ]);
    assert!(
        nfs_cat(&server, Path::new("huge")) == data,
        "64 MiB through nfs-cat"
    );
    if let Some(kernel) = KernelMount::new(&image, &dir.join("mnt")) {
        assert!(
            std::fs::read(kernel.0.join("huge")).unwrap() == data,
            "kernel mount"
        );
    }
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_cluster_fails_only_its_file() {
    let dir = tree::scratch("bad");
    let src = dir.join("tree");
    std::fs::create_dir_all(&src).unwrap();
    let good = tree::bytes(1, 200_000, true);
    std::fs::write(src.join("bad"), tree::bytes(2, 200_000, true)).unwrap();
    std::fs::write(src.join("good"), &good).unwrap();
    let image = dir.join("img.erofs");
    tree::mkfs(&image, &src, &["-zlz4hc"]);
    // Overwrite the first compressed cluster of "bad" with noise.
    let (offset, len) = {
        let img = ::erofs::Image::open_path(&image).unwrap();
        let root = img.inode(img.root_nid()).unwrap();
        let e = img.lookup(&root, b"bad").unwrap().unwrap();
        let ext = img.map_extent(&img.inode(e.nid).unwrap(), 0).unwrap();
        ext.src.offset_len()
    };
    let mut bytes = std::fs::read(&image).unwrap();
    let noise = tree::bytes(3, len as usize, false);
    bytes[offset as usize..(offset + len) as usize].copy_from_slice(&noise);
    std::fs::write(&image, &bytes).unwrap();
    let state = dir.join("state");
    let server = Server::start(&[
        image.to_str().unwrap(),
        "--state-dir",
        state.to_str().unwrap(),
    ]);
    let client = Nfs3Client::connect(server.addr, server.addr).await.unwrap();
    let root = client.mount("/").await.expect("mount");
    let (bad, _) = client.lookup_ok(&root, "bad").await.unwrap();
    let err = client
        .read_all(&bad)
        .await
        .expect_err("a corrupt cluster cannot be read");
    assert!(
        format!("{err:?}").contains("Io"),
        "NFS3ERR_IO expected, got {err:?}"
    );
    let (ok, _) = client.lookup_ok(&root, "good").await.unwrap();
    assert!(
        client.read_all(&ok).await.unwrap() == good,
        "the other file is still served"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// GETATTR's status for `fh` (a handle of an earlier run).
async fn getattr_status(client: &Nfs3Client, fh: &NfsFh3) -> nfs3::nfs::Nfsstat3 {
    let args = nfs3::nfs::GetattrArgs { object: fh.clone() };
    client.getattr(&args).await.expect("GETATTR call").status()
}

/// Handles of a few files of the tree, by path, from a server serving an image of it.
async fn handles_of(server: &Server) -> (Nfs3Client, Vec<(String, NfsFh3)>) {
    let client = Nfs3Client::connect(server.addr, server.addr).await.unwrap();
    let root = client.mount("/").await.expect("mount");
    let mut out = vec![("/".to_string(), root.clone())];
    for path in ["sub", "sub/deeper", "one", "text-4097"] {
        let fh = client.lookup_path(&root, path).await.expect(path).0;
        out.push((path.to_string(), fh));
    }
    (client, out)
}

/// Issue 14: a restart serving the same image (or a byte copy of it) accepts the handles
/// the last run gave out, on a fresh connection without MOUNT, and reads the same data
/// through them; a server of another image (the same tree built again: a new uuid)
/// answers them NFS3ERR_STALE. The handle key persists in `--state-dir`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handles_survive_a_restart_and_go_stale_with_another_image() {
    let dir = tree::scratch("restart");
    let src = dir.join("tree");
    tree::make_tree(&src, false, false);
    let image = dir.join("a.erofs");
    tree::mkfs(&image, &src, &["-zlz4hc"]);
    let state = dir.join("state");
    let serve = |img: &Path| {
        Server::start(&[
            img.to_str().unwrap(),
            "--state-dir",
            state.to_str().unwrap(),
        ])
    };
    let first = serve(&image);
    let (client, old) = handles_of(&first).await;
    let file = &old.iter().find(|(p, _)| p == "text-4097").unwrap().1;
    let data = client.read_all(file).await.unwrap();
    drop(client);
    first.terminate();

    let copy = dir.join("copy.erofs");
    std::fs::copy(&image, &copy).unwrap();
    for img in [&image, &copy] {
        let again = serve(img);
        let client = Nfs3Client::connect(again.addr, again.addr).await.unwrap();
        for (path, fh) in &old {
            let status = getattr_status(&client, fh).await;
            assert_eq!(status, nfs3::nfs::Nfsstat3::Ok, "{path} after a restart");
        }
        assert!(
            client.read_all(file).await.unwrap() == data,
            "READ after a restart"
        );
        drop(client);
        again.terminate();
    }

    // The export's id comes from its path, not its place: a config that puts another
    // export first keeps the handles.
    let config = dir.join("granary.toml");
    let toml = format!(
        "[[export]]\npath = \"/scratch\"\n\n[[export]]\npath = \"/\"\nbackend = \"erofs\"\nimage = {:?}\n",
        copy.to_str().unwrap()
    );
    std::fs::write(&config, toml).unwrap();
    let reordered = Server::start(&[
        "--config",
        config.to_str().unwrap(),
        "--state-dir",
        state.to_str().unwrap(),
    ]);
    let client = Nfs3Client::connect(reordered.addr, reordered.addr)
        .await
        .unwrap();
    for (path, fh) in &old {
        let status = getattr_status(&client, fh).await;
        assert_eq!(status, nfs3::nfs::Nfsstat3::Ok, "{path} after reordering");
    }
    drop(client);
    reordered.terminate();

    let other = dir.join("b.erofs");
    tree::mkfs(&other, &src, &["-zlz4hc"]);
    let changed = serve(&other);
    let client = Nfs3Client::connect(changed.addr, changed.addr)
        .await
        .unwrap();
    for (path, fh) in &old {
        let status = getattr_status(&client, fh).await;
        assert_eq!(
            status,
            nfs3::nfs::Nfsstat3::Stale,
            "{path} of another image"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
