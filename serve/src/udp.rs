//! NLM and NSM over UDP, on the NFS port's address and number: nfs-utils' `sm-notify`
//! sends a rebooted client's SM_NOTIFY over UDP only (it asks the server's portmapper for
//! NSM's UDP port), and some NLM clients call over UDP. NFS and MOUNT stay TCP only: a
//! datagram for another program is answered PROG_UNAVAIL.
//!
//! One thread, `granary-udp`, which may block (`sync::blocking` allows it): these
//! programs' calls are few and small, and the ones that write (SM_MON records a host,
//! synced) would go to a blocking pool on a worker anyway. It answers one datagram at a
//! time, so its memory is one datagram and one reply; a reply that does not fit a
//! datagram is dropped with a log line. The same dispatcher as TCP runs each call: the
//! same export policy (by the datagram's source address), reply cache and metrics.

use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;
use rpc::msg::{encode_accepted, header_word, AcceptStat, MSG_CALL};
use rpc::ratelog::Kind;
use rpc::Dispatcher;
use tokio::sync::watch;
use xdr::Encoder;

/// The programs served over UDP: NLM and NSM.
pub const UDP_PROGRAMS: [u32; 2] = [nfsd::nlm::proc::PROGRAM, nfsd::nlm::nsm::PROGRAM];

/// The largest UDP payload over IPv4 (65,535 less the IP and UDP headers): the largest
/// call read and the largest reply sent.
const MAX_DATAGRAM_BYTES: usize = 65_507;

/// How often the thread looks at the stop signal while no datagram comes.
const STOP_POLL: Duration = Duration::from_millis(250);

/// Binds UDP `addr` (the TCP listener's address and port) and serves NLM and NSM on it
/// until `stop` turns true.
///
/// # Errors
/// The bind's or the thread's.
pub fn start(
    addr: SocketAddr,
    dispatcher: Arc<Dispatcher>,
    stop: watch::Receiver<bool>,
) -> std::io::Result<JoinHandle<()>> {
    let socket = UdpSocket::bind(addr)?;
    socket.set_read_timeout(Some(STOP_POLL))?;
    std::thread::Builder::new()
        .name("granary-udp".into())
        .spawn(move || serve(&socket, &dispatcher, &stop))
}

fn serve(socket: &UdpSocket, dispatcher: &Dispatcher, stop: &watch::Receiver<bool>) {
    let mut buf = vec![0u8; MAX_DATAGRAM_BYTES];
    while !*stop.borrow() {
        let (n, peer) = match socket.recv_from(&mut buf) {
            Ok(got) => got,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(e) => {
                rpc::warn_limited!(Kind::Unanswerable, error = %e, "UDP receive failed");
                continue;
            }
        };
        if let Some(reply) = answer(dispatcher, Bytes::copy_from_slice(&buf[..n]), peer) {
            if let Err(e) = socket.send_to(&reply, peer) {
                rpc::warn_limited!(Kind::Unanswerable, %peer, error = %e, "UDP reply not sent");
            }
        }
    }
}

/// The reply datagram to one call datagram, or `None` for one that gets no reply (not a
/// call, too short, or a reply too large for a datagram).
pub fn answer(dispatcher: &Dispatcher, call: Bytes, peer: SocketAddr) -> Option<Bytes> {
    let word = |i| header_word(&call, i);
    let (xid, mtype, program) = (word(0)?, word(1)?, word(3)?);
    if mtype != MSG_CALL {
        return None;
    }
    if !UDP_PROGRAMS.contains(&program) {
        tracing::debug!(%peer, xid, program, "PROG_UNAVAIL over UDP: only NLM and NSM are served over UDP");
        let mut e = Encoder::with_capacity(24);
        encode_accepted(&mut e, xid, AcceptStat::ProgUnavail);
        return Some(e.into_bytes());
    }
    match sync::blocking::permitted(|| dispatcher.handle(call, peer)) {
        // The reply record without its record mark: a datagram is one whole message.
        Ok(record) if record.len() - 4 <= MAX_DATAGRAM_BYTES => Some(record.slice(4..)),
        Ok(record) => {
            rpc::warn_limited!(Kind::Unanswerable, %peer, xid, bytes = record.len() - 4, "UDP reply larger than a datagram: not sent");
            None
        }
        Err(e) => {
            rpc::warn_limited!(Kind::Unanswerable, %peer, error = %e, "UDP call not answered");
            None
        }
    }
}
