//! Per-procedure tests of the real `granary` binary, read against RFC 1813: READ, WRITE
//! and COMMIT (sections 3.3.6, 3.3.7 and 3.3.21). Offsets, holes, `eof`, stability and
//! the write verifier, permissions, and what happens when the export is full.

mod common;

use bytes::Bytes;
use client::{auth_sys, ClientError, Nfs3Client};
use common::nfs::*;
use common::Server;
use nfs3::nfs::{
    CommitArgs, CommitFail, CommitOk, FsstatArgs, NfsFh3, Nfsstat3, PostOpAttr, ReadArgs, ReadFail,
    ReadOk, Res3, StableHow, WriteArgs, WriteFail, WriteOk, Writeverf3,
};

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

async fn read(client: &Nfs3Client, fh: &NfsFh3, offset: u64, count: u32) -> Res3<ReadOk, ReadFail> {
    let args = ReadArgs {
        file: fh.clone(),
        offset,
        count,
    };
    client.read(&args).await.expect("READ call")
}

async fn write(
    client: &Nfs3Client,
    fh: &NfsFh3,
    offset: u64,
    data: &[u8],
    stable: StableHow,
) -> Res3<WriteOk, WriteFail> {
    let args = WriteArgs {
        file: fh.clone(),
        offset,
        count: u32::try_from(data.len()).unwrap(),
        stable,
        data: Bytes::copy_from_slice(data),
    };
    client.write(&args).await.expect("WRITE call")
}

/// WRITE, checking the whole successful reply: wcc data from before and after, every byte
/// written, durable as asked. Returns the verifier.
async fn write_checked(
    client: &Nfs3Client,
    fh: &NfsFh3,
    offset: u64,
    data: &[u8],
    stable: StableHow,
) -> Writeverf3 {
    let before = getattr(client, fh).await;
    let res = write(client, fh, offset, data, stable).await;
    let after = getattr(client, fh).await;
    let ok = expect_ok(res, "WRITE");
    assert_eq!(ok.file_wcc, wcc(&before, &after));
    assert_eq!(
        ok.count as usize,
        data.len(),
        "a WRITE of {} bytes is not short",
        data.len()
    );
    assert!(
        ok.committed as u32 >= stable as u32,
        "asked {stable:?}, got {:?}",
        ok.committed
    );
    ok.verf
}

async fn commit(client: &Nfs3Client, fh: &NfsFh3) -> Res3<CommitOk, CommitFail> {
    let args = CommitArgs {
        file: fh.clone(),
        offset: 0,
        count: 0,
    };
    client.commit(&args).await.expect("COMMIT call")
}

/// Deterministic bytes with no zero (so every byte allocates and every shift shows).
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| ((i * 7 + usize::from(seed)) % 251 + 1) as u8)
        .collect()
}

// ---------------------------------------------------------------------------------------
// READ and WRITE
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn read_returns_what_was_written_with_holes_and_eof() {
    let (_server, client, root) = start(&[]).await;
    let fh = client.create_file(&root, "f", 0o644).await.unwrap();
    write_checked(&client, &fh, 0, b"hello", StableHow::FileSync).await;
    write_checked(&client, &fh, 10, b"world", StableHow::FileSync).await;
    let attrs = getattr(&client, &fh).await;
    assert_eq!(attrs.size, 15);

    // (offset, count) → (data, eof): eof only when the reply reaches the end of the file.
    let cases: [(u64, u32, &[u8], bool); 8] = [
        (0, 100, b"hello\0\0\0\0\0world", true),
        (0, 15, b"hello\0\0\0\0\0world", true),
        (0, 14, b"hello\0\0\0\0\0worl", false),
        (3, 4, b"lo\0\0", false),
        (5, 5, b"\0\0\0\0\0", false),
        (10, 5, b"world", true),
        (15, 10, b"", true),
        (1 << 40, 10, b"", true),
    ];
    for (offset, count, data, eof) in cases {
        let want = ReadOk {
            file_attributes: PostOpAttr(Some(attrs)),
            count: u32::try_from(data.len()).unwrap(),
            eof,
            data: Bytes::copy_from_slice(data),
        };
        assert_eq!(
            read(&client, &fh, offset, count).await,
            Res3::Ok(want),
            "READ {offset}+{count}"
        );
    }
    // Overwriting in the middle keeps the rest.
    write_checked(&client, &fh, 3, b"LO WO", StableHow::FileSync).await;
    assert_eq!(client.read_all(&fh).await.unwrap(), b"helLO WO\0\0world");
}

#[tokio::test]
async fn sparse_files_read_zeros_in_holes_and_allocate_only_written_chunks() {
    let (_server, client, root) = start(&[]).await;
    let fh = client.create_file(&root, "sparse", 0o644).await.unwrap();
    let far = 10 << 20;
    write_checked(&client, &fh, far, b"tail", StableHow::FileSync).await;
    let attrs = getattr(&client, &fh).await;
    assert_eq!(attrs.size, far + 4);
    assert_eq!(attrs.used, 64 << 10, "one 64 KiB chunk holds the only data");
    let hole = expect_ok(read(&client, &fh, 5 << 20, 4096).await, "READ in the hole");
    assert_eq!((hole.data, hole.eof), (Bytes::from(vec![0; 4096]), false));
    let end = expect_ok(read(&client, &fh, far - 4, 100).await, "READ to the end");
    assert_eq!((&end.data[..], end.eof), (&b"\0\0\0\0tail"[..], true));
}

#[tokio::test]
async fn read_count_is_capped_at_rtmax() {
    let (_server, client, root) = start(&[]).await;
    let fh = client.create_file(&root, "big", 0o644).await.unwrap();
    let data = pattern(3 << 19, 1); // 1.5 MiB
    client
        .write_all(&fh, 0, &data, StableHow::Unstable)
        .await
        .unwrap();
    let ok = expect_ok(read(&client, &fh, 0, u32::MAX).await, "READ of 4 GiB");
    assert_eq!(
        (ok.count, ok.eof),
        (1 << 20, false),
        "the server's rtmax is 1 MiB"
    );
    assert_eq!(&ok.data[..], &data[..1 << 20]);
    let ok = expect_ok(
        read(&client, &fh, 1 << 20, u32::MAX).await,
        "READ of the rest",
    );
    assert_eq!((ok.count, ok.eof), (1 << 19, true));
    assert_eq!(client.read_all(&fh).await.unwrap(), data);
}

#[tokio::test]
async fn write_moves_mtime_and_ctime_and_read_moves_nothing() {
    let (_server, client, root) = start(&[]).await;
    let fh = client.create_file(&root, "f", 0o644).await.unwrap();
    let before = getattr(&client, &fh).await;
    write_checked(&client, &fh, 0, b"data", StableHow::Unstable).await;
    let after = getattr(&client, &fh).await;
    assert!(later(after.mtime, before.mtime) && later(after.ctime, before.ctime));
    assert_eq!(after.mtime, after.ctime);
    expect_ok(read(&client, &fh, 0, 10).await, "READ");
    assert_eq!(
        getattr(&client, &fh).await,
        after,
        "READ changes no attribute (noatime)"
    );
    // A WRITE of nothing is no change either.
    write_checked(&client, &fh, 2, b"", StableHow::FileSync).await;
    assert_eq!(getattr(&client, &fh).await, after);
}

#[tokio::test]
async fn write_and_read_refuse_what_is_not_a_regular_file() {
    let (_server, client, root) = start(&[]).await;
    let root_attrs = getattr(&client, &root).await;
    let res = write(&client, &root, 0, b"x", StableHow::FileSync).await;
    let same = wcc(&root_attrs, &root_attrs);
    assert_eq!(
        res,
        Res3::Fail(Nfsstat3::IsDir, WriteFail { file_wcc: same })
    );
    let res = read(&client, &root, 0, 10).await;
    let file_attributes = PostOpAttr(Some(root_attrs));
    assert_eq!(
        res,
        Res3::Fail(Nfsstat3::IsDir, ReadFail { file_attributes })
    );
    let res = commit(&client, &root).await;
    assert_eq!(
        res,
        Res3::Fail(Nfsstat3::IsDir, CommitFail { file_wcc: same })
    );

    // The data's length must be the count.
    let fh = client.create_file(&root, "f", 0o644).await.unwrap();
    let attrs = getattr(&client, &fh).await;
    let args = WriteArgs {
        file: fh.clone(),
        offset: 0,
        count: 10,
        stable: StableHow::FileSync,
        data: Bytes::from_static(b"short"),
    };
    let res = client.write(&args).await.unwrap();
    assert_eq!(
        res,
        Res3::Fail(
            Nfsstat3::Inval,
            WriteFail {
                file_wcc: wcc(&attrs, &attrs)
            }
        )
    );
    // No file grows past 2^63 - 1.
    let res = write(&client, &fh, i64::MAX as u64, b"x", StableHow::FileSync).await;
    assert_eq!(
        res,
        Res3::Fail(
            Nfsstat3::FBig,
            WriteFail {
                file_wcc: wcc(&attrs, &attrs)
            }
        )
    );
    assert_eq!(getattr(&client, &fh).await, attrs);
}

#[tokio::test]
async fn read_and_write_follow_permissions_with_owner_override() {
    let (_server, client, root) = start(&[]).await;
    let owner = client.clone().with_auth(&auth_sys(1000, 1000, &[]));
    let other = client.clone().with_auth(&auth_sys(1001, 1001, &[]));
    let private = owner.create_file(&root, "private", 0o600).await.unwrap();
    owner
        .write_all(&private, 0, b"mine", StableHow::FileSync)
        .await
        .unwrap();
    assert_eq!(
        read(&other, &private, 0, 10).await.status(),
        Nfsstat3::Acces
    );
    assert_eq!(
        write(&other, &private, 0, b"x", StableHow::FileSync)
            .await
            .status(),
        Nfsstat3::Acces
    );
    assert_eq!(
        read(&client, &private, 0, 10).await.status(),
        Nfsstat3::Acces,
        "squashed root"
    );
    // The owner reads and writes its own file whatever the mode (Linux nfsd's override, so
    // a file opened before a chmod stays usable).
    let readonly = owner.create_file(&root, "readonly", 0o000).await.unwrap();
    write_checked(&owner, &readonly, 0, b"still", StableHow::FileSync).await;
    assert_eq!(owner.read_all(&readonly).await.unwrap(), b"still");
    // Others with the bits may.
    let shared = owner.create_file(&root, "shared", 0o666).await.unwrap();
    write_checked(&other, &shared, 0, b"theirs", StableHow::FileSync).await;
    assert_eq!(other.read_all(&shared).await.unwrap(), b"theirs");
}

#[tokio::test]
async fn a_write_by_another_user_clears_setuid_and_setgid() {
    let (_server, client, root) = start(&[]).await;
    let owner = client.clone().with_auth(&auth_sys(1000, 1000, &[]));
    let other = client.clone().with_auth(&auth_sys(1001, 1001, &[]));
    let prog = owner.create_file(&root, "prog", 0o6777).await.unwrap();
    assert_eq!(getattr(&client, &prog).await.mode, 0o6777);
    write_checked(&other, &prog, 0, b"planted", StableHow::FileSync).await;
    assert_eq!(
        getattr(&client, &prog).await.mode,
        0o777,
        "no code planted runs as the owner"
    );
    // Setgid without group execute marks mandatory locking, not privilege: it stays.
    let locked = owner.create_file(&root, "locked", 0o2666).await.unwrap();
    write_checked(&other, &locked, 0, b"data", StableHow::FileSync).await;
    assert_eq!(getattr(&client, &locked).await.mode, 0o2666);
}

// ---------------------------------------------------------------------------------------
// Stability, COMMIT and the write verifier
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn every_stability_is_honoured_and_commit_returns_the_write_verifier() {
    let (_server, client, root) = start(&[]).await;
    let fh = client.create_file(&root, "f", 0o644).await.unwrap();
    let mut verifiers = Vec::new();
    for (i, stable) in [
        StableHow::Unstable,
        StableHow::DataSync,
        StableHow::FileSync,
    ]
    .into_iter()
    .enumerate()
    {
        verifiers.push(write_checked(&client, &fh, i as u64 * 4, b"abcd", stable).await);
    }
    let attrs = getattr(&client, &fh).await;
    let res = commit(&client, &fh).await;
    let want = CommitOk {
        file_wcc: wcc(&attrs, &attrs),
        verf: verifiers[0],
    };
    assert_eq!(res, Res3::Ok(want), "COMMIT changes no attribute");
    assert!(
        verifiers.iter().all(|v| *v == verifiers[0]),
        "one verifier per server run"
    );
    // COMMIT of a range answers the same.
    let args = CommitArgs {
        file: fh.clone(),
        offset: 4,
        count: 4,
    };
    let ok = expect_ok(client.commit(&args).await.unwrap(), "COMMIT 4+4");
    assert_eq!(ok.verf, verifiers[0]);
    assert_eq!(client.read_all(&fh).await.unwrap(), b"abcdabcdabcd");
    // A range whose end overflows 64 bits is invalid (as Linux nfsd answers).
    let overflow = CommitArgs {
        file: fh.clone(),
        offset: u64::MAX - 1,
        count: 16,
    };
    let res = client.commit(&overflow).await.unwrap();
    assert!(matches!(res, Res3::Fail(Nfsstat3::Inval, _)), "{res:?}");
}

#[tokio::test]
async fn the_write_verifier_changes_when_the_server_restarts() {
    let first = Server::start(&[]);
    let client = connect(&first).await;
    let root = client.mount("/").await.unwrap();
    let fh = client.create_file(&root, "f", 0o644).await.unwrap();
    let before = write_checked(&client, &fh, 0, b"unstable", StableHow::Unstable).await;
    assert_eq!(expect_ok(commit(&client, &fh).await, "COMMIT").verf, before);
    assert!(first.terminate().success());

    let second = Server::start(&[]);
    let client = connect(&second).await;
    let new_root = client.mount("/").await.unwrap();
    let new_fh = client.create_file(&new_root, "f", 0o644).await.unwrap();
    let after = write_checked(&client, &new_fh, 0, b"again", StableHow::Unstable).await;
    assert_ne!(
        after, before,
        "a client must learn that its unstable writes may be lost"
    );
    assert_eq!(
        expect_ok(commit(&client, &new_fh).await, "COMMIT").verf,
        after
    );
    // And handles of the old run are stale, not someone else's file.
    for old in [root, fh] {
        let res = client
            .getattr(&nfs3::nfs::GetattrArgs { object: old })
            .await
            .unwrap();
        assert_eq!(res.status(), Nfsstat3::Stale);
    }
}

// ---------------------------------------------------------------------------------------
// A full export
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a_write_past_the_capacity_is_nospc_and_changes_nothing() {
    // 1 MiB of data plus the metadata the cap also counts: the root's and f's inodes
    // (512 B each) and f's directory entry (192 B + its 1-byte name).
    let (server, client, root) = start(&["--mem-capacity-bytes", "1049793"]).await;
    let fh = client.create_file(&root, "f", 0o644).await.unwrap();
    let first = pattern(768 << 10, 1);
    write_checked(&client, &fh, 0, &first, StableHow::FileSync).await;

    // 512 KiB more would need 8 new 64 KiB chunks; only 4 are left.
    let attrs = getattr(&client, &fh).await;
    let res = write(
        &client,
        &fh,
        768 << 10,
        &pattern(512 << 10, 2),
        StableHow::FileSync,
    )
    .await;
    assert_eq!(
        res,
        Res3::Fail(
            Nfsstat3::NoSpc,
            WriteFail {
                file_wcc: wcc(&attrs, &attrs)
            }
        )
    );
    assert_eq!(
        getattr(&client, &fh).await,
        attrs,
        "a refused WRITE changes nothing"
    );
    assert_eq!(
        client.read_all(&fh).await.unwrap(),
        first,
        "acknowledged data is intact"
    );

    // The server keeps serving, on this connection and new ones: the rest fits exactly,
    // overwriting needs no new space, and the next byte does not fit.
    let rest = pattern(256 << 10, 3);
    write_checked(&client, &fh, 768 << 10, &rest, StableHow::FileSync).await;
    write_checked(&client, &fh, 0, b"overwrite", StableHow::FileSync).await;
    let other = connect(&server).await;
    let fsstat = other
        .fsstat(&FsstatArgs {
            fsroot: root.clone(),
        })
        .await
        .unwrap();
    assert_eq!(expect_ok(fsstat, "FSSTAT").fbytes, 0);
    let attrs = getattr(&other, &fh).await;
    let res = write(&other, &fh, 1 << 20, b"!", StableHow::Unstable).await;
    assert_eq!(
        res,
        Res3::Fail(
            Nfsstat3::NoSpc,
            WriteFail {
                file_wcc: wcc(&attrs, &attrs)
            }
        )
    );
    // A new file's inode and name count against the cap too.
    let full = other.create_file(&root, "g", 0o644).await;
    assert!(
        matches!(full, Err(ClientError::Nfs(Nfsstat3::NoSpc))),
        "{full:?}"
    );

    let mut want = first;
    want[..9].copy_from_slice(b"overwrite");
    want.extend_from_slice(&rest);
    assert_eq!(other.read_all(&fh).await.unwrap(), want);
    // Removing the file gives the space back: its metadata for g's, its data for g's.
    other.remove_file(&root, "f").await.unwrap();
    let g = other.create_file(&root, "g", 0o644).await.unwrap();
    write_checked(&other, &g, 0, &pattern(1 << 20, 4), StableHow::FileSync).await;
}
