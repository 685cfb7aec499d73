//! Tests of `granary bench`'s load generator itself, against a real granary (peers are not
//! needed): it counts exactly, it verifies what it reads, it stops on time even when the
//! server stops answering, and it reports server errors instead of counting them as ops.
//!
//! Most tests put a small RPC-aware TCP proxy between the bench and granary: it sees every
//! call (the server's view of what the bench sent), and can corrupt READ data or break
//! file handles on the way, so the bench's accounting can be checked against the wire.

// `granary bench` and `granary lab` are built with the `lab` feature only.
#![cfg(feature = "lab")]

mod common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::Server;

const NFS_PROGRAM: u32 = 100_003;
const PROC_GETATTR: u32 = 1;
const PROC_SETATTR: u32 = 2;
const PROC_WRITE: u32 = 7;
const PROC_CREATE: u32 = 8;
const PROC_MKDIR: u32 = 9;
const PROC_REMOVE: u32 = 12;
const PROC_COMMIT: u32 = 21;

/// What the proxy does to the traffic besides counting it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Tamper {
    None,
    /// Flip the last byte of every reply record longer than 4 KiB (the end of a READ's
    /// data).
    CorruptLargeReplies,
    /// Flip the last byte of the file handle of every second 4 KiB WRITE call.
    BreakHalfOfSmallWrites,
}

/// Calls seen per (program, version, procedure), and how many were tampered with.
#[derive(Default)]
struct Seen {
    calls: Mutex<HashMap<(u32, u32, u32), u64>>,
    tampered: AtomicU64,
    small_writes: AtomicU64,
}

impl Seen {
    /// NFSv3 calls of `proc`.
    fn nfs(&self, proc: u32) -> u64 {
        let calls = self.calls.lock().unwrap();
        calls.get(&(NFS_PROGRAM, 3, proc)).copied().unwrap_or(0)
    }

    /// NFSv4 COMPOUNDs (procedure 1 of version 4).
    fn compounds(&self) -> u64 {
        let calls = self.calls.lock().unwrap();
        calls.get(&(NFS_PROGRAM, 4, 1)).copied().unwrap_or(0)
    }
}

/// A proxy on an ephemeral port in front of `server`; runs until the test ends.
fn proxy(server: SocketAddr, tamper: Tamper) -> (SocketAddr, Arc<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Seen::default());
    let s = Arc::clone(&seen);
    thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { continue };
            let Ok(upstream) = TcpStream::connect(server) else {
                continue;
            };
            client.set_nodelay(true).unwrap();
            upstream.set_nodelay(true).unwrap();
            let (c2, u2) = (client.try_clone().unwrap(), upstream.try_clone().unwrap());
            let s1 = Arc::clone(&s);
            thread::spawn(move || pump(client, upstream, &s1, tamper, true));
            let s2 = Arc::clone(&s);
            thread::spawn(move || pump(u2, c2, &s2, tamper, false));
        }
    });
    (addr, seen)
}

/// Copies whole records from `from` to `to`, looking at (and maybe changing) each.
fn pump(mut from: TcpStream, mut to: TcpStream, seen: &Seen, tamper: Tamper, calls: bool) {
    loop {
        let mut mark = [0u8; 4];
        if from.read_exact(&mut mark).is_err() {
            break;
        }
        let len = (u32::from_be_bytes(mark) & 0x7fff_ffff) as usize;
        let mut body = vec![0u8; len];
        if from.read_exact(&mut body).is_err() {
            break;
        }
        if calls {
            look_at_call(&mut body, seen, tamper);
        } else if tamper == Tamper::CorruptLargeReplies && len > 4096 {
            *body.last_mut().unwrap() ^= 0x01;
            seen.tampered.fetch_add(1, Ordering::SeqCst);
        }
        if to
            .write_all(&mark)
            .and_then(|()| to.write_all(&body))
            .is_err()
        {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

fn word(body: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(body[at..at + 4].try_into().unwrap())
}

fn look_at_call(body: &mut [u8], seen: &Seen, tamper: Tamper) {
    let (program, version, proc) = (word(body, 12), word(body, 16), word(body, 20));
    *seen
        .calls
        .lock()
        .unwrap()
        .entry((program, version, proc))
        .or_insert(0) += 1;
    let small_write =
        program == NFS_PROGRAM && version == 3 && proc == PROC_WRITE && body.len() < 8192;
    if tamper != Tamper::BreakHalfOfSmallWrites || !small_write {
        return;
    }
    if seen.small_writes.fetch_add(1, Ordering::SeqCst) % 2 == 1 {
        return;
    }
    // cred: flavor at 24, length at 28, body padded; verf: flavor, length 0; then fh.
    let cred_len = word(body, 28) as usize;
    let verf_at = 32 + cred_len.div_ceil(4) * 4;
    let fh_at = verf_at + 8 + word(body, verf_at + 4) as usize;
    let fh_len = word(body, fh_at) as usize;
    body[fh_at + 4 + fh_len - 1] ^= 0xff;
    seen.tampered.fetch_add(1, Ordering::SeqCst);
}

fn url(addr: SocketAddr) -> String {
    let p = addr.port();
    format!("nfs://127.0.0.1/?version=3&nfsport={p}&mountport={p}")
}

fn out_dir(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("granary-bench-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Runs `granary bench --target t=URL --no-limit --no-plots ARGS` and returns the parsed
/// results.json and the wall time.
fn bench(target: SocketAddr, out: &Path, args: &[&str]) -> (serde_json::Value, Duration) {
    let started = Instant::now();
    let status = Command::new(env!("CARGO_BIN_EXE_granary"))
        .args(["--log", "warn", "bench", "--allow-busy", "--target"])
        .arg(format!("t={}", url(target)))
        .args(["--no-limit", "--no-plots", "--repeats", "1", "--out"])
        .arg(out)
        .args(args)
        .status()
        .expect("run granary bench");
    let took = started.elapsed();
    assert!(status.success(), "granary bench failed: {status}");
    let text = std::fs::read_to_string(out.join("results.json")).expect("results.json");
    (
        serde_json::from_str(&text).expect("results.json parses"),
        took,
    )
}

/// The sample of `workload/phase`.
fn sample<'a>(results: &'a serde_json::Value, key: &str) -> &'a serde_json::Value {
    let (w, p) = key.split_once('/').unwrap();
    results["samples"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["workload"] == w && s["phase"] == p)
        .unwrap_or_else(|| panic!("no sample {key}"))
}

fn u(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

fn errors_of(s: &serde_json::Value, kind: &str) -> u64 {
    s["errors"].get(kind).map_or(0, u)
}

#[test]
fn count_mode_does_exactly_n_ops_as_the_server_sees_them() {
    let server = Server::start(&["--squash", "none"]);
    let (addr, seen) = proxy(server.addr, Tamper::None);
    let out = out_dir("count");
    let (r, _) = bench(
        addr,
        &out,
        &[
            "--workloads",
            "getattr/d64-c16,meta/cycle-d16",
            "--count",
            "500",
            "--warmup",
            "0",
        ],
    );
    let getattr = sample(&r, "getattr/d64-c16");
    assert_eq!(getattr["status"], "ok", "{getattr}");
    assert_eq!(u(&getattr["ops"]), 500);
    assert_eq!(u(&getattr["calls"]), 500);
    let cycle = sample(&r, "meta/cycle-d16");
    assert_eq!(cycle["status"], "ok", "{cycle}");
    assert_eq!(u(&cycle["ops"]), 500);
    assert_eq!(
        u(&cycle["calls"]),
        1500,
        "CREATE + SETATTR + REMOVE per cycle"
    );
    // The server's view: exactly those calls (the meta setup adds 1000 CREATEs of the
    // LOOKUP names and one MKDIR; nothing else sends GETATTR).
    assert_eq!(seen.nfs(PROC_GETATTR), 500);
    assert_eq!(seen.nfs(PROC_SETATTR), 500);
    assert_eq!(seen.nfs(PROC_REMOVE), 500);
    assert_eq!(seen.nfs(PROC_CREATE), 500 + 1000);
    assert_eq!(seen.nfs(PROC_MKDIR), 1);
    let _ = std::fs::remove_dir_all(out);
}

#[test]
fn timed_mode_stops_on_time_and_accounts_for_every_call() {
    let server = Server::start(&[]);
    let (addr, seen) = proxy(server.addr, Tamper::None);
    let out = out_dir("timed");
    let args = [
        "--workloads",
        "getattr/d64-c16",
        "--duration",
        "1",
        "--warmup",
        "0.5",
    ];
    let (r, took) = bench(addr, &out, &args);
    let s = sample(&r, "getattr/d64-c16");
    assert_eq!(s["status"], "ok", "{s}");
    let elapsed = s["elapsed_s"].as_f64().unwrap();
    assert!(
        (0.95..1.3).contains(&elapsed),
        "measured {elapsed} s of a 1 s phase"
    );
    assert!(took < Duration::from_secs(8), "bench took {took:?}");
    let (ops, warm) = (u(&s["ops"]), u(&s["warmup_ops"]));
    assert!(ops > 100 && warm > 50, "ops {ops}, warm-up ops {warm}");
    // Every GETATTR the server saw is a warm-up op, a counted op, or one of at most
    // conns × depth calls in flight when the window closed.
    let wire = seen.nfs(PROC_GETATTR);
    assert!(
        (ops + warm..=ops + warm + 16 * 64).contains(&wire),
        "server saw {wire} GETATTRs; bench counted {ops} + {warm} warm-up"
    );
    let lat = &s["latency_us"];
    assert!(lat["p50"].as_f64().unwrap() <= lat["p99"].as_f64().unwrap());
    let _ = std::fs::remove_dir_all(out);
}

#[test]
fn a_server_that_stops_answering_fails_the_phase_on_time() {
    // Accepts connections and reads calls, but never answers.
    let hole = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = hole.local_addr().unwrap();
    thread::spawn(move || {
        for c in hole.incoming().flatten() {
            thread::spawn(move || {
                let mut c = c;
                let mut buf = [0u8; 4096];
                while matches!(c.read(&mut buf), Ok(n) if n > 0) {}
            });
        }
    });
    let out = out_dir("hole");
    let args = [
        "--workloads",
        "null/d64-c1",
        "--duration",
        "1.5",
        "--warmup",
        "0",
        "--op-timeout-secs",
        "1",
    ];
    let (r, took) = bench(addr, &out, &args);
    let s = sample(&r, "null/d64-c1");
    assert_eq!(s["status"], "failed", "{s}");
    assert_eq!(u(&s["ops"]), 0);
    // 64 calls time out at 1 s and 64 more at 2 s; at 1.5 s the phase starts nothing new
    // and waits only for the calls in flight.
    assert_eq!(
        errors_of(s, "timeout"),
        128,
        "every call timed out once: {s}"
    );
    // Quiet, the whole run (process start included) takes about 2.5 s; a loaded CI machine
    // (load 16 on 2 cores) took 7.9 s. A phase that waited on its calls would never end.
    assert!(took < Duration::from_secs(20), "bench took {took:?}");
    let _ = std::fs::remove_dir_all(out);
}

#[test]
fn corrupted_read_data_is_reported_not_counted() {
    let server = Server::start(&[]);
    let (addr, seen) = proxy(server.addr, Tamper::CorruptLargeReplies);
    let out = out_dir("corrupt");
    let args = [
        "--workloads",
        "rand4k/read-d1",
        "--count",
        "50",
        "--warmup",
        "0",
        "--rand-file-mib",
        "1",
    ];
    let (r, _) = bench(addr, &out, &args);
    let s = sample(&r, "rand4k/read-d1");
    assert_eq!(s["status"], "failed", "{s}");
    assert_eq!(u(&s["ops"]), 0);
    assert_eq!(errors_of(s, "data mismatch"), 50, "{s}");
    assert!(
        s["reason"]
            .as_str()
            .unwrap()
            .contains("data mismatch at file offset"),
        "{s}"
    );
    assert_eq!(seen.tampered.load(Ordering::SeqCst), 50);
    let _ = std::fs::remove_dir_all(out);
}

#[test]
fn server_errors_are_counted_as_errors_not_ops() {
    let server = Server::start(&[]);
    let (addr, seen) = proxy(server.addr, Tamper::BreakHalfOfSmallWrites);
    let out = out_dir("badhandle");
    let args = [
        "--workloads",
        "rand4k/write-filesync-d1,rand4k/read-d1",
        "--count",
        "100",
        "--warmup",
        "0",
        "--rand-file-mib",
        "1",
    ];
    let (r, _) = bench(addr, &out, &args);
    let w = sample(&r, "rand4k/write-filesync-d1");
    assert_eq!(w["status"], "errors", "{w}");
    assert_eq!(u(&w["ops"]), 50);
    assert_eq!(errors_of(w, "NFS3ERR_BADHANDLE"), 50, "{w}");
    assert_eq!(seen.tampered.load(Ordering::SeqCst), 50);
    // The writes that went through wrote the pattern, so reads still verify.
    let rd = sample(&r, "rand4k/read-d1");
    assert_eq!(rd["status"], "ok", "{rd}");
    assert_eq!(u(&rd["ops"]), 100);
    let _ = std::fs::remove_dir_all(out);
}

#[test]
fn a_read_only_export_fails_writes_and_serves_reads() {
    let server = Server::start(&["--read-only"]);
    let out = out_dir("ro");
    let args = [
        "--workloads",
        "getattr/d1-c1,rand4k/write-filesync-d1,seq/write",
        "--count",
        "20",
        "--warmup",
        "0",
        "--rand-file-mib",
        "1",
        "--seq-file-mib",
        "1",
    ];
    let (r, _) = bench(server.addr, &out, &args);
    assert_eq!(sample(&r, "getattr/d1-c1")["status"], "ok");
    for key in ["rand4k/write-filesync-d1", "seq/write"] {
        let s = sample(&r, key);
        assert_eq!(s["status"], "failed", "{s}");
        assert_eq!(u(&s["ops"]), 0);
        let reason = s["reason"].as_str().unwrap();
        assert!(reason.contains("NFS3ERR_ROFS"), "{key}: {reason}");
    }
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains("NFS3ERR_ROFS"), "report names the error");
    let _ = std::fs::remove_dir_all(out);
}

#[test]
fn the_v4_workload_runs_each_phase_over_v3_then_v4_and_reports_the_ratio() {
    let server = Server::start(&[]);
    let (addr, seen) = proxy(server.addr, Tamper::None);
    let out = out_dir("v4");
    let pairs = [
        "getattr-d16",
        "lookup-d1",
        "create-d16",
        "read64k-d16",
        "read1m-d1",
        "write4k-d1",
        "write1m-d1",
    ];
    let list: Vec<String> = pairs.iter().map(|p| format!("v4/{p}-*")).collect();
    let args = [
        "--workloads",
        &list.join(","),
        "--count",
        "200",
        "--warmup",
        "0",
        "--rand-file-mib",
        "1",
    ];
    let (r, _) = bench(addr, &out, &args);
    for pair in pairs {
        for proto in ["v3", "v4"] {
            let s = sample(&r, &format!("v4/{pair}-{proto}"));
            assert_eq!(s["status"], "ok", "{s}");
            assert_eq!(u(&s["ops"]), 200, "{s}");
        }
        let ratio = r["v4_ratios"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["phase"] == format!("{pair}-v4") && x["target"] == "t")
            .unwrap_or_else(|| panic!("no v4÷v3 ratio of {pair}: {}", r["v4_ratios"]));
        let median = ratio["ratio"][0].as_f64().unwrap();
        let v3 = sample(&r, &format!("v4/{pair}-v3"))["value"]
            .as_f64()
            .unwrap();
        let v4 = sample(&r, &format!("v4/{pair}-v4"))["value"]
            .as_f64()
            .unwrap();
        assert!((median - v4 / v3).abs() < 1e-9, "{ratio}: {v4} / {v3}");
    }
    // 200 writes by one task COMMIT after the 64th, 128th and 192nd, on both sides.
    assert_eq!(u(&sample(&r, "v4/write4k-d1-v4")["calls"]), 203);
    assert_eq!(u(&sample(&r, "v4/write4k-d1-v3")["calls"]), 203);
    assert_eq!(u(&sample(&r, "v4/write1m-d1-v4")["bytes"]), 200 << 20);
    assert_eq!(u(&sample(&r, "v4/read1m-d1-v3")["bytes"]), 200 << 20);
    // A file made is a call over v3 (CREATE, then REMOVE) and two over v4 (OPEN, CLOSE,
    // then REMOVE).
    assert_eq!(u(&sample(&r, "v4/create-d16-v3")["calls"]), 2 * 200);
    assert_eq!(u(&sample(&r, "v4/create-d16-v4")["calls"]), 3 * 200);
    // The server's view: one NFSv3 GETATTR per v3 op (setup sends none); a CREATE and a
    // REMOVE per v3 create, plus the data file's; one COMPOUND per v4 call plus five of
    // setup (EXCHANGE_ID, CREATE_SESSION, RECLAIM_COMPLETE, the export root's LOOKUP, OPEN).
    assert_eq!(seen.nfs(PROC_GETATTR), 200);
    assert_eq!(seen.nfs(PROC_COMMIT), 2 * 3);
    assert_eq!(seen.nfs(PROC_CREATE), 200 + 1);
    assert_eq!(seen.nfs(PROC_REMOVE), 200 + 1);
    assert_eq!(seen.compounds(), 4 * 200 + 2 * 203 + 3 * 200 + 5);
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains("v4/getattr-d16 v4÷v3"), "{report}");
    let _ = std::fs::remove_dir_all(out);
}

#[test]
fn corrupted_v4_read_data_is_reported_not_counted() {
    let server = Server::start(&[]);
    let (addr, seen) = proxy(server.addr, Tamper::CorruptLargeReplies);
    let out = out_dir("v4corrupt");
    let args = [
        "--workloads",
        "v4/read64k-d1-v4",
        "--count",
        "30",
        "--warmup",
        "0",
        "--rand-file-mib",
        "1",
    ];
    let (r, _) = bench(addr, &out, &args);
    let s = sample(&r, "v4/read64k-d1-v4");
    assert_eq!(s["status"], "failed", "{s}");
    assert_eq!(errors_of(s, "data mismatch"), 30, "{s}");
    assert_eq!(seen.tampered.load(Ordering::SeqCst), 30);
    let _ = std::fs::remove_dir_all(out);
}

#[test]
fn a_small_run_writes_json_report_and_plots_with_the_limit() {
    let server = Server::start(&[]);
    let out = out_dir("plots");
    let status = Command::new(env!("CARGO_BIN_EXE_granary"))
        .args(["--log", "warn", "bench", "--allow-busy", "--target"])
        .arg(format!("granary={}", url(server.addr)))
        .args(["--workloads", "null/d1-c1,getattr/d64-c1", "--count", "200"])
        .args(["--warmup", "0", "--out"])
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success());
    let text = std::fs::read_to_string(out.join("results.json")).unwrap();
    let r: serde_json::Value = serde_json::from_str(&text).unwrap();
    let limit = r["samples"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["target"] == "limit" && s["phase"] == "d64-c1")
        .expect("the limit ran the same phase");
    assert_eq!(u(&limit["ops"]), 200);
    assert!(r["machine"]["cores"].as_u64().unwrap() >= 1);
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains("g/limit"), "{report}");
    for png in ["throughput-null.png", "latency-getattr.png"] {
        let bytes = std::fs::read(out.join(png)).unwrap();
        assert!(bytes.starts_with(b"\x89PNG"), "{png} is a PNG");
    }
    let _ = std::fs::remove_dir_all(out);
}

/// Runs `granary bench --suite SUITE --peers none` (granary and the limit, counted
/// phases) and returns results.json and the bench's PID (its fixtures are named after it).
fn suite_run(suite: &str, out: &Path) -> (serde_json::Value, u32) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_granary"))
        .args([
            "--log",
            "warn",
            "bench",
            "--allow-busy",
            "--quick",
            "--suite",
            suite,
        ])
        .args(["--peers", "none", "--no-plots", "--count", "300"])
        .args(["--warmup", "0", "--out"])
        .arg(out)
        .spawn()
        .expect("run granary bench");
    let pid = child.id();
    let status = child.wait().unwrap();
    assert!(
        status.success(),
        "granary bench --suite {suite} failed: {status}"
    );
    let text = std::fs::read_to_string(out.join("results.json")).expect("results.json");
    (
        serde_json::from_str(&text).expect("results.json parses"),
        pid,
    )
}

/// Every granary sample of `workload` ran `ops` ops without an error.
fn granary_ok(r: &serde_json::Value, workload: &str, phases: &[&str], ops: u64) {
    for phase in phases {
        let s = r["samples"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["target"] == "granary" && s["workload"] == workload && s["phase"] == *phase)
            .unwrap_or_else(|| panic!("no granary sample {workload}/{phase}"));
        assert_eq!(s["status"], "ok", "{workload}/{phase}: {s}");
        assert_eq!(u(&s["ops"]), ops, "{workload}/{phase}");
    }
}

#[test]
fn the_host_suite_serves_both_directories_checks_goals_and_cleans_up() {
    if !nix_is_root() {
        eprintln!("skipped: the host suite runs as root");
        return;
    }
    let out = out_dir("suite-host");
    let (r, pid) = suite_run("host", &out);
    let phases = [
        "getattr", "create", "write4k", "read4k", "write1m", "read1m",
    ];
    for w in ["host-tmpfs", "host-disk"] {
        granary_ok(&r, w, &phases, 300);
    }
    assert_eq!(r["settings"]["suite"], "host");
    // Every phase has its goal; without ganesha those cannot be judged, the limit ones can.
    let goals = r["goals"].as_array().unwrap();
    assert_eq!(
        goals.iter().filter(|g| g["against"] == "ganesha").count(),
        12
    );
    assert!(goals
        .iter()
        .filter(|g| g["against"] == "ganesha")
        .all(|g| g["met"].is_null()));
    assert_eq!(goals.iter().filter(|g| g["against"] == "limit").count(), 4);
    assert!(goals
        .iter()
        .filter(|g| g["against"] == "limit")
        .all(|g| g["met"].is_boolean()));
    for dir in [
        format!("/dev/shm/granary-bench-host-{pid}"),
        format!("/var/tmp/granary-bench-host-{pid}"),
        format!("/dev/shm/granary-bench-state-{pid}"),
    ] {
        assert!(!Path::new(&dir).exists(), "{dir} left behind");
    }
    let _ = std::fs::remove_dir_all(out);
}

#[test]
fn the_erofs_suite_reads_the_image_cold_and_warm_and_unmounts() {
    let mkfs = Command::new("mkfs.erofs").arg("--help").output();
    if !nix_is_root() || mkfs.is_err() {
        eprintln!("skipped: the erofs suite needs root and mkfs.erofs (erofs-utils)");
        return;
    }
    let out = out_dir("suite-erofs");
    let (r, pid) = suite_run("erofs", &out);
    // The sequential passes cover the 32 MiB file (--quick); the cold random phase is
    // count-bound by its own limit, the warm one by --count.
    granary_ok(&r, "erofs-seq1m", &["cold", "warm"], 32);
    granary_ok(&r, "erofs-rand4k", &["warm"], 300);
    granary_ok(&r, "erofs-rand4k", &["cold"], 8192);
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    let root = format!("/var/tmp/granary-bench-erofs-{pid}");
    assert!(
        !mounts.contains(&root),
        "the kernel mount was left: {mounts}"
    );
    assert!(!Path::new(&root).exists(), "{root} left behind");
    let _ = std::fs::remove_dir_all(out);
}

fn nix_is_root() -> bool {
    // The bench's suites make mounts and drop caches: root only. /proc/self/status says.
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
}
