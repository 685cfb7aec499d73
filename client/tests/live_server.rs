//! A smoke test of the convenience layer against a running granary server, for when one
//! is at hand: `GRANARY_URL='nfs://127.0.0.1/?version=3&nfsport=P&mountport=P' cargo test
//! -p granary-client --test live_server -- --ignored`. The export must be writable.

use std::time::Duration;

use granary_client::{auth_sys, ClientError, Nfs3Client, ServerAddrs};
use nfs3::limits::{NFS_PROGRAM, NFS_V3};
use nfs3::nfs::{Ftype3, Nfsstat3, StableHow, Void};
use rpc::msg::{AcceptStat, ReplyStatus};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a running server named by GRANARY_URL"]
async fn convenience_layer_against_a_live_server() {
    let url = std::env::var("GRANARY_URL").expect("GRANARY_URL names the server");
    let addrs = ServerAddrs::parse(&url).expect("an nfs:// URL");
    let client = Nfs3Client::connect(addrs.nfs, addrs.mount)
        .await
        .unwrap()
        .with_timeout(Duration::from_secs(10));
    client.null().await.unwrap();
    client.mount_null().await.unwrap();
    let root = client.mount(&addrs.export_path).await.unwrap();
    assert_eq!(client.getattr_ok(&root).await.unwrap().ftype, Ftype3::Dir);

    let top = format!("client-smoke-{}", std::process::id());
    let dir = client
        .mkdir_p(&root, format!("{top}/a/b"), 0o755)
        .await
        .unwrap();
    let again = client
        .mkdir_p(&root, format!("{top}/a/b"), 0o755)
        .await
        .unwrap();
    assert_eq!(dir, again);

    let file = client.create_file(&dir, "f", 0o644).await.unwrap();
    let err = client
        .create_file_guarded(&dir, "f", 0o644)
        .await
        .unwrap_err();
    assert_eq!(err.nfs_status(), Some(Nfsstat3::Exist));
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 253) as u8).collect();
    for stable in [StableHow::Unstable, StableHow::FileSync] {
        client.write_all(&file, 0, &data, stable).await.unwrap();
        assert_eq!(client.read_all(&file).await.unwrap(), data);
    }
    let small = client.clone().with_io_size(4096);
    assert_eq!(small.read_all(&file).await.unwrap(), data);
    let (found, attrs) = client
        .lookup_path(&root, format!("{top}/a/b/f"))
        .await
        .unwrap();
    assert_eq!((found, attrs.size), (file, data.len() as u64));

    for i in 0..300 {
        client
            .create_file(&dir, format!("n{i:03}"), 0o600)
            .await
            .unwrap();
    }
    let names: Vec<_> = client.list_dir(&dir).await.unwrap();
    let plus = client.list_dir_plus(&dir).await.unwrap();
    let real = |n: &[u8]| n != b"." && n != b"..";
    assert_eq!(names.iter().filter(|e| real(&e.0)).count(), 301);
    assert_eq!(plus.iter().filter(|e| real(e.name.as_bytes())).count(), 301);

    client.rename_ok(&dir, "f", &dir, "g").await.unwrap();
    client.remove_file(&dir, "g").await.unwrap();
    for i in 0..300 {
        client.remove_file(&dir, format!("n{i:03}")).await.unwrap();
    }
    let a = client
        .lookup_path(&root, format!("{top}/a"))
        .await
        .unwrap()
        .0;
    client.rmdir_ok(&a, "b").await.unwrap();
    let top_fh = client.lookup_path(&root, &top).await.unwrap().0;
    client.rmdir_ok(&top_fh, "a").await.unwrap();
    client.rmdir_ok(&root, &top).await.unwrap();
    let err = client.lookup_path(&root, &top).await.unwrap_err();
    assert!(matches!(err, ClientError::Nfs(Nfsstat3::NoEnt)), "{err:?}");

    // RPC-level errors come back as such.
    let err = client
        .nfs_connection()
        .call(NFS_PROGRAM, NFS_V3, 99, &Void)
        .await
        .unwrap_err();
    let want = ReplyStatus::Accepted(AcceptStat::ProcUnavail);
    assert_eq!(err.rpc_status(), Some(&want), "{err:?}");

    // Depth 64 on one connection.
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..64 {
        let (client, root) = (client.clone(), root.clone());
        tasks.spawn(async move {
            for _ in 0..100 {
                client.getattr_ok(&root).await.unwrap();
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }

    // Another user on the same connection.
    let nobody = client.clone().with_auth(&auth_sys(65534, 65534, &[]));
    nobody.getattr_ok(&root).await.unwrap();
}
