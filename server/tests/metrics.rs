//! `--metrics ADDR`: the Prometheus endpoint is scraped over HTTP after real traffic.

mod common;

use common::metrics::{free_port, sample, scrape};
use common::nfs::start;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_requests_bytes_and_connections() {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let (_server, client, root) = start(&["--metrics", &addr]).await;
    for _ in 0..5 {
        client.getattr_ok(&root).await.unwrap();
    }
    let fh = client.create_file(&root, "m", 0o644).await.unwrap();
    client
        .write_all(&fh, 0, &[1u8; 10_000], nfs3::nfs::StableHow::FileSync)
        .await
        .unwrap();
    assert_eq!(client.read_all(&fh).await.unwrap().len(), 10_000);
    let text = scrape(port);
    assert!(text.starts_with("HTTP/1.1 200 OK"), "{text}");
    let getattrs = r#"granary_requests_total{program="nfs3",procedure="getattr"}"#;
    assert!(sample(&text, getattrs) >= 5.0);
    let hist = r#"granary_request_duration_seconds_count{program="nfs3",procedure="getattr"}"#;
    assert!(sample(&text, hist) >= 5.0);
    assert!(sample(&text, "granary_write_args_bytes_total") >= 10_000.0);
    assert!(sample(&text, "granary_read_reply_bytes_total") >= 10_000.0);
    assert!(sample(&text, "granary_connections_open") >= 1.0);
    assert!(sample(&text, "granary_connections_accepted_total") >= 1.0);
    assert_eq!(
        sample(
            &text,
            r#"granary_connections_refused_total{limit="global"}"#
        ),
        0.0
    );
    assert_eq!(
        sample(&text, r#"granary_connections_closed_total{reason="idle"}"#),
        0.0
    );
    assert_eq!(sample(&text, "granary_reply_cache_hits_total"), 0.0);
    // A mem export never blocks: even its FILE_SYNC WRITEs stay on the event loop.
    assert_eq!(sample(&text, "granary_blocking_pool_calls_total"), 0.0);
    assert_eq!(sample(&text, "granary_blocking_pool_peak_waiting"), 0.0);
}

/// A host export's FILE_SYNC WRITE and COMMIT run on the worker's blocking pool, and the
/// pool is empty again once they are answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_calls_run_on_the_blocking_pool() {
    let dir = std::env::temp_dir().join(format!("granary-metrics-pool-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("export")).unwrap();
    let (export, state) = (dir.join("export"), dir.join("state"));
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let args = [
        export.to_str().unwrap(),
        "--state-dir",
        state.to_str().unwrap(),
        "--squash",
        "none",
        "--metrics",
        &addr,
    ];
    let (server, client, root) = start(&args).await;
    let fh = client.create_file(&root, "synced", 0o644).await.unwrap();
    let before = sample(&scrape(port), "granary_blocking_pool_calls_total");
    for stable in [
        nfs3::nfs::StableHow::FileSync,
        nfs3::nfs::StableHow::Unstable,
    ] {
        // UNSTABLE: the WRITE stays on the loop, the COMMIT that ends it does not.
        client
            .write_all(&fh, 0, &[2u8; 4096], stable)
            .await
            .unwrap();
    }
    let text = scrape(port);
    assert_eq!(
        sample(&text, "granary_blocking_pool_calls_total") - before,
        2.0,
        "the FILE_SYNC WRITE and the COMMIT"
    );
    assert_eq!(sample(&text, "granary_blocking_pool_waiting"), 0.0);
    assert_eq!(sample(&text, "granary_blocking_pool_running"), 0.0);
    drop((client, server));
    let _ = std::fs::remove_dir_all(&dir);
}
