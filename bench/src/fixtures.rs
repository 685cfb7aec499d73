//! What the `host` and `erofs` suites serve, made before the run and removed after it:
//! the two host directories (a tmpfs one and one on the root file system), granary's state
//! directory, and the EROFS image with the kernel's own mount of it.
//!
//! Everything is named after the bench's PID, so a run removes only what it made. The
//! kernel mount is made with `mount -t erofs -o loop,ro` and undone with `umount` when
//! the fixtures are dropped (after every server exporting it has stopped).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::pattern;

/// Name of the served file in the EROFS image (and of the 1 MiB/4 KiB READ target).
pub const EROFS_FILE: &str = "data.bin";
/// Small files beside it, so the image is a tree, not one file.
const EROFS_SMALL_FILES: u32 = 64;

/// The paths a suite serves.
pub struct Fixtures {
    /// A directory on tmpfs (`/dev/shm`).
    pub host_tmpfs: PathBuf,
    /// A directory on the root file system (`/var/tmp`).
    pub host_disk: PathBuf,
    /// granary's `--state-dir` (handle key, host handle indexes).
    pub state_dir: PathBuf,
    pub erofs: Option<Erofs>,
    /// The object suite's file system (a fresh database and key prefix).
    pub object: Option<ObjectFixture>,
    /// What the report must say about them (file systems, mount refusals).
    pub notes: Vec<String>,
    /// Directories to remove at the end.
    scratch: Vec<PathBuf>,
}

/// The object suite's file system: a database of its own on the engines the environment
/// names, and one config file per head, every head sharing one handle key.
pub struct ObjectFixture {
    pub config: backend_object::ObjectConfig,
    /// `head-N.toml` for head N (they differ only in name).
    pub head_configs: Vec<PathBuf>,
}

/// Heads the object suite may start: one for the one-head target, two for the two-head
/// target, and the last for the `baseline` target (`--baseline-bin`).
pub const OBJECT_HEADS: usize = 4;

/// The EROFS image and, where the kernel allowed it, its loop mount.
pub struct Erofs {
    pub image: PathBuf,
    /// The kernel's mount of the image, or why there is none.
    pub mount: Result<PathBuf, String>,
}

impl Fixtures {
    /// The host directories (empty) and the state directory.
    ///
    /// # Errors
    /// A directory could not be made.
    pub fn host() -> Result<Self, String> {
        let mut f = Self::base()?;
        for dir in [f.host_tmpfs.clone(), f.host_disk.clone()] {
            f.make_dir(&dir)?;
            f.notes
                .push(format!("{} is on {}", dir.display(), fs_type(&dir)));
        }
        Ok(f)
    }

    /// The host suite's tmpfs directory (the host-backend row beside the heads) and a
    /// fresh object file system on the engines the environment names.
    ///
    /// # Errors
    /// The engines are not named or cannot be reached, or a directory or file could not
    /// be made.
    pub fn object() -> Result<Self, String> {
        let mut f = Self::base()?;
        let tmpfs = f.host_tmpfs.clone();
        f.make_dir(&tmpfs)?;
        let engines = backend_object::TestEngines::try_from_env()
            .map_err(|e| format!("the object suite needs PostgreSQL and S3: {e}"))?;
        let config = engines.try_fresh("bench")?;
        let key = f.state_dir.join("handle.key");
        let s = &config.store;
        let store = format!(
            "s3://{}?endpoint={}&region={}&prefix={}",
            s.bucket,
            s.endpoint.as_deref().unwrap_or_default(),
            s.region,
            s.prefix
        );
        let text = format!(
            "handle_key = {key:?}\n[[export]]\npath = \"/\"\nbackend = \"object\"\n\
             squash = \"none\"\npostgres = {:?}\nstore = {store:?}\n",
            config.postgres
        );
        let mut head_configs = Vec::new();
        for n in 0..OBJECT_HEADS {
            let path = f.state_dir.join(format!("head-{n}.toml"));
            std::fs::write(&path, &text)
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            head_configs.push(path);
        }
        f.notes.push(format!(
            "object file system: database and key prefix {} (PostgreSQL {}, S3 {})",
            s.prefix,
            config.postgres.rsplit('@').next().unwrap_or("?"),
            s.endpoint.as_deref().unwrap_or("AWS")
        ));
        f.object = Some(ObjectFixture {
            config,
            head_configs,
        });
        Ok(f)
    }

    /// The paths, with only the state directory made.
    fn base() -> Result<Self, String> {
        let pid = std::process::id();
        let mut f = Self {
            host_tmpfs: PathBuf::from(format!("/dev/shm/granary-bench-host-{pid}")),
            host_disk: PathBuf::from(format!("/var/tmp/granary-bench-host-{pid}")),
            state_dir: PathBuf::from(format!("/dev/shm/granary-bench-state-{pid}")),
            erofs: None,
            object: None,
            notes: Vec::new(),
            scratch: Vec::new(),
        };
        f.make_dir(&f.state_dir.clone())?;
        Ok(f)
    }

    /// Makes `dir` and removes it at the end.
    fn make_dir(&mut self, dir: &Path) -> Result<(), String> {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        self.scratch.push(dir.to_path_buf());
        Ok(())
    }

    /// The state directory, an lz4 EROFS image of a generated tree whose `data.bin` holds
    /// `file_bytes` of the compressible pattern, and the kernel's mount of it.
    ///
    /// # Errors
    /// The tree or the image could not be made (no `mkfs.erofs`, no space).
    pub fn erofs(file_bytes: u64) -> Result<Self, String> {
        let mut f = Self::base()?;
        let root = PathBuf::from(format!(
            "/var/tmp/granary-bench-erofs-{}",
            std::process::id()
        ));
        f.make_dir(&root)?;
        let tree = root.join("tree");
        make_tree(&tree, file_bytes).map_err(|e| format!("generating the tree: {e}"))?;
        let image = root.join("image.erofs");
        let out = Command::new("mkfs.erofs")
            .arg("-zlz4")
            .arg(&image)
            .arg(&tree)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run mkfs.erofs (apt install erofs-utils): {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "mkfs.erofs failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let image_bytes = std::fs::metadata(&image).map_or(0, |m| m.len());
        f.notes.push(format!(
            "EROFS image {} (mkfs.erofs -zlz4, 4 KiB clusters): {} MiB file compressed to \
             {:.1} MiB",
            image.display(),
            file_bytes >> 20,
            image_bytes as f64 / f64::from(1u32 << 20)
        ));
        // The served tree is in the image now; its source copy only costs space.
        drop(std::fs::remove_dir_all(&tree));
        let mnt = root.join("mnt");
        let mount = std::fs::create_dir_all(&mnt)
            .map_err(|e| e.to_string())
            .and_then(|()| kernel_mount(&image, &mnt))
            .map(|()| mnt);
        if let Err(why) = &mount {
            f.notes.push(format!(
                "the kernel refused to mount the image ({why}): ganesha cannot serve it, \
                 granary runs alone"
            ));
        }
        f.erofs = Some(Erofs { image, mount });
        Ok(f)
    }
}

impl Drop for Fixtures {
    fn drop(&mut self) {
        if let Some(Erofs { mount: Ok(mnt), .. }) = &self.erofs {
            let done = Command::new("umount")
                .arg(mnt)
                .stdin(Stdio::null())
                .status();
            if !done.is_ok_and(|s| s.success()) {
                tracing::warn!(mount = %mnt.display(), "umount failed; unmount it by hand");
                return; // never remove files beneath a live mount
            }
        }
        for dir in self.scratch.iter().rev() {
            drop(std::fs::remove_dir_all(dir));
        }
    }
}

fn make_tree(tree: &Path, file_bytes: u64) -> std::io::Result<()> {
    std::fs::create_dir_all(tree.join("small"))?;
    let mut f = std::fs::File::create(tree.join(EROFS_FILE))?;
    let mut buf = vec![0u8; 1 << 20];
    let mut at = 0u64;
    while at < file_bytes {
        let len = usize::try_from((file_bytes - at).min(1 << 20)).unwrap_or(0);
        pattern::text_fill_into(at, &mut buf[..len]);
        f.write_all(&buf[..len])?;
        at += len as u64;
    }
    for i in 0..EROFS_SMALL_FILES {
        let len = 100 + 997 * i as usize;
        pattern::text_fill_into(u64::from(i) << 20, &mut buf[..len]);
        std::fs::write(tree.join(format!("small/f{i:03}")), &buf[..len])?;
    }
    Ok(())
}

fn kernel_mount(image: &Path, mnt: &Path) -> Result<(), String> {
    let out = Command::new("mount")
        .args(["-t", "erofs", "-o", "loop,ro"])
        .arg(image)
        .arg(mnt)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run mount: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
    }
}

/// Drops the kernel's clean page cache (the cold runs): `sync`, then 3 into
/// `/proc/sys/vm/drop_caches`.
///
/// # Errors
/// Not allowed (not root, or a container that hides it).
pub fn drop_page_cache() -> Result<(), String> {
    drop(Command::new("sync").stdin(Stdio::null()).status());
    std::fs::write("/proc/sys/vm/drop_caches", "3\n")
        .map_err(|e| format!("cannot drop the page cache: {e}"))
}

/// The file system type `path` is on, from the longest matching mount point of
/// `/proc/self/mounts`.
fn fs_type(path: &Path) -> String {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (dev, at, ty) = (f.next()?, f.next()?, f.next()?);
            path.starts_with(at)
                .then(|| (at.len(), format!("{ty} ({dev} at {at})")))
        })
        .max_by_key(|(n, _)| *n)
        .map_or_else(|| "an unknown file system".into(), |(_, d)| d)
}
