//! What the object backend's integration tests share: heads of one file system on the
//! engines the environment names (`TestEngines`), and the calls every test makes.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::BytesMut;
use granary_backend_object::{ObjectConfig, ObjectFs, TestEngines};
use gtime::SystemClock;
use vfs::{Backend, CreateMode, FileId, FsResult, Name, SetAttr, Trusted};

pub const ROOT: Trusted = Trusted::ROOT;

pub fn name(s: &str) -> Name {
    Name::new(s.as_bytes().to_vec()).unwrap()
}

/// A head of the file system `config` names, on the system clock.
pub fn head(config: &ObjectConfig) -> ObjectFs {
    ObjectFs::open(config, Arc::new(SystemClock::new())).expect("the head opens")
}

/// A fresh file system `tag` on `env`'s engines, its heads' lock lease `lease_secs`.
pub fn fresh_with_lease(env: &TestEngines, tag: &str, lease_secs: u64) -> ObjectConfig {
    let mut c = env.fresh(tag);
    c.lock_lease = Duration::from_secs(lease_secs);
    c
}

/// What a head's stand-in for its lock manager or share table holds per file.
pub type Held<T> = Arc<Mutex<HashMap<FileId, T>>>;

/// A stand-in holding nothing yet, and the source a head reads it through (what it holds
/// on a file; nothing where it holds none), to attach to the head's seam.
pub fn stand_in<T: Clone + Default + Send + 'static>(
) -> (Held<T>, Arc<dyn Fn(FileId) -> T + Send + Sync>) {
    let held: Held<T> = Arc::default();
    let h = Arc::clone(&held);
    let source = Arc::new(move |id| h.lock().unwrap().get(&id).cloned().unwrap_or_default());
    (held, source)
}

/// A new file `n` in `dir` (GUARDED: the name must be new).
pub fn create(fs: &ObjectFs, dir: FileId, n: &str) -> FileId {
    fs.create(
        dir,
        &name(n),
        &CreateMode::Guarded(SetAttr::default()),
        &ROOT,
    )
    .unwrap()
    .attr
    .fileid
}

/// READ of `count` bytes at `offset`.
pub fn read(fs: &ObjectFs, id: FileId, offset: u64, count: u32) -> FsResult<Vec<u8>> {
    let mut out = BytesMut::new();
    fs.read_into(id, offset, count, &mut out, &ROOT)?;
    Ok(out.to_vec())
}

/// Runs `statements` on the file system's database, on a connection of their own.
pub fn sql(config: &ObjectConfig, statements: &str) {
    let statements = statements.to_owned();
    on_db(config, |c| {
        Box::pin(async move {
            c.batch_execute(&statements).await.unwrap();
            0
        })
    });
}

/// The first column of the one row `query` returns, as an i64.
pub fn query_i64(config: &ObjectConfig, query: &str) -> i64 {
    let query = query.to_owned();
    on_db(config, |c| {
        Box::pin(async move { c.query_one(&query, &[]).await.unwrap().get(0) })
    })
}

type Work<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = i64> + 'a>>;

fn on_db(
    config: &ObjectConfig,
    f: impl for<'c> FnOnce(&'c tokio_postgres::Client) -> Work<'c>,
) -> i64 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(&config.postgres, tokio_postgres::NoTls)
            .await
            .unwrap();
        let conn = tokio::spawn(conn);
        let out = f(&client).await;
        drop(client);
        let _ = conn.await;
        out
    })
}
