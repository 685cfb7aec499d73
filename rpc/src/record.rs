//! Record marking over TCP (RFC 5531 section 11): each message is a record of one or more
//! fragments, each fragment prefixed by a 4-byte header holding a last-fragment bit and a
//! 31-bit length.
//!
//! Reading promises: the declared length is checked against the limit before any buffer
//! is grown; a record whose fragments add up past the limit, or that has too many
//! fragments, is refused; a client that starts a record and stalls is timed out.

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

/// Bit set in a fragment header when the fragment ends the record.
pub const LAST_FRAGMENT: u32 = 1 << 31;

/// Most fragments one record may have. Real clients send one; the bound stops a client
/// from sending zero-length fragments forever.
pub const MAX_FRAGMENTS: usize = 1024;

/// Why no record could be read. Every variant ends the connection.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// The peer closed the connection between records (normal).
    #[error("connection closed")]
    Closed,
    /// The peer closed the connection inside a record.
    #[error("connection closed mid-record after {received} bytes")]
    Truncated { received: usize },
    /// The record is larger than the limit (the client is buggy or hostile).
    #[error("record of at least {claimed} bytes exceeds the limit of {max} bytes")]
    TooLarge { claimed: u64, max: u32 },
    /// The record has more than `MAX_FRAGMENTS` fragments.
    #[error("record has more than {MAX_FRAGMENTS} fragments")]
    TooManyFragments,
    /// No request arrived for the idle timeout.
    #[error("idle for {0:?}")]
    Idle(Duration),
    /// The record started but did not complete in time.
    #[error("client stalled mid-record for {0:?}")]
    Stalled(Duration),
    /// A reply write made no progress for this long: the client does not read.
    #[error("client read nothing of its replies for {0:?}")]
    WriteStalled(Duration),
    /// The connection was idle and its slot was given to a new client at the limit.
    #[error("idle connection reclaimed for a new client at the connection limit")]
    Reclaimed,
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
}

/// Time limits for reading one record.
#[derive(Debug, Clone, Copy)]
pub struct RecordTimeouts {
    /// Wait for the first byte of a record.
    pub idle: Duration,
    /// Wait for the rest of a record once it started.
    pub record: Duration,
}

/// Time limits a connection's watchdog enforces.
#[derive(Debug, Clone, Copy)]
pub struct ConnTimeouts {
    /// Nothing in progress and no new request for this long: closed.
    pub idle: Duration,
    /// A record started and did not complete in this long: closed.
    pub record: Duration,
    /// A reply write made no progress for this long: closed.
    pub write: Duration,
}

/// Reads one whole record of at most `max_bytes`, with tokio's timers bounding the wait
/// for its first byte and for the rest.
///
/// # Errors
/// See [`RecordError`].
pub async fn read_record<R: AsyncRead + Unpin>(
    r: &mut R,
    max_bytes: u32,
    timeouts: RecordTimeouts,
) -> Result<Bytes, RecordError> {
    let mut first = [0u8; 1];
    let n = tokio::time::timeout(timeouts.idle, r.read(&mut first))
        .await
        .map_err(|_| RecordError::Idle(timeouts.idle))??;
    if n == 0 {
        return Err(RecordError::Closed);
    }
    tokio::time::timeout(
        timeouts.record,
        read_rest(r, first[0], max_bytes, &mut Free),
    )
    .await
    .map_err(|_| RecordError::Stalled(timeouts.record))?
}

/// Charged before a fragment's bytes are read (see `budget`): may wait for room.
pub trait Charge {
    /// Holds `bytes` more, waiting until they fit.
    fn charge(&mut self, bytes: usize) -> impl std::future::Future<Output = ()>;
}

/// Charges nothing.
pub struct Free;

impl Charge for Free {
    async fn charge(&mut self, _: usize) {}
}

impl Charge for crate::budget::Reservation {
    async fn charge(&mut self, bytes: usize) {
        self.grow(bytes).await;
    }
}

/// Reads one whole record with no timers of its own: it marks in `activity` when a record
/// starts and ends, and a watchdog (see `conn`) enforces the time limits. Each fragment's
/// length is charged to `charge` before its bytes are read.
///
/// # Errors
/// See [`RecordError`] (never a timeout: the watchdog reports those).
pub async fn read_record_watched<R: AsyncRead + Unpin, C: Charge>(
    r: &mut R,
    max_bytes: u32,
    activity: &Activity,
    charge: &mut C,
) -> Result<Bytes, RecordError> {
    let mut first = [0u8; 1];
    if r.read(&mut first).await? == 0 {
        return Err(RecordError::Closed);
    }
    activity.record_started();
    let record = read_rest(r, first[0], max_bytes, charge).await;
    activity.record_ended();
    record
}

/// What a connection is doing, in monotonic nanoseconds of the server's coarse clock
/// ([`gtime::Clock::monotonic_coarse`]: stamped three times per request, and the limits
/// are seconds long, so a stamp a tick early costs nothing and a TSC read per stamp is
/// saved): written by its reader, writer and request tasks, read by the watchdog that
/// enforces [`ConnTimeouts`].
pub struct Activity {
    clock: std::sync::Arc<dyn gtime::Clock>,
    last_ns: std::sync::atomic::AtomicU64,
    /// Start of the record being read; 0 between records.
    record_start_ns: std::sync::atomic::AtomicU64,
    /// Last progress of a reply write under way; 0 when nothing waits to be written.
    write_since_ns: std::sync::atomic::AtomicU64,
    /// Requests read and not yet answered (run, queued or being written).
    in_flight: std::sync::atomic::AtomicUsize,
}

impl Activity {
    #[must_use]
    pub fn new(clock: std::sync::Arc<dyn gtime::Clock>) -> Self {
        let now = now_ns(&*clock);
        Self {
            clock,
            last_ns: std::sync::atomic::AtomicU64::new(now),
            record_start_ns: std::sync::atomic::AtomicU64::new(0),
            write_since_ns: std::sync::atomic::AtomicU64::new(0),
            in_flight: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    fn now(&self) -> u64 {
        now_ns(&*self.clock).max(1)
    }

    fn record_started(&self) {
        self.record_start_ns
            .store(self.now(), std::sync::atomic::Ordering::Relaxed);
    }

    fn record_ended(&self) {
        self.record_start_ns
            .store(0, std::sync::atomic::Ordering::Relaxed);
        self.touch();
    }

    fn touch(&self) {
        self.last_ns
            .store(self.now(), std::sync::atomic::Ordering::Relaxed);
    }

    /// A request was read; it counts until [`Activity::request_done`].
    pub fn request_started(&self) {
        self.in_flight
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// A request's reply was written (or dropped).
    pub fn request_done(&self) {
        self.in_flight
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        self.touch();
    }

    /// Replies are waiting to be written, or a write just made progress.
    pub fn write_progress(&self) {
        self.write_since_ns
            .store(self.now(), std::sync::atomic::Ordering::Relaxed);
    }

    /// Everything queued has been written.
    pub fn write_idle(&self) {
        self.write_since_ns
            .store(0, std::sync::atomic::Ordering::Relaxed);
        self.touch();
    }

    /// Nanoseconds since the connection last did anything, if it is idle now (no record
    /// being read, no request in flight, nothing to write).
    #[must_use]
    pub fn idle_for_ns(&self) -> Option<u64> {
        use std::sync::atomic::Ordering::Relaxed;
        let busy = self.record_start_ns.load(Relaxed) != 0
            || self.write_since_ns.load(Relaxed) != 0
            || self.in_flight.load(Relaxed) != 0;
        (!busy).then(|| now_ns(&*self.clock).saturating_sub(self.last_ns.load(Relaxed)))
    }

    /// The limit the connection has broken, if any, at the clock's current time.
    #[must_use]
    pub fn overdue(&self, timeouts: ConnTimeouts) -> Option<RecordError> {
        use std::sync::atomic::Ordering::Relaxed;
        let now = now_ns(&*self.clock);
        let since = |start: u64, limit: Duration| {
            start != 0 && now.saturating_sub(start) >= duration_ns(limit)
        };
        if since(self.write_since_ns.load(Relaxed), timeouts.write) {
            return Some(RecordError::WriteStalled(timeouts.write));
        }
        if since(self.record_start_ns.load(Relaxed), timeouts.record) {
            return Some(RecordError::Stalled(timeouts.record));
        }
        let idle = self.idle_for_ns()?;
        (idle >= duration_ns(timeouts.idle)).then_some(RecordError::Idle(timeouts.idle))
    }
}

fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn now_ns(clock: &dyn gtime::Clock) -> u64 {
    u64::try_from(clock.monotonic_coarse().as_nanos()).unwrap_or(u64::MAX)
}

/// Appends exactly `len` bytes from `r` to `buf`, reading into its spare capacity: no
/// zero-fill first (a 1 MiB WRITE would otherwise pay a memset before the copy).
async fn read_fragment<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut BytesMut,
    len: usize,
) -> std::io::Result<()> {
    let end = buf.len() + len;
    buf.reserve(len);
    while buf.len() < end {
        let want = end - buf.len();
        let mut limited = (&mut *buf).limit(want);
        if r.read_buf(&mut limited).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
    Ok(())
}

async fn read_rest<R: AsyncRead + Unpin, C: Charge>(
    r: &mut R,
    first_byte: u8,
    max_bytes: u32,
    charge: &mut C,
) -> Result<Bytes, RecordError> {
    let mut buf = BytesMut::new();
    let mut header = [first_byte, 0, 0, 0];
    let mut have_first = true;
    for _ in 0..MAX_FRAGMENTS {
        let from = usize::from(have_first);
        have_first = false;
        r.read_exact(&mut header[from..])
            .await
            .map_err(|e| eof_as_truncated(e, buf.len()))?;
        let word = u32::from_be_bytes(header);
        let len = word & !LAST_FRAGMENT;
        let total = buf.len() as u64 + u64::from(len);
        if total > u64::from(max_bytes) {
            return Err(RecordError::TooLarge {
                claimed: total,
                max: max_bytes,
            });
        }
        let start = buf.len();
        charge.charge(len as usize).await;
        read_fragment(r, &mut buf, len as usize)
            .await
            .map_err(|e| eof_as_truncated(e, start))?;
        if word & LAST_FRAGMENT != 0 {
            return Ok(buf.freeze());
        }
    }
    Err(RecordError::TooManyFragments)
}

fn eof_as_truncated(e: std::io::Error, received: usize) -> RecordError {
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        RecordError::Truncated { received }
    } else {
        RecordError::Io(e)
    }
}

/// A buffer with room for a record mark at the front; pass it to `xdr::Encoder::from_buf`
/// and finish with [`seal`].
#[must_use]
pub fn start_record(capacity_bytes: usize) -> BytesMut {
    let mut buf = BytesMut::with_capacity(capacity_bytes + 4);
    buf.extend_from_slice(&[0, 0, 0, 0]);
    buf
}

/// Writes the record mark of a buffer made by [`start_record`]: one last fragment.
///
/// # Panics
/// If the buffer is shorter than its mark or longer than a fragment can say.
#[must_use]
pub fn seal(buf: BytesMut) -> Bytes {
    seal_before(buf, 0)
}

/// [`seal`] for a record whose last `more_bytes` are sent after `buf` from elsewhere (a
/// [`crate::reply::FileSlice`] and its padding).
///
/// # Panics
/// As [`seal`].
#[must_use]
pub fn seal_before(mut buf: BytesMut, more_bytes: usize) -> Bytes {
    let len = u32::try_from(buf.len() - 4 + more_bytes).expect("record length fits 31 bits");
    assert!(len < LAST_FRAGMENT, "record too large for one fragment");
    buf[..4].copy_from_slice(&(LAST_FRAGMENT | len).to_be_bytes());
    buf.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: RecordTimeouts = RecordTimeouts {
        idle: Duration::from_secs(5),
        record: Duration::from_secs(5),
    };

    fn fragment(data: &[u8], last: bool) -> Vec<u8> {
        let mut out = (u32::try_from(data.len()).unwrap() | if last { LAST_FRAGMENT } else { 0 })
            .to_be_bytes()
            .to_vec();
        out.extend_from_slice(data);
        out
    }

    #[tokio::test]
    async fn multi_fragment_record_is_joined() {
        let mut wire = fragment(b"abc", false);
        wire.extend(fragment(b"", false));
        wire.extend(fragment(b"defg", true));
        wire.extend(fragment(b"next", true));
        let mut r = &wire[..];
        assert_eq!(&read_record(&mut r, 100, T).await.unwrap()[..], b"abcdefg");
        assert_eq!(&read_record(&mut r, 100, T).await.unwrap()[..], b"next");
        assert!(matches!(
            read_record(&mut r, 100, T).await,
            Err(RecordError::Closed)
        ));
    }

    /// Fragments that arrive a few bytes at a time, each spanning many reads, come out
    /// whole, byte for byte, and a second record after them is read separately.
    #[tokio::test]
    async fn fragments_arriving_in_small_pieces_are_joined() {
        let first: Vec<u8> = (0..70_000u32).map(|i| (i % 251) as u8).collect();
        let mut wire = fragment(&first[..30_001], false);
        wire.extend(fragment(&first[30_001..], true));
        wire.extend(fragment(b"second", true));
        let (mut client, mut server) = tokio::io::duplex(13);
        let writer = tokio::spawn(async move {
            tokio::io::AsyncWriteExt::write_all(&mut client, &wire)
                .await
                .unwrap();
        });
        let record = read_record(&mut server, 100_000, T).await.unwrap();
        assert_eq!(record.len(), first.len());
        assert!(record[..] == first[..], "bytes differ");
        assert_eq!(
            &read_record(&mut server, 100, T).await.unwrap()[..],
            b"second"
        );
        writer.await.unwrap();
    }

    #[tokio::test]
    async fn huge_header_is_refused_without_allocating() {
        let wire = 0xffff_ffffu32.to_be_bytes();
        let mut r = &wire[..];
        let err = read_record(&mut r, 1 << 20, T).await.unwrap_err();
        assert!(
            matches!(
                err,
                RecordError::TooLarge {
                    claimed: 0x7fff_ffff,
                    ..
                }
            ),
            "{err}"
        );
    }

    #[tokio::test]
    async fn fragments_adding_past_the_limit_are_refused() {
        let mut wire = fragment(&[1; 60], false);
        wire.extend(fragment(&[2; 60], true));
        let mut r = &wire[..];
        let err = read_record(&mut r, 100, T).await.unwrap_err();
        assert!(
            matches!(
                err,
                RecordError::TooLarge {
                    claimed: 120,
                    max: 100
                }
            ),
            "{err}"
        );
    }

    #[tokio::test]
    async fn endless_empty_fragments_are_refused() {
        let wire: Vec<u8> = (0..=MAX_FRAGMENTS)
            .flat_map(|_| fragment(b"", false))
            .collect();
        let mut r = &wire[..];
        assert!(matches!(
            read_record(&mut r, 100, T).await,
            Err(RecordError::TooManyFragments)
        ));
    }

    #[tokio::test]
    async fn eof_inside_a_record_is_truncation() {
        let wire = fragment(b"abcdef", true);
        let mut r = &wire[..7];
        assert!(matches!(
            read_record(&mut r, 100, T).await,
            Err(RecordError::Truncated { received: 0 })
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn stalled_record_times_out() {
        let (mut client, mut server) = tokio::io::duplex(64);
        tokio::io::AsyncWriteExt::write_all(&mut client, &[0x80, 0, 0, 10, 1, 2])
            .await
            .unwrap();
        let err = read_record(&mut server, 100, T).await.unwrap_err();
        assert!(matches!(err, RecordError::Stalled(_)), "{err}");
        drop(client);
    }

    #[test]
    fn activity_reports_stalls_and_idleness() {
        let clock = std::sync::Arc::new(gtime::ManualClock::new(gtime::Timestamp::default()));
        let a = Activity::new(clock.clone());
        let t = ConnTimeouts {
            idle: Duration::from_secs(10),
            record: Duration::from_secs(2),
            write: Duration::from_secs(3),
        };
        assert!(a.overdue(t).is_none());
        clock.advance(Duration::from_secs(1));
        a.record_started();
        clock.advance(Duration::from_secs(2));
        assert!(matches!(a.overdue(t), Some(RecordError::Stalled(_))));
        a.record_ended();
        clock.advance(Duration::from_secs(9));
        assert!(a.overdue(t).is_none());
        clock.advance(Duration::from_secs(1));
        assert!(matches!(a.overdue(t), Some(RecordError::Idle(_))));
        // A request in flight is not idleness; a write that makes no progress is a stall.
        a.request_started();
        clock.advance(Duration::from_secs(20));
        assert!(a.overdue(t).is_none());
        a.write_progress();
        clock.advance(Duration::from_secs(2));
        a.write_progress();
        clock.advance(Duration::from_secs(2));
        assert!(a.overdue(t).is_none(), "progress restarts the write clock");
        clock.advance(Duration::from_secs(1));
        assert!(matches!(a.overdue(t), Some(RecordError::WriteStalled(_))));
        a.write_idle();
        a.request_done();
        assert_eq!(a.idle_for_ns(), Some(0));
    }

    #[test]
    fn seal_writes_last_fragment_mark() {
        let mut buf = start_record(8);
        buf.extend_from_slice(b"hello");
        assert_eq!(
            &seal(buf)[..],
            &[0x80, 0, 0, 5, b'h', b'e', b'l', b'l', b'o']
        );
    }
}
