//! Heads of an object export (PostgreSQL + S3 from `scripts/object-env.sh`) for the tests
//! that start the real binary on one: a scratch directory and a config file per head.

use std::path::{Path, PathBuf};
use std::process::Command;

use backend_object::ObjectConfig;

/// A fresh scratch directory for one test (`name`), under the temp directory.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("granary-object-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A config file for one head of `fs`, every head sharing `key`.
pub fn head_config(dir: &Path, head: &str, fs: &ObjectConfig, key: &Path) -> PathBuf {
    head_config_with(dir, head, fs, key, "")
}

/// [`head_config`] with more lines for the export's table (`squash = "none"`).
pub fn head_config_with(
    dir: &Path,
    head: &str,
    fs: &ObjectConfig,
    key: &Path,
    extra: &str,
) -> PathBuf {
    let text = format!("handle_key = {key:?}\n{}{extra}", export_table("/", fs));
    let path = dir.join(format!("{head}.toml"));
    std::fs::write(&path, text).unwrap();
    path
}

/// The `[[export]]` table of an object export of `fs` at `path`.
pub fn export_table(path: &str, fs: &ObjectConfig) -> String {
    let s = &fs.store;
    let store = format!(
        "s3://{}?endpoint={}&prefix={}",
        s.bucket,
        s.endpoint.as_deref().unwrap_or_default(),
        s.prefix
    );
    format!(
        "[[export]]\npath = {path:?}\nbackend = \"object\"\npostgres = {:?}\nstore = {store:?}\n",
        fs.postgres
    )
}

/// Runs `scripts/object-env.sh WHAT DIR` on the engines the tests use.
pub fn engine(what: &str) {
    let env_dir = std::env::var("GRANARY_OBJECT_ENV_DIR")
        .expect("GRANARY_OBJECT_ENV_DIR names the scripts/object-env.sh directory");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/object-env.sh");
    let out = Command::new(&script)
        .args([what, &env_dir])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "object-env.sh {what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The tests of one binary that stop the database every test there uses: one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Holds the binary's database for one test (see [`ONE_AT_A_TIME`]).
pub fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Two heads of one fresh file system whose lock lease is `lease_secs` (`lock_lease_secs`
/// in their export's table), head A started with `a_args` too and head B with `b_args`.
/// `None` when the engines are absent (`GRANARY_OBJECT_TESTS=skip`).
pub fn two_heads_with(
    tag: &str,
    lease_secs: u64,
    a_args: &[&str],
    b_args: &[&str],
) -> Option<(super::Server, super::Server)> {
    let env = backend_object::TestEngines::from_env()?;
    let fs = env.fresh(tag);
    let dir = scratch(tag);
    let key = dir.join("handle.key");
    let extra = format!("lock_lease_secs = {lease_secs}\n");
    let start = |head: &str, more: &[&str]| {
        let config = head_config_with(&dir, head, &fs, &key, &extra);
        let mut args = vec!["--config", config.to_str().unwrap()];
        args.extend_from_slice(more);
        super::Server::start(&args)
    };
    Some((start("a", a_args), start("b", b_args)))
}
