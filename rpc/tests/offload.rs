//! A connection with an offload (`rpc::offload`): a call whose procedure would block on the
//! event loop runs again on the offload, its reply-cache entry is the offloaded run's, and
//! a full offload pushes back through the connection's in-flight slots: the connection
//! stops reading instead of queueing more.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use granary_rpc as rpc;
use rpc::budget::ServerBudget;
use rpc::conn::{serve_connection, ConnLimits};
use rpc::drc::ReplyCache;
use rpc::offload::{BlockingJob, Offload};
use rpc::table::{AdmitLimits, ConnTable};
use rpc::{CacheClass, CallContext, Dispatcher, ProcError, Procedure, Service};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use xdr::{Decoder, Encoder};

const PROGRAM: u32 = 400_400;
const SLOTS: usize = 4;

#[derive(Default)]
struct State {
    /// Runs of the blocking procedure that got past the "would block" check.
    ran: AtomicUsize,
}

/// Procedure 1: must block; answers 1 if it ran where blocking is allowed.
fn blocking_call(
    s: &State,
    _: &CallContext,
    _: &mut Decoder,
    e: &mut Encoder,
) -> Result<(), ProcError> {
    if !sync::blocking::allowed() {
        return Err(ProcError::WouldBlock);
    }
    s.ran.fetch_add(1, Ordering::SeqCst);
    e.u32(1);
    Ok(())
}

/// Procedure 2: never blocks.
fn quick(_: &State, _: &CallContext, _: &mut Decoder, e: &mut Encoder) -> Result<(), ProcError> {
    e.u32(2);
    Ok(())
}

static PROCS: [Procedure<State>; 3] = [
    Procedure {
        name: "null",
        run: quick,
        max_reply_bytes: 64,
        cache: CacheClass::Idempotent,
    },
    Procedure {
        name: "blocking",
        run: blocking_call,
        max_reply_bytes: 64,
        cache: CacheClass::NonIdempotent,
    },
    Procedure {
        name: "quick",
        run: quick,
        max_reply_bytes: 64,
        cache: CacheClass::Idempotent,
    },
];

/// An offload whose jobs wait for a gate to open, each on a thread of its own.
#[derive(Default)]
struct Gated {
    open: Mutex<bool>,
    opened: Condvar,
    submitted: AtomicUsize,
}

impl Gated {
    fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.opened.notify_all();
    }
}

struct GatedOffload(Arc<Gated>);

impl Offload for GatedOffload {
    fn run(&self, job: BlockingJob) -> Pin<Box<dyn std::future::Future<Output = bool> + Send>> {
        self.0.submitted.fetch_add(1, Ordering::SeqCst);
        let me = Arc::clone(&self.0);
        let (done, ran) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            let mut open = me.open.lock().unwrap();
            while !*open {
                open = me.opened.wait(open).unwrap();
            }
            drop(open);
            job();
            let _ = done.send(());
        });
        Box::pin(async move { ran.await.is_ok() })
    }
}

fn call(xid: u32, procedure: u32) -> Vec<u8> {
    let words = [xid, 0, 2, PROGRAM, 1, procedure, 0, 0, 0, 0];
    let mut record = (0x8000_0000u32 | (words.len() * 4) as u32)
        .to_be_bytes()
        .to_vec();
    for w in words {
        record.extend_from_slice(&w.to_be_bytes());
    }
    record
}

/// Reads one reply; returns its xid and the body's one word.
async fn reply(s: &mut TcpStream) -> (u32, u32) {
    let mark = s.read_u32().await.unwrap();
    let mut body = vec![0; (mark & 0x7fff_ffff) as usize];
    s.read_exact(&mut body).await.unwrap();
    let word = |i: usize| u32::from_be_bytes(body[i * 4..i * 4 + 4].try_into().unwrap());
    assert_eq!(
        (word(1), word(2), word(5)),
        (1, 0, 0),
        "an accepted SUCCESS reply"
    );
    (word(0), word(6))
}

async fn start(gated: &Arc<Gated>, state: &Arc<State>) -> (TcpStream, Arc<ReplyCache>) {
    let clock = gtime::SystemClock::shared();
    let mut dispatcher = Dispatcher::new();
    dispatcher.register(Box::new(Service {
        program: PROGRAM,
        version: 1,
        procedures: &PROCS,
        state: Arc::clone(state),
    }));
    let cache = Arc::new(ReplyCache::new(64, Duration::from_secs(60)));
    dispatcher.set_reply_cache(Arc::clone(&cache), Arc::clone(&clock));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    let table = ConnTable::new(AdmitLimits::default(), clock);
    let (dispatcher, offload) = (Arc::new(dispatcher), Arc::clone(gated));
    tokio::spawn(async move {
        let (stream, peer) = listener.accept().await.unwrap();
        let ticket = table.admit(peer).unwrap();
        let limits = ConnLimits {
            max_in_flight: SLOTS,
            ..ConnLimits::default()
        };
        let (_stop, shutdown) = tokio::sync::watch::channel(false);
        let offload: Arc<dyn Offload> = Arc::new(GatedOffload(offload));
        serve_connection(
            stream,
            ticket,
            dispatcher,
            limits,
            ServerBudget::new(64 << 20),
            shutdown,
            Some(offload),
        )
        .await;
    });
    (TcpStream::connect(addr).await.unwrap(), cache)
}

#[tokio::test(flavor = "current_thread")]
async fn a_full_offload_stops_the_connection_reading_and_every_call_is_answered_once() {
    let (gated, state) = (Arc::new(Gated::default()), Arc::new(State::default()));
    let (mut s, cache) = start(&gated, &state).await;
    let blocking = 20u32;
    for xid in 0..blocking {
        s.write_all(&call(xid, 1)).await.unwrap();
    }
    s.write_all(&call(100, 2)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        gated.submitted.load(Ordering::SeqCst),
        SLOTS,
        "only the in-flight slots' worth waits on a full offload"
    );
    assert_eq!(
        state.ran.load(Ordering::SeqCst),
        0,
        "nothing ran on the loop"
    );
    // The connection stopped reading: not even the quick call behind them is answered.
    let early = tokio::time::timeout(Duration::from_millis(200), reply(&mut s)).await;
    assert!(
        early.is_err(),
        "a reply came while every slot waited: {early:?}"
    );

    gated.open();
    let mut got = Vec::new();
    for _ in 0..=blocking {
        got.push(reply(&mut s).await);
    }
    got.sort_unstable();
    let mut want: Vec<(u32, u32)> = (0..blocking).map(|xid| (xid, 1)).collect();
    want.push((100, 2));
    assert_eq!(got, want, "every blocking call answered from the offload");
    assert_eq!(state.ran.load(Ordering::SeqCst), blocking as usize);
    assert_eq!(gated.submitted.load(Ordering::SeqCst), blocking as usize);

    // The reply cache holds the offloaded run's reply: a retransmission is answered
    // from it (no second run, no second hand-off).
    assert_eq!(cache.len(), blocking as usize);
    s.write_all(&call(3, 1)).await.unwrap();
    assert_eq!(reply(&mut s).await, (3, 1));
    assert_eq!(state.ran.load(Ordering::SeqCst), blocking as usize);
    assert_eq!(gated.submitted.load(Ordering::SeqCst), blocking as usize);
}
