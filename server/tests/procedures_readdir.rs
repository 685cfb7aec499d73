//! Per-procedure tests of the real `granary` binary, read against RFC 1813: READDIR
//! (section 3.3.16) and READDIRPLUS (3.3.17). Long listings in small pages, the byte
//! limits of every reply (measured by encoding the reply again), cookies that survive
//! changes to the directory, and the errors.

mod common;

use std::collections::{HashMap, HashSet};

use bytes::Bytes;
use client::{auth_sys, Nfs3Client};
use common::nfs::*;
use nfs3::nfs::{
    entry3_size, entryplus3_size, Cookieverf3, Entry3, Entryplus3, NfsFh3, Nfsstat3, PostOpAttr,
    PostOpFh3, ReaddirArgs, ReaddirFail, ReaddirOk, ReaddirplusArgs, ReaddirplusFail,
    ReaddirplusOk, Res3,
};
use xdr::Encode;

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

async fn readdir(
    client: &Nfs3Client,
    dir: &NfsFh3,
    cookie: u64,
    cookieverf: Cookieverf3,
    count: u32,
) -> Res3<ReaddirOk, ReaddirFail> {
    let args = ReaddirArgs {
        dir: dir.clone(),
        cookie,
        cookieverf,
        count,
    };
    client.readdir(&args).await.expect("READDIR call")
}

async fn readdirplus(
    client: &Nfs3Client,
    dir: &NfsFh3,
    cookie: u64,
    cookieverf: Cookieverf3,
    maxcount: u32,
) -> Res3<ReaddirplusOk, ReaddirplusFail> {
    let args = ReaddirplusArgs {
        dir: dir.clone(),
        cookie,
        cookieverf,
        dircount: maxcount,
        maxcount,
    };
    client.readdirplus(&args).await.expect("READDIRPLUS call")
}

/// Creates `names` in `dir` with up to 64 CREATEs in flight; returns their fileids.
async fn create_all(client: &Nfs3Client, dir: &NfsFh3, names: &[String]) -> HashMap<String, u64> {
    let mut fileids = HashMap::new();
    for batch in names.chunks(64) {
        let mut tasks = tokio::task::JoinSet::new();
        for name in batch {
            let (client, dir, name) = (client.clone(), dir.clone(), name.clone());
            tasks.spawn(async move {
                let fh = client
                    .create_file(&dir, &name, 0o644)
                    .await
                    .expect("CREATE");
                (name, client.getattr_ok(&fh).await.expect("GETATTR").fileid)
            });
        }
        while let Some(done) = tasks.join_next().await {
            let (name, fileid) = done.expect("task");
            fileids.insert(name, fileid);
        }
    }
    fileids
}

fn file_names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i:04}")).collect()
}

fn name_of(name: &Bytes) -> String {
    String::from_utf8(name.to_vec()).expect("UTF-8 names")
}

/// Checks the invariants of one page of a listing with byte limit `count`: it fits, it
/// has entries unless it is the end, and the previous page (of `previous_bytes`) was not
/// cut short: the first entry here would not have fitted there.
fn check_page(
    encoded_bytes: usize,
    count: u32,
    first_entry_bytes: Option<usize>,
    eof: bool,
    previous_bytes: &mut Option<usize>,
) {
    assert!(
        encoded_bytes <= count as usize,
        "a reply of {encoded_bytes} bytes for count {count}"
    );
    assert!(
        eof || first_entry_bytes.is_some(),
        "a page without entries must be the last"
    );
    if let (Some(previous), Some(first)) = (*previous_bytes, first_entry_bytes) {
        assert!(
            previous + first > count as usize,
            "the previous page had room for {first} more bytes"
        );
    }
    *previous_bytes = Some(encoded_bytes);
}

/// Part of a listing: its entries, the cookie to resume from, whether it reached the end,
/// and in how many replies.
struct Listing<E> {
    entries: Vec<E>,
    cookie: u64,
    eof: bool,
    pages: usize,
}

/// Lists `dir` with READDIR pages of `count` bytes from `cookie`, checking every page;
/// stops at eof or after `max_pages`.
async fn readdir_pages(
    client: &Nfs3Client,
    dir: &NfsFh3,
    count: u32,
    mut cookie: u64,
    max_pages: usize,
) -> Listing<Entry3> {
    let mut verf = [0; 8];
    let mut entries = Vec::new();
    let mut previous_bytes = None;
    for pages in 1..=max_pages {
        let ok = expect_ok(readdir(client, dir, cookie, verf, count).await, "READDIR");
        let first = ok.entries.first().map(|e| entry3_size(e.name.0.len()));
        check_page(ok.to_xdr().len(), count, first, ok.eof, &mut previous_bytes);
        assert_eq!(
            ok.dir_attributes,
            PostOpAttr(Some(getattr(client, dir).await))
        );
        verf = ok.cookieverf;
        if let Some(last) = ok.entries.last() {
            cookie = last.cookie;
        }
        entries.extend(ok.entries);
        if ok.eof || pages == max_pages {
            return Listing {
                entries,
                cookie,
                eof: ok.eof,
                pages,
            };
        }
    }
    unreachable!("max_pages is at least 1")
}

/// As [`readdir_pages`] with READDIRPLUS and `maxcount`.
async fn readdirplus_pages(
    client: &Nfs3Client,
    dir: &NfsFh3,
    maxcount: u32,
    mut cookie: u64,
    max_pages: usize,
) -> Listing<Entryplus3> {
    let mut verf = [0; 8];
    let mut entries = Vec::new();
    let mut previous_bytes = None;
    for pages in 1..=max_pages {
        let ok = expect_ok(
            readdirplus(client, dir, cookie, verf, maxcount).await,
            "READDIRPLUS",
        );
        let first = ok.entries.first().map(|e| {
            let handle = e.name_handle.0.as_ref().map(|fh| fh.0.len());
            entryplus3_size(e.name.0.len(), e.name_attributes.0.is_some(), handle)
        });
        check_page(
            ok.to_xdr().len(),
            maxcount,
            first,
            ok.eof,
            &mut previous_bytes,
        );
        verf = ok.cookieverf;
        if let Some(last) = ok.entries.last() {
            cookie = last.cookie;
        }
        entries.extend(ok.entries);
        if ok.eof || pages == max_pages {
            return Listing {
                entries,
                cookie,
                eof: ok.eof,
                pages,
            };
        }
    }
    unreachable!("max_pages is at least 1")
}

/// Panics if a name occurs twice.
fn assert_unique<'a>(names: impl IntoIterator<Item = &'a Bytes>) {
    let mut seen = HashSet::new();
    for name in names {
        assert!(seen.insert(name.clone()), "{name:?} listed twice");
    }
}

// ---------------------------------------------------------------------------------------
// Complete listings
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn readdir_lists_a_thousand_entries_completely_in_small_pages() {
    let (_server, client, root) = start(&[]).await;
    let dir = client.mkdir_ok(&root, "big", 0o755).await.unwrap();
    let names = file_names("file-", 1000);
    let fileids = create_all(&client, &dir, &names).await;

    let count = 1024;
    let before = getattr(&client, &dir).await;
    let Listing {
        entries,
        eof,
        pages,
        ..
    } = readdir_pages(&client, &dir, count, 0, 1000).await;
    assert!(eof);
    // A 1 KiB page holds at most (1024 - 104) / 36 entries of these names.
    assert!(pages >= 1002 / 25, "{pages} replies");
    assert_eq!(
        getattr(&client, &dir).await,
        before,
        "listing changes nothing"
    );
    assert_unique(entries.iter().map(|e| &e.name.0));
    assert_eq!(entries.len(), 1002, "1000 files, `.` and `..`");
    let cookies: HashSet<u64> = entries.iter().map(|e| e.cookie).collect();
    assert_eq!(
        cookies.len(),
        entries.len(),
        "every entry has its own cookie"
    );
    let root_fileid = getattr(&client, &root).await.fileid;
    for e in &entries {
        let want = match &e.name.0[..] {
            b"." => before.fileid,
            b".." => root_fileid,
            _ => fileids[&name_of(&e.name.0)],
        };
        assert_eq!(e.fileid, want, "fileid of {:?}", e.name);
    }
    // The client's helper, with its own page size, agrees.
    let helper: Vec<(Bytes, u64, u64)> = client.list_dir(&dir).await.unwrap();
    let ours: Vec<(Bytes, u64, u64)> = entries
        .into_iter()
        .map(|e| (e.name.0, e.fileid, e.cookie))
        .collect();
    assert_eq!(helper, ours);
}

#[tokio::test]
async fn readdirplus_returns_valid_handles_and_attributes_for_every_entry() {
    let (_server, client, root) = start(&[]).await;
    let dir = client.mkdir_ok(&root, "big", 0o755).await.unwrap();
    let names = file_names("file-", 1000);
    create_all(&client, &dir, &names).await;
    client.mkdir_ok(&dir, "subdir", 0o700).await.unwrap();

    let maxcount = 4096;
    let Listing {
        entries,
        eof,
        pages,
        ..
    } = readdirplus_pages(&client, &dir, maxcount, 0, 1000).await;
    assert!(eof);
    assert!(pages >= 1003 / 25, "{pages} replies");
    assert_eq!(entries.len(), 1003);
    assert_unique(entries.iter().map(|e| &e.name.0));
    for e in &entries {
        let fh = e
            .name_handle
            .0
            .clone()
            .unwrap_or_else(|| panic!("no handle for {:?}", e.name));
        let attrs = e
            .name_attributes
            .0
            .unwrap_or_else(|| panic!("no attributes for {:?}", e.name));
        assert_eq!(attrs.fileid, e.fileid);
        assert_eq!(
            getattr(&client, &fh).await,
            attrs,
            "GETATTR of the handle of {:?}",
            e.name
        );
        let want = match &e.name.0[..] {
            b"." => Some(&dir),
            b".." => Some(&root),
            _ => None,
        };
        if let Some(want) = want {
            assert_eq!(&fh, want, "handle of {:?}", e.name);
        } else {
            let (looked_up, _) = client.lookup_ok(&dir, &e.name.0).await.unwrap();
            assert_eq!(fh, looked_up, "handle of {:?}", e.name);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Byte limits
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a_count_too_small_for_one_entry_is_toosmall() {
    let (_server, client, root) = start(&[]).await;
    let dir = client.mkdir_ok(&root, "d", 0o755).await.unwrap();
    client
        .create_file(&dir, "a-longer-name", 0o644)
        .await
        .unwrap();
    let dir_attributes = PostOpAttr(Some(getattr(&client, &dir).await));

    // READDIR3resok without entries is 104 bytes (attributes, verifier, list end, eof);
    // the entry for `.` takes 28 more.
    for count in [0, 50, 104, 131] {
        let res = readdir(&client, &dir, 0, [0; 8], count).await;
        assert_eq!(
            res,
            Res3::Fail(Nfsstat3::TooSmall, ReaddirFail { dir_attributes }),
            "count {count}"
        );
    }
    let ok = expect_ok(
        readdir(&client, &dir, 0, [0; 8], 132).await,
        "READDIR count 132",
    );
    assert_eq!(ok.to_xdr().len(), 132);
    let names: Vec<&[u8]> = ok.entries.iter().map(|e| &e.name.0[..]).collect();
    assert_eq!((names, ok.eof), (vec![&b"."[..]], false));
    // Resuming after `..`: the next entry has a 13-byte name.
    let fits = 104 + entry3_size(13);
    let res = readdir(
        &client,
        &dir,
        2,
        ok.cookieverf,
        u32::try_from(fits - 1).unwrap(),
    )
    .await;
    assert_eq!(
        res,
        Res3::Fail(Nfsstat3::TooSmall, ReaddirFail { dir_attributes })
    );
    let ok = expect_ok(
        readdir(
            &client,
            &dir,
            2,
            ok.cookieverf,
            u32::try_from(fits).unwrap(),
        )
        .await,
        "READDIR",
    );
    assert_eq!((ok.entries.len(), ok.eof), (1, true));

    // READDIRPLUS: `.` with attributes and a 32-byte handle takes 156 bytes.
    for maxcount in [0, 104, 259] {
        let res = readdirplus(&client, &dir, 0, [0; 8], maxcount).await;
        assert_eq!(
            res,
            Res3::Fail(Nfsstat3::TooSmall, ReaddirplusFail { dir_attributes }),
            "maxcount {maxcount}"
        );
    }
    let ok = expect_ok(
        readdirplus(&client, &dir, 0, [0; 8], 260).await,
        "READDIRPLUS maxcount 260",
    );
    assert_eq!(ok.to_xdr().len(), 260);
    assert_eq!(ok.entries.len(), 1);
    assert_eq!(ok.entries[0].name_handle, PostOpFh3(Some(dir)));
}

#[tokio::test]
async fn readdirplus_dircount_ends_a_reply_but_never_makes_it_toosmall() {
    let (_server, client, root) = start(&[]).await;
    let dir = client.mkdir_ok(&root, "d", 0o755).await.unwrap();
    create_all(&client, &dir, &file_names("f", 20)).await;
    let mut args = ReaddirplusArgs {
        dir: dir.clone(),
        cookie: 0,
        cookieverf: [0; 8],
        dircount: 0,
        maxcount: 64 << 10,
    };
    let ok = expect_ok(
        client.readdirplus(&args).await.unwrap(),
        "READDIRPLUS dircount 0",
    );
    assert!(!ok.entries.is_empty() && !ok.eof);
    // Directory information of `.`, `..` and two files is 28 + 28 + 2 * 32 bytes.
    args.dircount = 28 + 28 + 2 * 32;
    let ok = expect_ok(
        client.readdirplus(&args).await.unwrap(),
        "READDIRPLUS dircount 120",
    );
    assert_eq!(ok.entries.len(), 4);
    assert!(ok.to_xdr().len() <= args.maxcount as usize);
}

// ---------------------------------------------------------------------------------------
// Cookies across changes
// ---------------------------------------------------------------------------------------

/// The original names that must each be listed exactly once (they were there the whole
/// time), and those that must not be listed (removed before the listing reached them).
struct Churn {
    survivors: Vec<String>,
    removed_unseen: Vec<String>,
}

/// Between pages: removes 30 names already listed (the last one listed, whose cookie the
/// listing resumes from, among them) and 30 not yet listed, and adds 30.
/// `seen` are the names listed so far, in listing order.
async fn churn(client: &Nfs3Client, dir: &NfsFh3, names: &[String], seen: &[String]) -> Churn {
    let listed: Vec<&String> = seen.iter().filter(|n| names.contains(n)).collect();
    let unlisted: Vec<&String> = names.iter().filter(|n| !seen.contains(n)).collect();
    assert!(
        listed.len() >= 30 && unlisted.len() >= 60,
        "churn needs a listing half done"
    );
    let resume_point = listed.last().copied();
    let removed: Vec<&String> = listed
        .iter()
        .take(29)
        .copied()
        .chain(resume_point)
        .chain(unlisted.iter().rev().take(30).copied())
        .collect();
    for name in &removed {
        client.remove_file(dir, name.as_str()).await.unwrap();
    }
    create_all(client, dir, &file_names("new-", 30)).await;
    Churn {
        survivors: names
            .iter()
            .filter(|n| !removed.contains(n))
            .cloned()
            .collect(),
        removed_unseen: unlisted
            .iter()
            .rev()
            .take(30)
            .map(|n| (*n).clone())
            .collect(),
    }
}

fn check_churned_listing(listed: &[Bytes], churn: &Churn) {
    assert_unique(listed);
    let listed: HashSet<String> = listed.iter().map(name_of).collect();
    for name in &churn.survivors {
        assert!(
            listed.contains(name),
            "{name} was there all along but was skipped"
        );
    }
    for name in &churn.removed_unseen {
        assert!(
            !listed.contains(name),
            "{name} was removed before the listing reached it"
        );
    }
}

#[tokio::test]
async fn readdir_neither_skips_nor_repeats_entries_changed_between_pages() {
    let (_server, client, root) = start(&[]).await;
    let dir = client.mkdir_ok(&root, "d", 0o755).await.unwrap();
    let names = file_names("old-", 300);
    create_all(&client, &dir, &names).await;

    let first = readdir_pages(&client, &dir, 1024, 0, 3).await;
    assert!(!first.eof);
    let seen: Vec<String> = first.entries.iter().map(|e| name_of(&e.name.0)).collect();
    let churn = churn(&client, &dir, &names, &seen).await;
    let rest = readdir_pages(&client, &dir, 1024, first.cookie, 1000).await;
    assert!(rest.eof);
    let all = first.entries.into_iter().chain(rest.entries);
    let listed: Vec<Bytes> = all.map(|e| e.name.0).collect();
    check_churned_listing(&listed, &churn);
}

#[tokio::test]
async fn readdirplus_neither_skips_nor_repeats_entries_changed_between_pages() {
    let (_server, client, root) = start(&[]).await;
    let dir = client.mkdir_ok(&root, "d", 0o755).await.unwrap();
    let names = file_names("old-", 300);
    create_all(&client, &dir, &names).await;

    let first = readdirplus_pages(&client, &dir, 4096, 0, 3).await;
    assert!(!first.eof);
    let seen: Vec<String> = first.entries.iter().map(|e| name_of(&e.name.0)).collect();
    let churn = churn(&client, &dir, &names, &seen).await;
    let rest = readdirplus_pages(&client, &dir, 4096, first.cookie, 1000).await;
    assert!(rest.eof);
    for e in &rest.entries {
        let fh = e.name_handle.0.clone().expect("handle");
        assert_eq!(getattr(&client, &fh).await.fileid, e.fileid, "{:?}", e.name);
    }
    let all = first.entries.into_iter().chain(rest.entries);
    let listed: Vec<Bytes> = all.map(|e| e.name.0).collect();
    check_churned_listing(&listed, &churn);
}

// ---------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn readdir_with_a_stale_cookie_verifier_is_bad_cookie() {
    let (_server, client, root) = start(&[]).await;
    client.create_file(&root, "f", 0o644).await.unwrap();
    let dir_attributes = PostOpAttr(Some(getattr(&client, &root).await));
    let ok = expect_ok(readdir(&client, &root, 0, [0; 8], 4096).await, "READDIR");
    let stale: Cookieverf3 = [0xff; 8];
    assert_ne!(ok.cookieverf, stale);
    let res = readdir(&client, &root, 2, stale, 4096).await;
    assert_eq!(
        res,
        Res3::Fail(Nfsstat3::BadCookie, ReaddirFail { dir_attributes })
    );
    let res = readdirplus(&client, &root, 2, stale, 4096).await;
    assert_eq!(
        res,
        Res3::Fail(Nfsstat3::BadCookie, ReaddirplusFail { dir_attributes })
    );
    // With cookie 0 the verifier means nothing (RFC 1813: it should be 0, but is ignored).
    let again = expect_ok(
        readdir(&client, &root, 0, stale, 4096).await,
        "READDIR from 0",
    );
    assert_eq!(again, ok);
    // The right verifier resumes.
    let ok = expect_ok(
        readdir(&client, &root, 2, ok.cookieverf, 4096).await,
        "READDIR from 2",
    );
    let names: Vec<&[u8]> = ok.entries.iter().map(|e| &e.name.0[..]).collect();
    assert_eq!((names, ok.eof), (vec![&b"f"[..]], true));
}

#[tokio::test]
async fn readdir_of_a_file_is_notdir_and_needs_read_permission() {
    let (_server, client, root) = start(&[]).await;
    let file = client.create_file(&root, "f", 0o644).await.unwrap();
    let dir_attributes = PostOpAttr(Some(getattr(&client, &file).await));
    let res = readdir(&client, &file, 0, [0; 8], 4096).await;
    assert_eq!(
        res,
        Res3::Fail(Nfsstat3::NotDir, ReaddirFail { dir_attributes })
    );
    let res = readdirplus(&client, &file, 0, [0; 8], 4096).await;
    assert_eq!(
        res,
        Res3::Fail(Nfsstat3::NotDir, ReaddirplusFail { dir_attributes })
    );

    // Search (x) without read (r): names may be looked up but not listed.
    let owner = client.clone().with_auth(&auth_sys(1000, 1000, &[]));
    let dir = owner.mkdir_ok(&root, "d", 0o711).await.unwrap();
    owner.create_file(&dir, "known", 0o644).await.unwrap();
    let other = client.clone().with_auth(&auth_sys(1001, 1001, &[]));
    let dir_attributes = PostOpAttr(Some(getattr(&client, &dir).await));
    let res = readdir(&other, &dir, 0, [0; 8], 4096).await;
    assert_eq!(
        res,
        Res3::Fail(Nfsstat3::Acces, ReaddirFail { dir_attributes })
    );
    let res = readdirplus(&other, &dir, 0, [0; 8], 4096).await;
    assert_eq!(
        res,
        Res3::Fail(Nfsstat3::Acces, ReaddirplusFail { dir_attributes })
    );
    other
        .lookup_ok(&dir, "known")
        .await
        .expect("LOOKUP with search permission");
    assert_eq!(owner.list_dir(&dir).await.unwrap().len(), 3);
}
