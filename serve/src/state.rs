//! Persistent server state: the state directory, the handle key, and where each host
//! export keeps its handle index.
//!
//! Layout of the state directory (created 0700):
//! - `handle.key`: 16 bytes, mode 0600: the SipHash key that signs handles. Kept across
//!   restarts so handles of host exports stay valid; delete it to invalidate every handle
//!   ever issued.
//! - `host-<hash>.index`: one handle index per host export (the hash is of the directory's
//!   canonical path and the export path), see `backend_host::index`.
//! - `host-<hash>.incarnation`: 4 bytes, the export's incarnation, part of every handle of
//!   that export; delete it to make that export's old handles stale.
//! - `nfs4-clients/`: one record per confirmed NFSv4 client, for reclaims after a restart
//!   (see `nfsd::v4::recovery`).
//! - `erofs-<hash>.identity`: the content hash of an EROFS image file (the hash is of its
//!   canonical path) and the file's device, inode, size, mtime and ctime when it was
//!   hashed; a restart with the file unchanged reuses it instead of reading the image.
//!   Deleting it only costs one read of the image.

use std::fs::OpenOptions;
use std::hash::Hasher;
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use siphasher::sip::SipHasher13;
use vfs::HandleKey;

const KEY_FILE: &str = "handle.key";
const KEY_BYTES: usize = 16;

/// Creates the state directory (0700) if needed.
///
/// # Errors
/// A message naming the directory and the fix.
pub fn prepare(dir: &Path) -> Result<(), String> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| {
            format!(
                "cannot create the state directory {}: {e}; choose a writable one with --state-dir",
                dir.display()
            )
        })
}

/// The persisted handle key, created (0600) on first use.
///
/// # Errors
/// The key file cannot be read or written, is damaged, or is readable by others.
pub fn handle_key(dir: &Path) -> Result<HandleKey, String> {
    let raw: [u8; KEY_BYTES] = private_secret(&dir.join(KEY_FILE), "every handle ever issued")?;
    Ok(HandleKey::new(raw))
}

/// The handle key kept in `file` (`handle_key = ...`), made on first use: heads of one
/// object file system share it.
///
/// # Errors
/// The file cannot be read or written, is readable by others, or is damaged.
pub fn handle_key_file(file: &Path) -> Result<HandleKey, String> {
    let raw: [u8; KEY_BYTES] = private_secret(file, "every handle ever issued")?;
    Ok(HandleKey::new(raw))
}

/// The persisted incarnation of the host export of `dir` at `path`, created on first use.
///
/// # Errors
/// The file cannot be read or written, or is damaged.
pub fn incarnation(state: &Path, dir: &Path, path: &str) -> Result<u32, String> {
    let file = state.join(format!("host-{:016x}.incarnation", export_hash(dir, path)));
    let raw: [u8; 4] = private_secret(&file, "every handle of this export")?;
    Ok(u32::from_be_bytes(raw))
}

/// The NFSv4 server owner and scope of this state directory (`nfs4-server-owner`), made
/// once: the same across restarts, so clients reclaim their state in the grace period.
pub fn nfs4_server_owner(dir: &Path) -> Result<[u8; 8], String> {
    private_secret(
        &dir.join("nfs4-server-owner"),
        "the NFSv4 clients' reclaim after the next restart",
    )
}

/// Reads `N` random bytes kept in `path` (mode 0600), or makes and syncs them. `lost` says
/// which handles go stale if the file is deleted.
fn private_secret<const N: usize>(path: &Path, lost: &str) -> Result<[u8; N], String> {
    match std::fs::File::open(path) {
        Ok(mut f) => {
            let mode = f
                .metadata()
                .map_err(|e| e.to_string())?
                .permissions()
                .mode();
            if mode & 0o077 != 0 {
                return Err(format!(
                    "{} is readable by other users (mode {:o}); anyone who reads it can forge handles: chmod 600 it",
                    path.display(),
                    mode & 0o777
                ));
            }
            let mut raw = Vec::new();
            f.read_to_end(&mut raw).map_err(|e| e.to_string())?;
            raw.as_slice().try_into().map_err(|_| {
                format!(
                    "{} is damaged ({} bytes, want {N}); delete it to start afresh ({lost} becomes stale)",
                    path.display(),
                    raw.len()
                )
            })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => create_secret(path, lost),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

/// Makes the secret for `path`: written and synced under a name of its own, then
/// linked into place, so servers starting at once in one state directory (tests, the lab's
/// three decode servers) never read a half-written file: the first link wins and the
/// others read what it linked.
fn create_secret<const N: usize>(path: &Path, lost: &str) -> Result<[u8; N], String> {
    let mut raw = [0u8; N];
    rand::Rng::fill(&mut rand::thread_rng(), &mut raw[..]);
    let mut tmp_name = path.as_os_str().to_owned();
    let unique: u64 = rand::random();
    tmp_name.push(format!(".{}.{unique:016x}.tmp", std::process::id()));
    let tmp = PathBuf::from(tmp_name);
    let written = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| f.write_all(&raw).and_then(|()| f.sync_all()));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(format!("cannot write {}: {e}", tmp.display()));
    }
    let linked = std::fs::hard_link(&tmp, path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => {
            tracing::info!(path = %path.display(), "created new persistent state");
            Ok(raw)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => private_secret(path, lost),
        Err(e) => Err(format!("cannot create {}: {e}", path.display())),
    }
}

/// A stable hash of a host export (the directory's canonical path and the export path):
/// names its index and incarnation files and gives the export an id that does not change
/// when the config's order does.
#[must_use]
pub fn export_hash(dir: &Path, path: &str) -> u64 {
    let canonical = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let mut h = SipHasher13::new_with_keys(0x6772_616e_6172_7900, 0x6469_7268_6173_6800);
    h.write(canonical.as_os_str().as_encoded_bytes());
    h.write_u8(0);
    h.write(path.as_bytes());
    h.finish()
}

/// The content identity of the EROFS image file `image` (see `erofs::Image::identity`),
/// from the state directory when the file has the same device, inode, size, mtime and
/// ctime as when it was hashed, else `compute()`d and recorded. Any change to the file
/// changes its ctime, so a changed image is always hashed again.
///
/// # Errors
/// The image cannot be examined, `compute` fails, or the record cannot be written.
pub fn erofs_identity(
    state: &Path,
    image: &Path,
    compute: impl FnOnce() -> Result<u64, String>,
) -> Result<u64, String> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(image).map_err(|e| format!("{}: {e}", image.display()))?;
    let nanos = |s: i64, ns: i64| {
        (s as u64)
            .wrapping_mul(1_000_000_000)
            .wrapping_add(ns as u64)
    };
    let stamp = [
        meta.dev(),
        meta.ino(),
        meta.size(),
        nanos(meta.mtime(), meta.mtime_nsec()),
        nanos(meta.ctime(), meta.ctime_nsec()),
    ];
    let canonical = image.canonicalize().unwrap_or_else(|_| image.to_path_buf());
    let mut h = SipHasher13::new_with_keys(0x6772_616e_6172_7900, 0x696d_6167_6569_6400);
    h.write(canonical.as_os_str().as_encoded_bytes());
    let record = state.join(format!("erofs-{:016x}.identity", h.finish()));
    if let Ok(raw) = std::fs::read(&record) {
        let words: Vec<u64> = raw
            .chunks_exact(8)
            .map(|c| u64::from_be_bytes(c.try_into().unwrap_or_default()))
            .collect();
        if words.len() == 6 && words[..5] == stamp {
            return Ok(words[5]);
        }
    }
    let started = std::time::Instant::now();
    let identity = compute()?;
    tracing::info!(image = %image.display(), bytes = meta.size(), ms = started.elapsed().as_millis() as u64, "hashed the image (its identity makes handles survive restarts)");
    let raw: Vec<u8> = stamp
        .iter()
        .chain([&identity])
        .flat_map(|w| w.to_be_bytes())
        .collect();
    let tmp = record.with_extension(format!("{}.tmp", std::process::id()));
    std::fs::write(&tmp, raw)
        .and_then(|()| std::fs::rename(&tmp, &record))
        .map_err(|e| format!("cannot write {}: {e}", record.display()))?;
    Ok(identity)
}

/// A stable number for the EROFS export at `path` (its export id comes from it): the
/// export path alone, hashed apart from host exports' numbers.
#[must_use]
pub fn erofs_export_hash(path: &str) -> u64 {
    let mut h = SipHasher13::new_with_keys(0x6772_616e_6172_7900, 0x6572_6f66_7369_6400);
    h.write(path.as_bytes());
    h.finish()
}

/// The handle index file of the host export of `dir` at `path`.
#[must_use]
pub fn index_path(state: &Path, dir: &Path, path: &str) -> PathBuf {
    state.join(format!("host-{:016x}.index", export_hash(dir, path)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_created_private_and_read_back() {
        let dir = std::env::temp_dir().join(format!("granary-state-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        prepare(&dir).unwrap();
        let a = handle_key(&dir).unwrap();
        let b = handle_key(&dir).unwrap();
        let h = vfs::Handle {
            export: vfs::ExportId(1),
            incarnation: 9,
            file: vfs::FileId(2),
            generation: 3,
        };
        b.verify(&a.encode(&h)).unwrap();
        let one = incarnation(&dir, &dir, "/").unwrap();
        assert_eq!(incarnation(&dir, &dir, "/").unwrap(), one);
        let key = dir.join(KEY_FILE);
        let mode = std::fs::metadata(&key).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(handle_key(&dir).unwrap_err().contains("chmod 600"));
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(&key, b"short").unwrap();
        assert!(handle_key(&dir).unwrap_err().contains("damaged"));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn an_image_identity_is_hashed_once_per_version_of_the_file() {
        let dir = std::env::temp_dir().join(format!("granary-state-id-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        prepare(&dir).unwrap();
        let image = dir.join("img");
        std::fs::write(&image, b"one").unwrap();
        assert_eq!(erofs_identity(&dir, &image, || Ok(7)), Ok(7));
        let again = erofs_identity(&dir, &image, || unreachable!("kept from the last start"));
        assert_eq!(again, Ok(7));
        // Rewritten in place (its ctime moves): hashed again, never the stale identity.
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&image, b"two").unwrap();
        assert_eq!(erofs_identity(&dir, &image, || Ok(8)), Ok(8));
        // A damaged record is ignored.
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "identity") {
                std::fs::write(&path, b"junk").unwrap();
            }
        }
        assert_eq!(erofs_identity(&dir, &image, || Ok(8)), Ok(8));
        assert!(erofs_identity(&dir, &dir.join("missing"), || Ok(1)).is_err());
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn servers_starting_at_once_agree_on_the_key() {
        let dir = std::env::temp_dir().join(format!("granary-state-race-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        prepare(&dir).unwrap();
        let h = vfs::Handle {
            export: vfs::ExportId(1),
            incarnation: 9,
            file: vfs::FileId(2),
            generation: 3,
        };
        // The same key signs a handle the same way.
        let keys: Vec<String> = std::thread::scope(|s| {
            let runs: Vec<_> = (0..8)
                .map(|_| s.spawn(|| format!("{:?}", handle_key(&dir).map(|k| k.encode(&h)))))
                .collect();
            runs.into_iter().map(|r| r.join().unwrap()).collect()
        });
        assert!(
            keys.iter().all(|k| k == &keys[0] && k.starts_with("Ok")),
            "{keys:?}"
        );
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            names,
            [std::ffi::OsString::from("handle.key")],
            "no temporary files left"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
