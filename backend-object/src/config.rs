//! Where an object export's engines are, and its secrets: parsed once at start, never
//! logged (the `Debug` of each type leaves the secrets out).

use std::path::{Path, PathBuf};

/// An object export's engines.
#[derive(Clone)]
pub struct ObjectConfig {
    /// A libpq-style URL (`postgres://user@host:port/db`). A password is taken from the
    /// URL, else from `PGPASSWORD` in the environment.
    pub postgres: String,
    pub store: StoreUrl,
    pub credentials: Credentials,
    /// Garbage collection and compaction on this head (docs/OBJECT.md).
    pub gc: GcConfig,
    /// How long this head's byte-range locks and share reservations count for the other
    /// heads after its last heartbeat (`lock_lease_secs`; [`crate::limits::HEAD_LOCK_LEASE`]
    /// by default).
    pub lock_lease: std::time::Duration,
}

/// When this head collects dead objects and compacts files (`gc.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GcConfig {
    /// Time between two rounds; zero: this head runs none (another head does).
    pub interval: std::time::Duration,
    /// How long an object no row names any more stays in the store: longer than any read
    /// that found it may still fetch it (see [`crate::limits::GC_MIN_GRACE`]).
    pub grace: std::time::Duration,
    /// A file with at least this many slices is compacted.
    pub compact_slices: u32,
}

impl Default for GcConfig {
    fn default() -> Self {
        Self {
            interval: crate::limits::GC_INTERVAL,
            grace: crate::limits::GC_GRACE,
            compact_slices: crate::limits::COMPACT_MIN_SLICES,
        }
    }
}

impl std::fmt::Debug for ObjectConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectConfig")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

/// `s3://BUCKET?endpoint=http://127.0.0.1:8333&region=us-east-1&prefix=fs1`: the bucket,
/// the endpoint (any S3 server; without one, AWS), the region (`us-east-1` unless given)
/// and a key prefix, so several file systems can share one bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreUrl {
    pub bucket: String,
    pub endpoint: Option<String>,
    pub region: String,
    pub prefix: String,
}

impl StoreUrl {
    /// Parses a store URL.
    ///
    /// # Errors
    /// What is wrong and the form expected.
    pub fn parse(raw: &str) -> Result<Self, String> {
        const FORM: &str =
            "expected s3://BUCKET?endpoint=http://HOST:PORT (region=, prefix= optional)";
        let url = url::Url::parse(raw).map_err(|e| format!("store {raw:?}: {e}; {FORM}"))?;
        if url.scheme() != "s3" {
            return Err(format!(
                "store {raw:?}: scheme {:?} is not s3; {FORM}",
                url.scheme()
            ));
        }
        let bucket = url.host_str().unwrap_or_default().to_string();
        if bucket.is_empty() {
            return Err(format!("store {raw:?} names no bucket; {FORM}"));
        }
        let mut store = Self {
            bucket,
            endpoint: None,
            region: "us-east-1".to_string(),
            prefix: String::new(),
        };
        for (key, value) in url.query_pairs() {
            match &*key {
                "endpoint" => store.endpoint = Some(value.into_owned()),
                "region" => store.region = value.into_owned(),
                "prefix" => store.prefix = value.trim_matches('/').to_string(),
                other => {
                    return Err(format!(
                        "store {raw:?}: unknown parameter {other:?}; use endpoint, region or prefix"
                    ))
                }
            }
        }
        Ok(store)
    }
}

/// S3 credentials: from `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY`, or from a file of
/// two lines `access_key_id = …` and `secret_access_key = …`.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub access_key_id: String,
    pub secret_access_key: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials").finish_non_exhaustive()
    }
}

impl Credentials {
    /// From `file` when given, else from the environment.
    ///
    /// # Errors
    /// A missing or malformed file, or variables missing from the environment, saying
    /// which and how to give them.
    pub fn load(file: Option<&Path>) -> Result<Self, String> {
        match file {
            Some(path) => Self::from_file(path),
            None => Self::from_env(),
        }
    }

    fn from_env() -> Result<Self, String> {
        let get = |name: &str| {
            std::env::var(name).map_err(|_| {
                format!(
                    "{name} is not set: give the S3 credentials in AWS_ACCESS_KEY_ID and \
                     AWS_SECRET_ACCESS_KEY, or name a file with credentials = \"/path\""
                )
            })
        };
        Ok(Self {
            access_key_id: get("AWS_ACCESS_KEY_ID")?,
            secret_access_key: get("AWS_SECRET_ACCESS_KEY")?,
        })
    }

    fn from_file(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("credentials file {}: {e}", path.display()))?;
        let mut id = None;
        let mut secret = None;
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((key, value)) = line.split_once('=') else {
                return Err(format!(
                    "credentials file {}: a line is not `key = value`",
                    path.display()
                ));
            };
            let value = value.trim().trim_matches('"').to_string();
            match key.trim() {
                "access_key_id" => id = Some(value),
                "secret_access_key" => secret = Some(value),
                other => {
                    return Err(format!(
                        "credentials file {}: unknown key {other:?}; use access_key_id and \
                         secret_access_key",
                        path.display()
                    ))
                }
            }
        }
        match (id, secret) {
            (Some(access_key_id), Some(secret_access_key)) => Ok(Self {
                access_key_id,
                secret_access_key,
            }),
            _ => Err(format!(
                "credentials file {} needs both access_key_id and secret_access_key",
                path.display()
            )),
        }
    }
}

/// The test engines' addresses, from `scripts/object-env.sh start` (see its header).
#[derive(Debug, Clone)]
pub struct TestEngines {
    pub config: ObjectConfig,
    /// The directory the script ran in (for `pg-stop`, `s3-kill` …), if known.
    pub env_dir: Option<PathBuf>,
}

impl TestEngines {
    /// The engines the environment names (`scripts/object-env.sh start DIR` and
    /// `. DIR/env`), or what is missing, for a person (`granary bench --suite object`).
    ///
    /// # Errors
    /// A variable is missing or not a store URL, or the S3 credentials are missing.
    pub fn try_from_env() -> Result<Self, String> {
        const HOW: &str = "start the engines with `scripts/object-env.sh start DIR` and run                            `. DIR/env` first";
        let postgres = std::env::var("GRANARY_TEST_POSTGRES")
            .map_err(|_| format!("GRANARY_TEST_POSTGRES is not set: {HOW}"))?;
        let store = std::env::var("GRANARY_TEST_S3")
            .map_err(|_| format!("GRANARY_TEST_S3 is not set: {HOW}"))?;
        let store = StoreUrl::parse(&store).map_err(|e| format!("GRANARY_TEST_S3: {e}"))?;
        let credentials = Credentials::load(None)?;
        Ok(Self {
            config: ObjectConfig {
                postgres,
                store,
                credentials,
                gc: GcConfig::default(),
                lock_lease: crate::limits::HEAD_LOCK_LEASE,
            },
            env_dir: std::env::var_os("GRANARY_OBJECT_ENV_DIR").map(PathBuf::from),
        })
    }

    /// The engines the environment names, `None` when it names none.
    ///
    /// # Panics
    /// When they are absent and `GRANARY_OBJECT_TESTS` is not `skip`: a test that needs
    /// them must fail where they should be (CI starts them), and only a developer who
    /// says so skips it.
    #[must_use]
    pub fn from_env() -> Option<Self> {
        let postgres = std::env::var("GRANARY_TEST_POSTGRES").ok();
        let store = std::env::var("GRANARY_TEST_S3").ok();
        let (Some(postgres), Some(store)) = (postgres, store) else {
            assert!(
                std::env::var("GRANARY_OBJECT_TESTS").as_deref() == Ok("skip"),
                "GRANARY_TEST_POSTGRES and GRANARY_TEST_S3 are not set: run \
                 `scripts/object-env.sh start DIR` and `. DIR/env` first (scripts/test-all.sh \
                 does), or set GRANARY_OBJECT_TESTS=skip to skip the object backend's tests"
            );
            eprintln!("GRANARY_OBJECT_TESTS=skip: object backend test skipped");
            return None;
        };
        let store = StoreUrl::parse(&store).expect("GRANARY_TEST_S3 is a store URL");
        let credentials = Credentials::load(None).expect("S3 credentials in the environment");
        Some(Self {
            config: ObjectConfig {
                postgres,
                store,
                credentials,
                gc: GcConfig::default(),
                lock_lease: crate::limits::HEAD_LOCK_LEASE,
            },
            env_dir: std::env::var_os("GRANARY_OBJECT_ENV_DIR").map(PathBuf::from),
        })
    }
}

impl TestEngines {
    /// A file system of its own for one test: a new database (created through the
    /// environment's) and a key prefix of its own in the bucket. Two heads of one test
    /// open the same returned config.
    ///
    /// # Panics
    /// When the database cannot be created: the engines the environment names are down.
    #[must_use]
    pub fn fresh(&self, tag: &str) -> ObjectConfig {
        self.try_fresh(tag)
            .unwrap_or_else(|e| panic!("a database for the test: {e}"))
    }

    /// As [`TestEngines::fresh`], telling a person what failed.
    ///
    /// # Errors
    /// The database named by the environment refused a connection or CREATE DATABASE.
    pub fn try_fresh(&self, tag: &str) -> Result<ObjectConfig, String> {
        use std::sync::atomic::{AtomicU32, Ordering};
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = format!("t_{}_{}_{n}", sanitize(tag), std::process::id());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("a runtime for CREATE DATABASE: {e}"))?;
        let admin = self.config.postgres.clone();
        rt.block_on(async {
            let (client, conn) = tokio_postgres::connect(&admin, tokio_postgres::NoTls)
                .await
                .map_err(|e| format!("GRANARY_TEST_POSTGRES refused a connection: {e}"))?;
            let conn = tokio::spawn(conn);
            // One statement each: a string of two runs as one transaction, which
            // neither allows.
            for sql in [
                format!("DROP DATABASE IF EXISTS {name}"),
                format!("CREATE DATABASE {name}"),
            ] {
                client
                    .execute(sql.as_str(), &[])
                    .await
                    .map_err(|e| format!("{sql}: {}", crate::engine::describe_db(&e)))?;
            }
            drop(client);
            let _ = conn.await;
            Ok::<(), String>(())
        })?;
        let mut url = url::Url::parse(&admin)
            .map_err(|e| format!("GRANARY_TEST_POSTGRES is not a URL: {e}"))?;
        url.set_path(&format!("/{name}"));
        let mut config = self.config.clone();
        config.postgres = url.to_string();
        config.store.prefix = name;
        Ok(config)
    }
}

fn sanitize(tag: &str) -> String {
    tag.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .take(24)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_urls() {
        let s = StoreUrl::parse("s3://b?endpoint=http://127.0.0.1:1&prefix=/x/").unwrap();
        assert_eq!(s.bucket, "b");
        assert_eq!(s.endpoint.as_deref(), Some("http://127.0.0.1:1"));
        assert_eq!(s.prefix, "x");
        assert_eq!(s.region, "us-east-1");
        assert!(StoreUrl::parse("http://b").unwrap_err().contains("not s3"));
        assert!(StoreUrl::parse("s3://b?color=red")
            .unwrap_err()
            .contains("unknown"));
    }

    #[test]
    fn credentials_file_and_debug_hides_secrets() {
        let dir = std::env::temp_dir().join(format!("granary-cred-{}", std::process::id()));
        std::fs::write(&dir, "access_key_id = a\nsecret_access_key = \"s3cr3t\"\n").unwrap();
        let c = Credentials::load(Some(&dir)).unwrap();
        std::fs::remove_file(&dir).unwrap();
        assert_eq!(c.access_key_id, "a");
        assert_eq!(c.secret_access_key, "s3cr3t");
        assert!(!format!("{c:?}").contains("s3cr3t"));
    }
}
