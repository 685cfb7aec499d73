//! The engines' own limits, measured with this backend's own clients and statements but
//! no NFS and no head in between: what `granary bench --suite object` puts beside the
//! heads in the same run.
//!
//! - [`creates`]: CREATE's transaction (the very statements of `meta::make`: read the
//!   entry, lock the directory, insert the inode and the entry, stamp the directory) in
//!   a loop, `in_flight` at once over the same pool a head has.
//! - [`puts`] and [`gets`]: S3 PUTs of whole objects and ranged GETs, `in_flight` at once,
//!   through the same `object_store` client (and key prefix) a head uses.
//!
//! Each returns what it did and how long it took; the probe's objects are deleted after.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use gtime::Clock;
use object_store::PutPayload;
use vfs::{CreateMode, Name, SetAttr};

use crate::engine::{transaction, Engines, Fail};
use crate::meta::{self, Make};
use crate::{describe, ObjectConfig};

/// What one probe did.
#[derive(Debug, Clone, Copy)]
pub struct Probed {
    pub ops: u64,
    pub bytes: u64,
    pub elapsed: Duration,
}

/// A probe's work: a future over the engines.
type Work<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = Result<T, Fail>> + 'a>>;

/// Runs `f` on a runtime of its own, on a thread of its own: the caller may be inside an
/// async runtime (the bench's), where `block_on` may not be called.
fn on_engines<T: Send>(
    config: &ObjectConfig,
    f: impl FnOnce(&Engines) -> Work<'_, T> + Send,
) -> Result<T, String> {
    std::thread::scope(|s| {
        s.spawn(|| {
            let (runtime, engines) = Engines::new(config)?;
            let done = runtime.block_on(f(&engines));
            drop(engines);
            runtime.shutdown_background();
            done.map_err(|e| describe(&e))
        })
        .join()
        .unwrap_or_else(|_| Err("the probe's thread panicked".to_owned()))
    })
}

/// Runs `op(i)` for every `i` in `0..count`, `in_flight` at once, and times them all:
/// the bytes they moved (each op gives its own) and how long the whole took. The first
/// failure, if any, is the answer.
async fn timed<F, Fut>(count: u64, in_flight: usize, op: F) -> Result<Probed, Fail>
where
    F: FnMut(u64) -> Fut,
    Fut: std::future::Future<Output = Result<u64, Fail>>,
{
    let started = Instant::now();
    let results: Vec<Result<u64, Fail>> = futures::stream::iter(0..count)
        .map(op)
        .buffer_unordered(in_flight.max(1))
        .collect()
        .await;
    let elapsed = started.elapsed();
    let mut bytes = 0;
    for r in results {
        bytes += r?;
    }
    Ok(Probed {
        ops: count,
        bytes,
        elapsed,
    })
}

/// `ops` creates of new names in a fresh directory under the root of the file system
/// `config` names (it must be formatted), `in_flight` at once.
///
/// # Errors
/// An engine failed (said for a person).
pub fn creates(
    config: &ObjectConfig,
    clock: Arc<dyn Clock>,
    ops: u64,
    in_flight: usize,
) -> Result<Probed, String> {
    on_engines(config, |engines| {
        Box::pin(async move {
            let root = {
                let c = engines.pool.get().await?;
                crate::schema::read_meta(&c).await?.root
            };
            let now = || meta::ns(clock.now());
            let dir_name = format!("probe-creates-{}-{}", std::process::id(), now());
            let dir_name = Name::new(dir_name.into_bytes()).map_err(Fail::Fs)?;
            let attrs = SetAttr::default();
            let t = now();
            let dir = transaction!(engines.pool, |tx| {
                meta::make(
                    &tx,
                    root,
                    &dir_name,
                    &Make::Dir(&attrs),
                    &vfs::Trusted::ROOT,
                    t,
                )
                .await
            })?;
            let dir = meta::to_db(dir.created.attr.fileid);
            let mode = CreateMode::Unchecked(SetAttr::default());
            timed(ops, in_flight, |i| {
                let (mode, now) = (&mode, now());
                async move {
                    let name = format!("f{i}");
                    let name = Name::new(name.into_bytes()).map_err(Fail::Fs)?;
                    transaction!(engines.pool, |tx| {
                        let what = Make::File(mode);
                        meta::make(&tx, dir, &name, &what, &vfs::Trusted::ROOT, now).await
                    })?;
                    Ok(0)
                }
            })
            .await
        })
    })
}

/// Key of the probe's `i`th object.
fn probe_path(engines: &Engines, i: u64) -> object_store::path::Path {
    object_store::path::Path::from(format!(
        "{}probe-{}/{i:08}",
        engines.prefix,
        std::process::id()
    ))
}

/// `len` bytes no compressor can shrink: each 8-byte word a different mix of its index
/// (splitmix64), as file data mostly is and as `granary bench`'s pattern is. The S3 server
/// may compress what it is sent (SeaweedFS gzips a body whose first bytes compress) and
/// then stores and reads back far fewer bytes: the heads' PUTs of the bench's data cost it
/// 23 % more CPU per GiB than a probe's of one repeated byte, which measured a store
/// faster than the one the heads had.
fn incompressible(len: usize) -> bytes::Bytes {
    let mut out = Vec::with_capacity(len + 8);
    let mut i: u64 = 0;
    while out.len() < len {
        i += 1;
        let mut z = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        out.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    out.truncate(len);
    bytes::Bytes::from(out)
}

/// `count` PUTs of `object_bytes` each (bytes that do not compress, see
/// [`incompressible`]), `in_flight` at once; the objects stay for [`gets`] until
/// [`remove`].
///
/// # Errors
/// The store failed.
pub fn puts(
    config: &ObjectConfig,
    object_bytes: usize,
    count: u64,
    in_flight: usize,
) -> Result<Probed, String> {
    on_engines(config, |engines| {
        Box::pin(async move {
            let body = incompressible(object_bytes);
            timed(count, in_flight, |i| {
                let body = body.clone();
                async move {
                    engines
                        .store
                        .put(&probe_path(engines, i), PutPayload::from(body))
                        .await?;
                    Ok(object_bytes as u64)
                }
            })
            .await
        })
    })
}

/// `count` ranged GETs of `range_bytes` each from the objects [`puts`] left (of
/// `object_bytes` each, `objects` of them), `in_flight` at once.
///
/// # Errors
/// The store failed, or an object is missing.
pub fn gets(
    config: &ObjectConfig,
    objects: u64,
    object_bytes: usize,
    range_bytes: usize,
    count: u64,
    in_flight: usize,
) -> Result<Probed, String> {
    let per_object = (object_bytes / range_bytes.max(1)).max(1) as u64;
    on_engines(config, |engines| {
        Box::pin(async move {
            timed(count, in_flight, |i| async move {
                let object = (i / per_object) % objects.max(1);
                let at = (i % per_object) * range_bytes as u64;
                let got = engines
                    .store
                    .get_range(&probe_path(engines, object), at..at + range_bytes as u64)
                    .await?;
                Ok(got.len() as u64)
            })
            .await
        })
    })
}

/// Deletes the objects [`puts`] left.
///
/// # Errors
/// The store failed.
pub fn remove(config: &ObjectConfig, objects: u64) -> Result<(), String> {
    on_engines(config, |engines| {
        Box::pin(async move {
            for i in 0..objects {
                engines.store.delete(&probe_path(engines, i)).await?;
            }
            Ok(())
        })
    })
}

#[cfg(test)]
mod tests {
    use super::incompressible;

    #[test]
    fn the_probe_body_repeats_no_word_and_uses_every_byte_value() {
        let len = crate::limits::OBJECT_MAX_BYTES + 3;
        let body = incompressible(len);
        assert_eq!(body.len(), len);
        let mut words: Vec<&[u8]> = body.chunks_exact(8).collect();
        let n = words.len();
        words.sort_unstable();
        words.dedup();
        assert_eq!(words.len(), n, "a repeated 8-byte word");
        let mut counts = [0usize; 256];
        for &b in body.iter() {
            counts[usize::from(b)] += 1;
        }
        // Each value about len / 256 times (16,384 in 4 MiB): a flat histogram.
        let (lo, hi) = (len / 256 * 9 / 10, len / 256 * 11 / 10);
        assert!(
            counts.iter().all(|&c| (lo..=hi).contains(&c)),
            "{lo}..={hi}"
        );
    }
}
