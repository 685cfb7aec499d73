//! One load connection ([`Conn`]): NFSv3 calls to a real server, or the very same calls
//! (same arguments, same encoding, same client code path) to the loopback limit responder
//! of [`super::limit`], which answers each with a reply of the size the real one would
//! have and does nothing else. The workloads are written once against [`Conn`], so the
//! limit of each phase is that phase with a server that costs nothing.
//!
//! Every result is checked: a non-OK status, an RPC refusal, a timeout or a dead
//! connection is an [`OpError`], never an op. Against the limit, replies carry no data, so
//! [`Conn::verifies`] is false and the workloads skip content checks (and only those).

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use client::{ClientError, PendingReply, RpcConnection};
use nfs3::limits::{NFS_PROGRAM, NFS_V3};
use nfs3::nfs::{
    entryplus3_size, CommitArgs, CommitRes, CreateArgs, CreateHow3, CreateRes, DirOpArgs3,
    Filename3, GetattrArgs, GetattrRes, LookupArgs, LookupRes, MkdirArgs, MkdirRes, NfsFh3,
    NfsProc, Nfsstat3, ReadArgs, ReadRes, ReaddirplusArgs, ReaddirplusRes, RemoveArgs, RemoveRes,
    Res3, Sattr3, SattrGuard3, SetattrArgs, SetattrRes, StableHow, Void, WriteArgs, WriteRes,
    Writeverf3, FATTR3_SIZE, READDIRPLUS3_RESOK_FIXED_SIZE,
};
use rpc::msg::ReplyStatus;
use tokio::net::TcpStream;
use xdr::{Decode, Decoder, Encode};

use super::limits::{CONNECT_TIMEOUT, READDIRPLUS_DIRCOUNT_BYTES, READDIRPLUS_MAXCOUNT_BYTES};

/// The limit responder's program number (in the user-defined range 0x20000000-0x3fffffff).
/// Its procedure number is the size of the results to answer with.
pub const LIMIT_PROGRAM: u32 = 0x2047_4c00;
pub const LIMIT_VERSION: u32 = 1;

/// Reply result sizes the limit answers with: what granary's replies to the same calls
/// carry (NFS status, `fattr3`, `wcc_data`, 32-byte handles), see RFC 1813 section 3.3.
mod reply_bytes {
    use super::FATTR3_SIZE;
    const STATUS: u32 = 4;
    const POST_OP_ATTR: u32 = 4 + FATTR3_SIZE as u32;
    const WCC: u32 = 4 + 24 + POST_OP_ATTR;
    /// granary's handles are 32 bytes (see vfs/src/handle.rs).
    pub const HANDLE: usize = 32;
    const POST_OP_FH: u32 = 4 + 4 + HANDLE as u32;
    pub const NULL: u32 = 0;
    pub const GETATTR: u32 = STATUS + FATTR3_SIZE as u32;
    pub const SETATTR: u32 = STATUS + WCC;
    pub const LOOKUP: u32 = STATUS + 4 + HANDLE as u32 + 2 * POST_OP_ATTR;
    pub const CREATE: u32 = STATUS + POST_OP_FH + POST_OP_ATTR + WCC;
    pub const REMOVE: u32 = STATUS + WCC;
    pub const WRITE: u32 = STATUS + WCC + 4 + 4 + 8;
    pub const COMMIT: u32 = STATUS + WCC + 8;
    /// READ of `count` bytes: status, post-op attributes, count, eof, the data.
    pub const fn read(count: u32) -> u32 {
        STATUS + POST_OP_ATTR + 4 + 4 + 4 + count.div_ceil(4) * 4
    }
}

/// Why one op did not count.
#[derive(Debug, Clone)]
pub enum OpError {
    /// The server answered with an NFS status other than OK.
    Nfs(Nfsstat3),
    /// The server refused the call at the RPC level (PROC_UNAVAIL, GARBAGE_ARGS, ...).
    Rpc(String),
    /// No reply within the op timeout.
    Timeout,
    /// The connection died; nothing more can be sent on it.
    Closed(String),
    /// Connecting failed.
    Connect(String),
    /// A well-formed reply that breaks the protocol (short READ without eof, ...).
    Protocol(String),
    /// The data read back is not what was written.
    Verify(String),
}

impl OpError {
    /// A short stable key for counting errors by kind in the report.
    #[must_use]
    pub fn kind(&self) -> String {
        match self {
            Self::Nfs(s) => format!("NFS3ERR_{}", format!("{s:?}").to_uppercase()),
            Self::Rpc(s) => format!("RPC {s}"),
            Self::Timeout => "timeout".to_owned(),
            Self::Closed(_) => "connection closed".to_owned(),
            Self::Connect(_) => "connect failed".to_owned(),
            Self::Protocol(_) => "protocol violation".to_owned(),
            Self::Verify(_) => "data mismatch".to_owned(),
        }
    }

    /// Whether the connection is unusable after this error.
    #[must_use]
    pub fn is_fatal(&self) -> bool {
        matches!(self, Self::Closed(_) | Self::Connect(_))
    }
}

impl std::fmt::Display for OpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Nfs(_) | Self::Timeout => write!(f, "{}", self.kind()),
            Self::Rpc(s) => write!(f, "RPC call refused: {s}"),
            Self::Closed(s) => write!(f, "connection closed: {s}"),
            Self::Connect(s) => write!(f, "connect failed: {s}"),
            Self::Protocol(s) => write!(f, "protocol violation: {s}"),
            Self::Verify(s) => write!(f, "{s}"),
        }
    }
}

impl From<ClientError> for OpError {
    fn from(e: ClientError) -> Self {
        match e {
            ClientError::Nfs(s) => Self::Nfs(s),
            ClientError::Rpc(status) => Self::Rpc(rpc_status_name(&status)),
            ClientError::Timeout { .. } => Self::Timeout,
            ClientError::Closed { reason } => Self::Closed(reason.to_string()),
            other => Self::Protocol(other.to_string()),
        }
    }
}

fn rpc_status_name(status: &ReplyStatus) -> String {
    use rpc::msg::AcceptStat;
    match status {
        ReplyStatus::Accepted(AcceptStat::ProcUnavail) => "PROC_UNAVAIL".to_owned(),
        ReplyStatus::Accepted(AcceptStat::ProgUnavail) => "PROG_UNAVAIL".to_owned(),
        ReplyStatus::Accepted(AcceptStat::GarbageArgs) => "GARBAGE_ARGS".to_owned(),
        ReplyStatus::Accepted(AcceptStat::SystemErr) => "SYSTEM_ERR".to_owned(),
        other => format!("{other:?}"),
    }
}

/// The `Ok` body of an NFS result, or the status as an error.
fn ok<T, F>(res: Res3<T, F>) -> Result<T, OpError> {
    match res {
        Res3::Ok(v) => Ok(v),
        Res3::Fail(status, _) => Err(OpError::Nfs(status)),
    }
}

/// One READDIRPLUS page.
#[derive(Debug, Default)]
pub struct Page {
    pub names: Vec<Bytes>,
    pub eof: bool,
    pub cookie: u64,
    pub cookieverf: [u8; 8],
}

/// A WRITE or READ sent and not yet answered (for pipelined sequential I/O).
pub struct InFlight {
    reply: PendingReply,
    offset: u64,
    len: u32,
}

/// One load connection. Cheap to clone (clones share the socket).
#[derive(Clone, Debug)]
pub struct Conn {
    rpc: RpcConnection,
    limit: bool,
}

impl Conn {
    /// Connects to `addr`; `limit` if it is the limit responder. Each call on it fails
    /// with [`OpError::Timeout`] after `op_timeout`.
    ///
    /// # Errors
    /// [`OpError::Connect`] if the server does not accept within [`CONNECT_TIMEOUT`].
    pub async fn connect(
        addr: SocketAddr,
        limit: bool,
        op_timeout: Duration,
    ) -> Result<Self, OpError> {
        let stream = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(OpError::Connect(format!("{addr}: {e}"))),
            Err(_) => return Err(OpError::Connect(format!("{addr}: no answer"))),
        };
        let rpc = RpcConnection::from_stream(stream)
            .map_err(|e| OpError::Connect(e.to_string()))?
            .with_timeout(op_timeout);
        Ok(Self { rpc, limit })
    }

    /// Whether replies carry real data to check (false against the limit responder).
    #[must_use]
    pub fn verifies(&self) -> bool {
        !self.limit
    }

    /// A stand-in handle for the limit (never sent to a real server), granary-sized.
    #[must_use]
    pub fn fake_handle(tag: u64) -> NfsFh3 {
        let mut fh = [0u8; reply_bytes::HANDLE];
        fh[..8].copy_from_slice(&tag.to_be_bytes());
        NfsFh3(Bytes::copy_from_slice(&fh))
    }

    async fn send(
        &self,
        proc: NfsProc,
        args: &impl Encode,
        limit_reply_bytes: u32,
    ) -> Result<PendingReply, OpError> {
        let (program, version, procedure) = if self.limit {
            (LIMIT_PROGRAM, LIMIT_VERSION, limit_reply_bytes)
        } else {
            (NFS_PROGRAM, NFS_V3, proc as u32)
        };
        Ok(self
            .rpc
            .send_call(program, version, procedure, args)
            .await?)
    }

    /// Waits for a reply and decodes it; `None` from the limit (nothing to decode).
    async fn finish<R: Decode>(&self, pending: PendingReply) -> Result<Option<R>, OpError> {
        let body = pending.wait().await?;
        if self.limit {
            return Ok(None);
        }
        let mut d = Decoder::new(body);
        let value = R::decode(&mut d).map_err(|e| OpError::Protocol(e.to_string()))?;
        if d.remaining() != 0 {
            return Err(OpError::Protocol(format!(
                "{} bytes after the results",
                d.remaining()
            )));
        }
        Ok(Some(value))
    }

    async fn call<R: Decode>(
        &self,
        proc: NfsProc,
        args: &impl Encode,
        limit_reply_bytes: u32,
    ) -> Result<Option<R>, OpError> {
        let pending = self.send(proc, args, limit_reply_bytes).await?;
        self.finish(pending).await
    }

    /// NULL.
    pub async fn null(&self) -> Result<(), OpError> {
        self.call::<Void>(NfsProc::Null, &Void, reply_bytes::NULL)
            .await
            .map(drop)
    }

    /// GETATTR; returns the size (0 from the limit).
    pub async fn getattr(&self, fh: &NfsFh3) -> Result<u64, OpError> {
        let args = GetattrArgs { object: fh.clone() };
        match self
            .call::<GetattrRes>(NfsProc::Getattr, &args, reply_bytes::GETATTR)
            .await?
        {
            Some(res) => Ok(ok(res)?.obj_attributes.size),
            None => Ok(0),
        }
    }

    /// LOOKUP `name` in `dir`.
    pub async fn lookup(&self, dir: &NfsFh3, name: &[u8]) -> Result<NfsFh3, OpError> {
        let args = LookupArgs {
            what: dir_op(dir, name),
        };
        match self
            .call::<LookupRes>(NfsProc::Lookup, &args, reply_bytes::LOOKUP)
            .await?
        {
            Some(res) => Ok(ok(res)?.object),
            None => Ok(dir.clone()),
        }
    }

    /// CREATE `name` in `dir` (GUARDED, mode 0644); the new handle, by LOOKUP if the server
    /// returned none.
    pub async fn create(&self, dir: &NfsFh3, name: &[u8]) -> Result<NfsFh3, OpError> {
        let args = CreateArgs {
            where_: dir_op(dir, name),
            how: CreateHow3::Guarded(mode(0o644)),
        };
        match self
            .call::<CreateRes>(NfsProc::Create, &args, reply_bytes::CREATE)
            .await?
        {
            Some(res) => match ok(res)?.obj.0 {
                Some(fh) => Ok(fh),
                None => self.lookup(dir, name).await,
            },
            None => Ok(dir.clone()),
        }
    }

    /// MKDIR `name` in `dir` (mode 0755).
    pub async fn mkdir(&self, dir: &NfsFh3, name: &[u8]) -> Result<NfsFh3, OpError> {
        let args = MkdirArgs {
            where_: dir_op(dir, name),
            attributes: mode(0o755),
        };
        match self
            .call::<MkdirRes>(NfsProc::Mkdir, &args, reply_bytes::CREATE)
            .await?
        {
            Some(res) => match ok(res)?.obj.0 {
                Some(fh) => Ok(fh),
                None => self.lookup(dir, name).await,
            },
            None => Ok(dir.clone()),
        }
    }

    /// SETATTR of the mode bits.
    pub async fn chmod(&self, fh: &NfsFh3, bits: u32) -> Result<(), OpError> {
        let args = SetattrArgs {
            object: fh.clone(),
            new_attributes: mode(bits),
            guard: SattrGuard3(None),
        };
        if let Some(res) = self
            .call::<SetattrRes>(NfsProc::Setattr, &args, reply_bytes::SETATTR)
            .await?
        {
            ok(res)?;
        }
        Ok(())
    }

    /// REMOVE `name` from `dir`.
    pub async fn remove(&self, dir: &NfsFh3, name: &[u8]) -> Result<(), OpError> {
        let args = RemoveArgs {
            object: dir_op(dir, name),
        };
        if let Some(res) = self
            .call::<RemoveRes>(NfsProc::Remove, &args, reply_bytes::REMOVE)
            .await?
        {
            ok(res)?;
        }
        Ok(())
    }

    /// Sends a WRITE of `data` at `offset` without waiting.
    pub async fn send_write(
        &self,
        fh: &NfsFh3,
        offset: u64,
        data: Bytes,
        stable: StableHow,
    ) -> Result<InFlight, OpError> {
        let len = u32::try_from(data.len()).unwrap_or(u32::MAX);
        let args = WriteArgs {
            file: fh.clone(),
            offset,
            count: len,
            stable,
            data,
        };
        let reply = self.send(NfsProc::Write, &args, reply_bytes::WRITE).await?;
        Ok(InFlight { reply, offset, len })
    }

    /// Waits for a WRITE sent by [`Conn::send_write`]; a short or less-stable-than-asked
    /// write is a protocol error here (no peer does either against these sizes).
    pub async fn finish_write(&self, w: InFlight, stable: StableHow) -> Result<(), OpError> {
        let (offset, len) = (w.offset, w.len);
        let Some(res) = self.finish::<WriteRes>(w.reply).await? else {
            return Ok(());
        };
        let done = ok(res)?;
        if done.count != len {
            return Err(OpError::Protocol(format!(
                "WRITE of {len} bytes at {offset} wrote {}",
                done.count
            )));
        }
        if (done.committed as u32) < (stable as u32) {
            return Err(OpError::Protocol(format!(
                "WRITE asked {stable:?}, server answered {:?}",
                done.committed
            )));
        }
        Ok(())
    }

    /// One WRITE, waited for.
    pub async fn write(
        &self,
        fh: &NfsFh3,
        offset: u64,
        data: Bytes,
        stable: StableHow,
    ) -> Result<(), OpError> {
        let w = self.send_write(fh, offset, data, stable).await?;
        self.finish_write(w, stable).await
    }

    /// COMMIT the whole file; its verifier.
    pub async fn commit(&self, fh: &NfsFh3) -> Result<Writeverf3, OpError> {
        let args = CommitArgs {
            file: fh.clone(),
            offset: 0,
            count: 0,
        };
        match self
            .call::<CommitRes>(NfsProc::Commit, &args, reply_bytes::COMMIT)
            .await?
        {
            Some(res) => Ok(ok(res)?.verf),
            None => Ok([0; 8]),
        }
    }

    /// Sends a READ of `count` bytes at `offset` without waiting.
    pub async fn send_read(
        &self,
        fh: &NfsFh3,
        offset: u64,
        count: u32,
    ) -> Result<InFlight, OpError> {
        let args = ReadArgs {
            file: fh.clone(),
            offset,
            count,
        };
        let reply = self
            .send(NfsProc::Read, &args, reply_bytes::read(count))
            .await?;
        Ok(InFlight {
            reply,
            offset,
            len: count,
        })
    }

    /// Waits for a READ sent by [`Conn::send_read`] and checks it returned all it was
    /// asked (the workloads only read inside the file) and, against a real server, that
    /// the data is the pattern. Returns the bytes read.
    pub async fn finish_read(&self, r: InFlight) -> Result<u64, OpError> {
        let (offset, len) = (r.offset, r.len);
        let Some(res) = self.finish::<ReadRes>(r.reply).await? else {
            return Ok(u64::from(len));
        };
        let done = ok(res)?;
        if done.data.len() != len as usize || done.count != len {
            return Err(OpError::Protocol(format!(
                "READ of {len} bytes at {offset} returned {} (count {})",
                done.data.len(),
                done.count
            )));
        }
        super::pattern::verify(offset, &done.data).map_err(OpError::Verify)?;
        Ok(u64::from(len))
    }

    /// One verified READ.
    pub async fn read(&self, fh: &NfsFh3, offset: u64, count: u32) -> Result<u64, OpError> {
        let r = self.send_read(fh, offset, count).await?;
        self.finish_read(r).await
    }

    /// One READ whose data is returned unchecked (`None` from the limit, which sends no
    /// data): for files that do not hold [`super::pattern`], such as the EROFS image's.
    pub async fn read_data(
        &self,
        fh: &NfsFh3,
        offset: u64,
        count: u32,
    ) -> Result<Option<Bytes>, OpError> {
        let r = self.send_read(fh, offset, count).await?;
        let Some(res) = self.finish::<ReadRes>(r.reply).await? else {
            return Ok(None);
        };
        let done = ok(res)?;
        if done.data.len() != count as usize {
            return Err(OpError::Protocol(format!(
                "READ of {count} bytes at {offset} returned {}",
                done.data.len()
            )));
        }
        Ok(Some(done.data))
    }

    /// One READDIRPLUS page after `cookie`. Against the limit, `limit_total` entries are
    /// listed in pages of the size granary's would have.
    pub async fn readdirplus(
        &self,
        dir: &NfsFh3,
        cookie: u64,
        cookieverf: [u8; 8],
        limit_total: u32,
    ) -> Result<Page, OpError> {
        let args = ReaddirplusArgs {
            dir: dir.clone(),
            cookie,
            cookieverf,
            dircount: READDIRPLUS_DIRCOUNT_BYTES,
            maxcount: READDIRPLUS_MAXCOUNT_BYTES,
        };
        let per_page = limit_page_entries();
        let page_bytes =
            READDIRPLUS3_RESOK_FIXED_SIZE + 4 + per_page as usize * limit_entry_bytes();
        let reply_bytes = u32::try_from(page_bytes).unwrap_or(READDIRPLUS_MAXCOUNT_BYTES);
        let Some(res) = self
            .call::<ReaddirplusRes>(NfsProc::Readdirplus, &args, reply_bytes)
            .await?
        else {
            return Ok(limit_page(cookie, limit_total, per_page));
        };
        let done = ok(res)?;
        let cookie = done.entries.last().map_or(cookie, |e| e.cookie);
        Ok(Page {
            names: done.entries.into_iter().map(|e| e.name.0).collect(),
            eof: done.eof,
            cookie,
            cookieverf: done.cookieverf,
        })
    }
}

/// Names of the READDIRPLUS directory: `e00000` … (6 bytes, as the limit assumes).
#[must_use]
pub fn dir_entry_name(i: u32) -> String {
    format!("e{i:05}")
}

/// Wire size of one entry of the READDIRPLUS directory, with attributes and handle.
fn limit_entry_bytes() -> usize {
    entryplus3_size(dir_entry_name(0).len(), true, Some(reply_bytes::HANDLE))
}

/// Entries per page within `maxcount`, as granary fills them.
fn limit_page_entries() -> u32 {
    let room = READDIRPLUS_MAXCOUNT_BYTES as usize - READDIRPLUS3_RESOK_FIXED_SIZE - 4;
    u32::try_from(room / limit_entry_bytes())
        .unwrap_or(1)
        .max(1)
}

/// The limit's stand-in for a page: synthetic names after `cookie`, eof at `total`.
fn limit_page(cookie: u64, total: u32, per_page: u32) -> Page {
    let start = u32::try_from(cookie).unwrap_or(total).min(total);
    let end = start.saturating_add(per_page).min(total);
    Page {
        names: (start..end)
            .map(|i| Bytes::from(dir_entry_name(i)))
            .collect(),
        eof: end >= total,
        cookie: u64::from(end),
        cookieverf: [0; 8],
    }
}

fn dir_op(dir: &NfsFh3, name: &[u8]) -> DirOpArgs3 {
    DirOpArgs3 {
        dir: dir.clone(),
        name: Filename3(Bytes::copy_from_slice(name)),
    }
}

fn mode(bits: u32) -> Sattr3 {
    Sattr3 {
        mode: Some(bits),
        ..Sattr3::default()
    }
}
