//! The calls granary makes to its clients (NLM GRANTED, the `_RES` answers of `_MSG`
//! calls, NSM SM_NOTIFY and SM_MON status callbacks), sent off the request path.
//!
//! Each call: ask the client host's portmapper (TCP port 111, PMAPPROC_GETPORT) for the
//! program's TCP port, open a new connection, send the call, wait for the reply. An
//! attempt that fails or takes longer than [`CALLBACK_ATTEMPT_TIMEOUT`] is tried again
//! after a pause, [`CALLBACK_ATTEMPTS`] times in all; then the caller is told it failed.
//!
//! Bounded: [`MAX_CALLBACKS_QUEUED`] calls wait (a call past that is refused at once and
//! its caller told), [`MAX_CALLBACKS_IN_FLIGHT`] are sent at once, each costs one socket
//! for at most its attempts. A client that never answers costs that and nothing else: the
//! workers never wait for a callback.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use bytes::Bytes;
use client::RpcConnection;
use nfsd::limits::{
    CALLBACK_ATTEMPTS, CALLBACK_ATTEMPT_TIMEOUT, CALLBACK_RETRY_PAUSE, MAX_CALLBACKS_IN_FLIGHT,
    MAX_CALLBACKS_QUEUED,
};
use nfsd::nlm::{Callback, Outbox};
use tokio::sync::{mpsc, Semaphore};
use xdr::{Encode, Encoder};

const PMAP_PROGRAM: u32 = 100_000;
const PMAP_VERSION: u32 = 2;
const PMAPPROC_GETPORT: u32 = 3;
const IPPROTO_TCP: u32 = 6;

/// The sending side; [`run`] the receiving side on a tokio runtime.
pub struct TcpOutbox {
    queue: mpsc::Sender<Callback>,
}

/// The queue's receiving end, for [`run`].
pub struct Queue(mpsc::Receiver<Callback>);

/// A new outbox and its queue. Nothing is sent until [`run`] runs.
#[must_use]
pub fn outbox() -> (Arc<TcpOutbox>, Queue) {
    let (queue, rx) = mpsc::channel(MAX_CALLBACKS_QUEUED);
    (Arc::new(TcpOutbox { queue }), Queue(rx))
}

impl Outbox for TcpOutbox {
    fn send(&self, call: Callback) {
        if let Err(e) = self.queue.try_send(call) {
            let call = match e {
                mpsc::error::TrySendError::Full(c) | mpsc::error::TrySendError::Closed(c) => c,
            };
            rpc::warn_limited!(rpc::ratelog::Kind::Refused, host = %call.host, "callback dropped: MAX_CALLBACKS_QUEUED calls wait already");
            if let Some(done) = call.done {
                done(Err("the callback queue is full".into()));
            }
        }
    }
}

/// Sends queued calls until the queue's senders are gone, `portmap_port` being where the
/// client hosts' portmappers listen.
pub async fn run(queue: Queue, portmap_port: u16) {
    let Queue(mut rx) = queue;
    let slots = Arc::new(Semaphore::new(MAX_CALLBACKS_IN_FLIGHT));
    while let Some(call) = rx.recv().await {
        let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        let (call, done) = Call::split(call);
        tokio::spawn(async move {
            let result = deliver(&call, portmap_port).await;
            drop(slot);
            if let Err(e) = &result {
                tracing::info!(host = %call.host, program = call.program, procedure = call.procedure, error = %e, "callback given up");
            }
            if let Some(done) = done {
                done(result);
            }
        });
    }
}

/// A [`Callback`] without its completion (which is `Send` but not `Sync`).
struct Call {
    host: IpAddr,
    program: u32,
    version: u32,
    procedure: u32,
    args: Bytes,
    local_name_first: bool,
}

impl Call {
    fn split(c: Callback) -> (Self, Option<nfsd::nlm::Done>) {
        let call = Self {
            host: c.host,
            program: c.program,
            version: c.version,
            procedure: c.procedure,
            args: c.args,
            local_name_first: c.local_name_first,
        };
        (call, c.done)
    }
}

/// The call's results, trying [`CALLBACK_ATTEMPTS`] times.
async fn deliver(call: &Call, portmap_port: u16) -> Result<Bytes, String> {
    let mut pause = CALLBACK_RETRY_PAUSE;
    let mut last = String::new();
    for attempt in 1..=CALLBACK_ATTEMPTS {
        match tokio::time::timeout(CALLBACK_ATTEMPT_TIMEOUT, once(call, portmap_port)).await {
            Ok(Ok(results)) => return Ok(results),
            Ok(Err(e)) => last = e,
            Err(_) => last = format!("no answer within {CALLBACK_ATTEMPT_TIMEOUT:?}"),
        }
        tracing::debug!(host = %call.host, attempt, error = %last, "callback attempt failed");
        if attempt < CALLBACK_ATTEMPTS {
            tokio::time::sleep(pause).await;
            pause *= 2;
        }
    }
    Err(format!(
        "{CALLBACK_ATTEMPTS} attempts failed; the last: {last}"
    ))
}

/// Already-encoded arguments.
struct Raw<'a>(&'a [u8]);

impl Encode for Raw<'_> {
    fn encode(&self, e: &mut Encoder) {
        e.fixed_opaque(self.0);
    }
}

async fn once(call: &Call, portmap_port: u16) -> Result<Bytes, String> {
    let port = getport(call.host, portmap_port, call.program, call.version).await?;
    let conn = RpcConnection::connect(SocketAddr::new(call.host, port))
        .await
        .map_err(|e| format!("connect to {}:{port}: {e}", call.host))?;
    let args = if call.local_name_first {
        let mut e = Encoder::new();
        e.opaque(local_name(conn.local_addr().ip()).as_bytes());
        e.fixed_opaque(&call.args);
        e.into_bytes()
    } else {
        call.args.clone()
    };
    conn.call(call.program, call.version, call.procedure, &Raw(&args))
        .await
        .map_err(|e| e.to_string())
}

/// This host's name as a client reached it: the address a connection to it leaves from.
fn local_name(ip: IpAddr) -> String {
    ip.to_canonical().to_string()
}

/// The TCP port `program` `version` is registered on at `host`'s portmapper.
async fn getport(
    host: IpAddr,
    portmap_port: u16,
    program: u32,
    version: u32,
) -> Result<u16, String> {
    let pmap = RpcConnection::connect(SocketAddr::new(host, portmap_port))
        .await
        .map_err(|e| format!("portmapper of {host}: {e}"))?;
    let args = [program, version, IPPROTO_TCP, 0];
    let mut e = Encoder::new();
    for w in args {
        e.u32(w);
    }
    let port: u32 = pmap
        .call_decode(
            PMAP_PROGRAM,
            PMAP_VERSION,
            PMAPPROC_GETPORT,
            &Raw(&e.into_bytes()),
        )
        .await
        .map_err(|e| format!("portmapper of {host}: {e}"))?;
    match u16::try_from(port) {
        Ok(0) | Err(_) => Err(format!(
            "program {program} version {version} is not registered for TCP at {host}"
        )),
        Ok(p) => Ok(p),
    }
}
