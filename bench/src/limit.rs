//! The physical limit of this machine, measured by the bench itself in the same run.
//!
//! - [`Responder`]: a loopback RPC "server" that does nothing: it frames each call record
//!   and answers with an accepted SUCCESS reply of the size the real reply would have (the
//!   call's procedure number, see [`super::wire::LIMIT_PROGRAM`]). It reads everything
//!   available, answers every complete call in one write, and uses blocking sockets on a
//!   thread per connection, the cheapest way to turn requests into replies. The load
//!   generator drives it with the very same workload code and client path as a real
//!   server, so each phase's limit is a request/response ping-pong with that phase's
//!   message sizes, depth and connections: the floor for small ops.
//! - [`stream_ceiling`]: one loopback TCP connection streaming 1 MiB writes as fast as
//!   the kernel moves them: the ceiling for bandwidth.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use gtime::Clock;

use super::limits::STREAM_CHUNK_BYTES;

/// Largest call record the responder frames (a 1 MiB WRITE and its headers).
const MAX_CALL_BYTES: usize = (1 << 20) + (64 << 10);
/// Largest reply it builds (a 1 MiB READ and its headers), as the client accepts.
const MAX_REPLY_RESULTS_BYTES: usize = (1 << 20) + 4096;
/// Stack of each connection thread: it only shuffles buffers.
const THREAD_STACK_BYTES: usize = 256 << 10;
/// Bytes read per `read` call.
const READ_CHUNK_BYTES: usize = 256 << 10;

/// The do-nothing RPC responder. Stops accepting when dropped (connection threads end
/// when their client closes).
pub struct Responder {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl Responder {
    /// Listens on an ephemeral loopback port.
    ///
    /// # Errors
    /// Binding failed.
    pub fn start() -> io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        thread::Builder::new()
            .name("bench-limit".into())
            .stack_size(THREAD_STACK_BYTES)
            .spawn(move || accept_loop(&listener, &flag))?;
        Ok(Self { addr, stop })
    }

    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        drop(TcpStream::connect(self.addr));
    }
}

fn accept_loop(listener: &TcpListener, stop: &AtomicBool) {
    for stream in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = stream else { continue };
        let spawned = thread::Builder::new()
            .name("bench-limit-conn".into())
            .stack_size(THREAD_STACK_BYTES)
            .spawn(move || {
                // A client that goes away mid-record is the normal end of a phase.
                drop(serve(stream));
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "limit responder cannot start a connection thread");
        }
    }
}

/// Answers calls until the client closes.
fn serve(mut stream: TcpStream) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let mut inbuf: Vec<u8> = Vec::with_capacity(READ_CHUNK_BYTES);
    let mut out: Vec<u8> = Vec::with_capacity(READ_CHUNK_BYTES);
    let mut chunk = vec![0u8; READ_CHUNK_BYTES];
    loop {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Ok(());
        }
        inbuf.extend_from_slice(&chunk[..n]);
        let used = answer_all(&inbuf, &mut out)?;
        inbuf.drain(..used);
        if !out.is_empty() {
            stream.write_all(&out)?;
            out.clear();
        }
    }
}

/// Appends a reply to `out` for each complete single-fragment record at the start of
/// `buf`; returns the bytes consumed.
fn answer_all(buf: &[u8], out: &mut Vec<u8>) -> io::Result<usize> {
    let mut at = 0;
    while let Some(mark) = buf.get(at..at + 4) {
        let mark = u32::from_be_bytes([mark[0], mark[1], mark[2], mark[3]]);
        let len = (mark & 0x7fff_ffff) as usize;
        if mark & 0x8000_0000 == 0 || !(24..=MAX_CALL_BYTES).contains(&len) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "unexpected record",
            ));
        }
        let Some(body) = buf.get(at + 4..at + 4 + len) else {
            break;
        };
        let results = u32::from_be_bytes([body[20], body[21], body[22], body[23]]) as usize;
        let results = results.min(MAX_REPLY_RESULTS_BYTES);
        let reply_len = 24 + results;
        // Ends: reply_len is at most MAX_REPLY_RESULTS_BYTES + 24, far below 2^31.
        out.extend_from_slice(&(0x8000_0000 | reply_len as u32).to_be_bytes());
        out.extend_from_slice(&body[..4]); // xid
        for word in [1u32, 0, 0, 0, 0] {
            // REPLY, MSG_ACCEPTED, verifier AUTH_NONE of length 0, SUCCESS.
            out.extend_from_slice(&word.to_be_bytes());
        }
        out.resize(out.len() + results, 0);
        at += 4 + len;
    }
    Ok(at)
}

/// Streams `bytes` over one loopback TCP connection in 1 MiB writes and returns the time
/// from the first write to the receiver's last byte.
///
/// # Errors
/// Socket errors.
pub fn stream_ceiling(clock: &Arc<dyn Clock>, bytes: u64) -> io::Result<Duration> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let receiver =
        thread::Builder::new()
            .name("bench-stream".into())
            .spawn(move || -> io::Result<u64> {
                let (mut s, _) = listener.accept()?;
                let mut buf = vec![0u8; STREAM_CHUNK_BYTES];
                let mut got = 0u64;
                loop {
                    let n = s.read(&mut buf)?;
                    if n == 0 {
                        return Ok(got);
                    }
                    got += n as u64;
                }
            })?;
    let mut sender = TcpStream::connect(addr)?;
    let chunk = vec![0x5au8; STREAM_CHUNK_BYTES];
    let started = clock.monotonic();
    let mut sent = 0u64;
    while sent < bytes {
        let n = usize::try_from(bytes - sent).map_or(chunk.len(), |left| left.min(chunk.len()));
        sender.write_all(&chunk[..n])?;
        sent += n as u64;
    }
    sender.shutdown(Shutdown::Write)?;
    let got = receiver
        .join()
        .map_err(|_| io::Error::other("stream receiver panicked"))??;
    let elapsed = clock.monotonic() - started;
    if got != bytes {
        return Err(io::Error::other(format!(
            "sent {bytes} bytes, received {got}"
        )));
    }
    Ok(elapsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_each_whole_record_with_the_asked_size() {
        let mut call = Vec::new();
        let body: Vec<u8> = [7u32, 0, 2, super::super::wire::LIMIT_PROGRAM, 1, 88]
            .iter()
            .flat_map(|w| w.to_be_bytes())
            .collect();
        call.extend_from_slice(&(0x8000_0000u32 | body.len() as u32).to_be_bytes());
        call.extend_from_slice(&body);
        let mut two = call.clone();
        two.extend_from_slice(&call[..10]); // half of a second record
        let mut out = Vec::new();
        assert_eq!(answer_all(&two, &mut out).unwrap(), call.len());
        assert_eq!(out.len(), 4 + 24 + 88);
        assert_eq!(&out[4..8], &7u32.to_be_bytes());
    }
}
