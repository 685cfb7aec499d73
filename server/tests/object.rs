//! The real binary serving an object export (PostgreSQL + S3 from
//! `scripts/object-env.sh`), two heads on one database and bucket: what one head's client
//! does, the other head's client sees, through granary's client crate and through
//! libnfs-utils. Fails when the engines are absent unless GRANARY_OBJECT_TESTS=skip.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use backend_object::{ObjectConfig, TestEngines};
use common::nfs::connect;
use common::Server;
use nfs3::nfs::StableHow;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("granary-object-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A config file for one head of `fs`, every head sharing `key`.
fn head_config(dir: &Path, head: &str, fs: &ObjectConfig, key: &Path) -> PathBuf {
    let s = &fs.store;
    let store = format!(
        "s3://{}?endpoint={}&prefix={}",
        s.bucket,
        s.endpoint.as_deref().unwrap_or_default(),
        s.prefix
    );
    let text = format!(
        "handle_key = {key:?}\n[[export]]\npath = \"/\"\nbackend = \"object\"\npostgres = {:?}\nstore = {store:?}\n",
        fs.postgres
    );
    let path = dir.join(format!("{head}.toml"));
    std::fs::write(&path, text).unwrap();
    path
}

/// The outage test stops the database every test here uses: the tests of this file run
/// one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Two heads of one fresh object file system.
fn two_heads(tag: &str) -> Option<(Server, Server, PathBuf)> {
    let env = TestEngines::from_env()?;
    let fs = env.fresh(tag);
    let dir = scratch(tag);
    let key = dir.join("handle.key");
    let a = head_config(&dir, "a", &fs, &key);
    let b = head_config(&dir, "b", &fs, &key);
    let a = Server::start(&["--config", a.to_str().unwrap()]);
    let b = Server::start(&["--config", b.to_str().unwrap()]);
    Some((a, b, dir))
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 % 253) as u8).collect()
}

#[test]
fn a_file_made_on_one_head_is_seen_and_read_through_the_other() {
    let _serial = one_at_a_time();
    let Some((a, b, _dir)) = two_heads("srv-heads") else {
        return;
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let ca = connect(&a).await;
        let cb = connect(&b).await;
        let root_a = ca.mount("/").await.expect("MNT / on head A");
        let root_b = cb.mount("/").await.expect("MNT / on head B");
        assert_eq!(root_a, root_b, "both heads hand out the same root handle");
        let fh = ca.create_file(&root_a, "shared", 0o644).await.unwrap();
        let data = pattern(3 << 20);
        ca.write_all(&fh, 0, &data, StableHow::Unstable)
            .await
            .unwrap();
        let commit = nfs3::nfs::CommitArgs {
            file: fh.clone(),
            offset: 0,
            count: 0,
        };
        common::nfs::expect_ok(ca.commit(&commit).await.unwrap(), "COMMIT on A");
        // Head B resolves head A's handle, finds the name and reads the committed data.
        let on_b = cb.getattr_ok(&fh).await.expect("A's handle on B");
        assert_eq!(on_b.size, data.len() as u64);
        let (found, _) = cb.lookup_ok(&root_b, "shared").await.unwrap();
        assert_eq!(found, fh);
        assert!(
            cb.read_all(&fh).await.unwrap() == data,
            "B reads what A committed"
        );
        // A directory made on B is listed on A at once.
        cb.mkdir_ok(&root_b, "from-b", 0o755).await.unwrap();
        let names: Vec<String> = ca
            .list_dir(&root_a)
            .await
            .unwrap()
            .into_iter()
            .map(|(name, _, _)| String::from_utf8_lossy(&name).into_owned())
            .collect();
        assert!(names.contains(&"from-b".to_string()), "{names:?}");
        cb.rename_ok(&root_b, "shared", &root_b, "renamed")
            .await
            .unwrap();
        assert!(ca.lookup_ok(&root_a, "shared").await.is_err());
        assert_eq!(ca.lookup_ok(&root_a, "renamed").await.unwrap().0, fh);
    });
}

#[test]
fn libnfs_utils_copy_in_through_one_head_and_out_through_the_other() {
    let _serial = one_at_a_time();
    let Some((a, b, dir)) = two_heads("srv-libnfs") else {
        return;
    };
    for (name, len) in [("tiny", 100), ("page", 4096), ("mib-plus", (1 << 20) + 3)] {
        let local = dir.join(name);
        let data = pattern(len);
        std::fs::write(&local, &data).unwrap();
        run("nfs-cp", &[local.to_str().unwrap(), &a.url_of(name)]);
        let out = run("nfs-cat", &[&b.url_of(name)]);
        assert!(out == data, "{name}: nfs-cat through head B differs");
    }
    let listing = String::from_utf8(run("nfs-ls", &[&b.url_of("")])).unwrap();
    for name in ["tiny", "page", "mib-plus"] {
        assert!(listing.contains(name), "nfs-ls on B: {listing}");
    }
}

fn run(tool: &str, args: &[&str]) -> Vec<u8> {
    let out = Command::new(tool).args(args).output().unwrap_or_else(|e| {
        panic!("cannot run {tool} ({e}); install libnfs-utils: apt-get install libnfs-utils")
    });
    assert!(
        out.status.success(),
        "{tool} {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

#[test]
fn a_stopped_database_answers_jukebox_and_the_head_recovers_when_it_is_back() {
    let _serial = one_at_a_time();
    let Some((a, _b, _dir)) = two_heads("srv-dbdown") else {
        return;
    };
    let env_dir = std::env::var("GRANARY_OBJECT_ENV_DIR")
        .expect("GRANARY_OBJECT_ENV_DIR names the scripts/object-env.sh directory");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/object-env.sh");
    let engine = |what: &str| {
        let out = Command::new(&script)
            .args([what, &env_dir])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "object-env.sh {what}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let c = connect(&a).await;
        let root = c.mount("/").await.expect("MNT /");
        let fh = c.create_file(&root, "f", 0o644).await.unwrap();
        engine("pg-stop");
        let started = Instant::now();
        let args = nfs3::nfs::GetattrArgs { object: fh.clone() };
        let res = c.getattr(&args).await;
        engine("pg-start");
        match res {
            Ok(nfs3::nfs::Res3::Fail(status, _)) => {
                assert_eq!(status, nfs3::nfs::Nfsstat3::Jukebox);
            }
            other => panic!("GETATTR with the database stopped: {other:?}"),
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "{:?}",
            started.elapsed()
        );
        // Back by itself: the head's pool drops the dead connections and makes new ones.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match c.getattr_ok(&fh).await {
                Ok(attr) => {
                    assert_eq!(attr.size, 0);
                    break;
                }
                Err(e) if Instant::now() < deadline => {
                    eprintln!("not yet: {e:?}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => panic!("the head did not recover: {e:?}"),
            }
        }
        c.create_file(&root, "after", 0o644)
            .await
            .expect("CREATE after recovery");
    });
}
