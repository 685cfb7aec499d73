//! The convenience layer: whole-file and whole-path operations built from the typed
//! procedures, for tests, the bench and `granary lab`.
//!
//! Every method returns the useful part of a successful result, and turns a non-OK status
//! into [`ClientError::Nfs`] (or [`ClientError::Mount`]). Where a name would clash with a
//! procedure method, the helper carries the suffix `_ok` (`getattr_ok`, `mkdir_ok`, ...).
//!
//! Promises beyond the procedures themselves:
//!
//! - `write_all` sends the data in chunks of the server's `wtmax` (or the client's I/O
//!   size), keeps up to [`PIPELINE_CHUNKS`] in flight, rewrites short writes, COMMITs after
//!   UNSTABLE writes and fails with [`ClientError::VerifierChanged`] if the write verifier
//!   changed anywhere between the first WRITE and the COMMIT;
//! - `read_all` reads to `eof` with pipelined chunks and checks every READ's `count`;
//! - the listing helpers follow cookies and the cookie verifier to `eof`, and stop with
//!   [`ClientError::Protocol`] when the server makes no progress or lists more than
//!   [`MAX_LIST_ENTRIES`] entries.

use std::collections::VecDeque;
use std::io;

use bytes::Bytes;
use nfs3::limits::MAX_DATA;
use nfs3::mount::MntRes;
use nfs3::nfs::{
    CommitArgs, CreateArgs, CreateHow3, CreateOk, DirOpArgs3, Entryplus3, Fattr3, Filename3,
    FsinfoArgs, FsinfoOk, Ftype3, GetattrArgs, LookupArgs, MkdirArgs, NfsFh3, NfsProc, Nfsstat3,
    ReadArgs, ReadOk, ReadRes, ReaddirArgs, ReaddirplusArgs, RemoveArgs, RenameArgs, Sattr3,
    StableHow, WriteArgs, WriteOk, WriteRes, Writeverf3,
};

use crate::conn::PendingReply;
use crate::error::{nfs_ok, ClientError};
use crate::limits::{
    MAX_LIST_ENTRIES, MAX_READ_ALL_BYTES, PIPELINE_CHUNKS, READDIRPLUS_DIRCOUNT_BYTES,
    READDIR_COUNT_BYTES,
};
use crate::nfs::{IoSizes, Nfs3Client};

/// One READDIR entry as `list_dir` returns it: name, fileid, cookie.
pub type DirEntry = (Bytes, u64, u64);

impl Nfs3Client {
    /// MNT `path` and return the export's root handle.
    ///
    /// # Errors
    /// [`ClientError::Mount`] for a MOUNT status other than `MNT3_OK`.
    pub async fn mount(&self, path: impl AsRef<[u8]>) -> Result<NfsFh3, ClientError> {
        match self.mnt(path).await? {
            MntRes::Ok { fhandle, .. } => Ok(fhandle),
            MntRes::Fail(status) => Err(ClientError::Mount(status)),
        }
    }

    /// GETATTR: the attributes of `fh`.
    ///
    /// # Errors
    /// [`ClientError::Nfs`] for a non-OK status.
    pub async fn getattr_ok(&self, fh: &NfsFh3) -> Result<Fattr3, ClientError> {
        let args = GetattrArgs { object: fh.clone() };
        Ok(nfs_ok(self.getattr(&args).await?)?.obj_attributes)
    }

    /// LOOKUP one `name` in `dir`: its handle and attributes (from a GETATTR if the server
    /// sent none).
    ///
    /// # Errors
    /// [`ClientError::Nfs`] for a non-OK status.
    pub async fn lookup_ok(
        &self,
        dir: &NfsFh3,
        name: impl AsRef<[u8]>,
    ) -> Result<(NfsFh3, Fattr3), ClientError> {
        let args = LookupArgs {
            what: dir_op(dir, name.as_ref()),
        };
        let ok = nfs_ok(self.lookup(&args).await?)?;
        let attrs = match ok.obj_attributes.0 {
            Some(attrs) => attrs,
            None => self.getattr_ok(&ok.object).await?,
        };
        Ok((ok.object, attrs))
    }

    /// LOOKUP each `/`-separated component of `path` from `root` (empty components are
    /// skipped; an empty path is `root` itself).
    ///
    /// # Errors
    /// [`ClientError::Nfs`] with the status of the first failing LOOKUP.
    pub async fn lookup_path(
        &self,
        root: &NfsFh3,
        path: impl AsRef<[u8]>,
    ) -> Result<(NfsFh3, Fattr3), ClientError> {
        let mut found = None;
        let mut fh = root.clone();
        for name in components(path.as_ref()) {
            let (next, attrs) = self.lookup_ok(&fh, name).await?;
            fh = next;
            found = Some(attrs);
        }
        match found {
            Some(attrs) => Ok((fh, attrs)),
            None => Ok((fh.clone(), self.getattr_ok(&fh).await?)),
        }
    }

    /// CREATE `name` in `dir` as UNCHECKED (an existing file is kept, and truncated only
    /// if a size were given) with permission bits `mode`.
    ///
    /// # Errors
    /// [`ClientError::Nfs`] for a non-OK status.
    pub async fn create_file(
        &self,
        dir: &NfsFh3,
        name: impl AsRef<[u8]>,
        mode: u32,
    ) -> Result<NfsFh3, ClientError> {
        let how = CreateHow3::Unchecked(mode_only(mode));
        self.create_with(dir, name, how).await
    }

    /// CREATE `name` in `dir` as GUARDED: fails with `NFS3ERR_EXIST` if it exists.
    ///
    /// # Errors
    /// [`ClientError::Nfs`] for a non-OK status.
    pub async fn create_file_guarded(
        &self,
        dir: &NfsFh3,
        name: impl AsRef<[u8]>,
        mode: u32,
    ) -> Result<NfsFh3, ClientError> {
        let how = CreateHow3::Guarded(mode_only(mode));
        self.create_with(dir, name, how).await
    }

    /// CREATE `name` in `dir` with any `how` (EXCLUSIVE included); the new handle, from a
    /// LOOKUP if the server returned none.
    ///
    /// # Errors
    /// [`ClientError::Nfs`] for a non-OK status.
    pub async fn create_with(
        &self,
        dir: &NfsFh3,
        name: impl AsRef<[u8]>,
        how: CreateHow3,
    ) -> Result<NfsFh3, ClientError> {
        let name = name.as_ref();
        let args = CreateArgs {
            where_: dir_op(dir, name),
            how,
        };
        let ok = nfs_ok(self.create(&args).await?)?;
        self.created(dir, name, ok).await
    }

    /// MKDIR `name` in `dir` with permission bits `mode`.
    ///
    /// # Errors
    /// [`ClientError::Nfs`] for a non-OK status (`NFS3ERR_EXIST` if it exists).
    pub async fn mkdir_ok(
        &self,
        dir: &NfsFh3,
        name: impl AsRef<[u8]>,
        mode: u32,
    ) -> Result<NfsFh3, ClientError> {
        let name = name.as_ref();
        let args = MkdirArgs {
            where_: dir_op(dir, name),
            attributes: mode_only(mode),
        };
        let ok = nfs_ok(self.mkdir(&args).await?)?;
        self.created(dir, name, ok).await
    }

    /// Like `mkdir -p`: every missing directory of `path` under `root` is made with
    /// `mode`; existing ones are kept. Returns the handle of the last one.
    ///
    /// # Errors
    /// [`ClientError::Nfs`]: `NFS3ERR_EXIST` if a component exists and is not a
    /// directory, or the status of a failing LOOKUP or MKDIR.
    pub async fn mkdir_p(
        &self,
        root: &NfsFh3,
        path: impl AsRef<[u8]>,
        mode: u32,
    ) -> Result<NfsFh3, ClientError> {
        let mut fh = root.clone();
        for name in components(path.as_ref()) {
            let (next, attrs) = match self.lookup_ok(&fh, name).await {
                Err(ClientError::Nfs(Nfsstat3::NoEnt)) => {
                    match self.mkdir_ok(&fh, name, mode).await {
                        Ok(new_dir) => (new_dir, None),
                        // Someone else made it in between.
                        Err(ClientError::Nfs(Nfsstat3::Exist)) => {
                            let (found, attrs) = self.lookup_ok(&fh, name).await?;
                            (found, Some(attrs))
                        }
                        Err(e) => return Err(e),
                    }
                }
                Ok((found, attrs)) => (found, Some(attrs)),
                Err(e) => return Err(e),
            };
            if attrs.is_some_and(|a| a.ftype != Ftype3::Dir) {
                return Err(ClientError::Nfs(Nfsstat3::Exist));
            }
            fh = next;
        }
        Ok(fh)
    }

    /// REMOVE `name` from `dir`.
    ///
    /// # Errors
    /// [`ClientError::Nfs`] for a non-OK status.
    pub async fn remove_file(
        &self,
        dir: &NfsFh3,
        name: impl AsRef<[u8]>,
    ) -> Result<(), ClientError> {
        let args = RemoveArgs {
            object: dir_op(dir, name.as_ref()),
        };
        nfs_ok(self.remove(&args).await?).map(drop)
    }

    /// RMDIR `name` from `dir`.
    ///
    /// # Errors
    /// [`ClientError::Nfs`] for a non-OK status.
    pub async fn rmdir_ok(&self, dir: &NfsFh3, name: impl AsRef<[u8]>) -> Result<(), ClientError> {
        let args = RemoveArgs {
            object: dir_op(dir, name.as_ref()),
        };
        nfs_ok(self.rmdir(&args).await?).map(drop)
    }

    /// RENAME `from_name` in `from_dir` to `to_name` in `to_dir`.
    ///
    /// # Errors
    /// [`ClientError::Nfs`] for a non-OK status.
    pub async fn rename_ok(
        &self,
        from_dir: &NfsFh3,
        from_name: impl AsRef<[u8]>,
        to_dir: &NfsFh3,
        to_name: impl AsRef<[u8]>,
    ) -> Result<(), ClientError> {
        let args = RenameArgs {
            from: dir_op(from_dir, from_name.as_ref()),
            to: dir_op(to_dir, to_name.as_ref()),
        };
        nfs_ok(self.rename(&args).await?).map(drop)
    }

    /// FSINFO on `fh`.
    ///
    /// # Errors
    /// [`ClientError::Nfs`] for a non-OK status.
    pub async fn fsinfo_ok(&self, fh: &NfsFh3) -> Result<FsinfoOk, ClientError> {
        let args = FsinfoArgs { fsroot: fh.clone() };
        nfs_ok(self.fsinfo(&args).await?)
    }

    /// READ and WRITE chunk sizes: the client's I/O size, or `rtmax` / `wtmax` from the
    /// first FSINFO this client (or a clone) made, capped at [`MAX_DATA`].
    async fn io_sizes(&self, fh: &NfsFh3) -> Result<IoSizes, ClientError> {
        if let Some(size) = self.io_size_bytes {
            return Ok(IoSizes {
                rtmax: size,
                wtmax: size,
            });
        }
        let sizes = self.fsinfo_sizes.get_or_try_init(|| async {
            let ok = self.fsinfo_ok(fh).await?;
            Ok::<_, ClientError>(IoSizes {
                rtmax: chunk_limit("rtmax", ok.rtmax)?,
                wtmax: chunk_limit("wtmax", ok.wtmax)?,
            })
        });
        Ok(*sizes.await?)
    }

    /// Writes all of `data` at `offset` in chunks of the server's `wtmax` (see the module
    /// docs), committing if `stable` is UNSTABLE.
    ///
    /// # Errors
    /// [`ClientError::Nfs`] for a non-OK WRITE or COMMIT, [`ClientError::VerifierChanged`],
    /// [`ClientError::Protocol`] if the server commits less than asked or makes no
    /// progress.
    pub async fn write_all(
        &self,
        fh: &NfsFh3,
        offset: u64,
        data: &[u8],
        stable: StableHow,
    ) -> Result<(), ClientError> {
        let chunk_bytes = self.io_sizes(fh).await?.wtmax;
        self.write_all_chunked(fh, offset, data, stable, chunk_bytes)
            .await
    }

    /// [`Nfs3Client::write_all`] with chunks of `chunk_bytes`.
    ///
    /// # Errors
    /// As [`Nfs3Client::write_all`]; [`ClientError::Io`] if the range passes 2^64.
    ///
    /// # Panics
    /// If `chunk_bytes` is 0.
    pub async fn write_all_chunked(
        &self,
        fh: &NfsFh3,
        offset: u64,
        data: &[u8],
        stable: StableHow,
        chunk_bytes: u32,
    ) -> Result<(), ClientError> {
        assert!(chunk_bytes > 0, "a WRITE chunk must hold at least one byte");
        let len = data.len() as u64;
        if offset.checked_add(len).is_none() {
            let msg = "write range passes 2^64";
            return Err(io::Error::new(io::ErrorKind::InvalidInput, msg).into());
        }
        let data = Bytes::copy_from_slice(data);
        let mut tally = WriteTally::new(stable);
        let mut window: VecDeque<InFlightWrite> = VecDeque::new();
        let mut short: Vec<(u64, Bytes)> = Vec::new();
        for start in (0..data.len()).step_by(chunk_bytes as usize) {
            if window.len() == PIPELINE_CHUNKS {
                if let Some(write) = window.pop_front() {
                    tally.finish(write, &mut short).await?;
                }
            }
            let end = data.len().min(start + chunk_bytes as usize);
            let piece = data.slice(start..end);
            let at = offset + start as u64;
            let reply = self
                .send_nfs(NfsProc::Write, &write_args(fh, at, piece.clone(), stable))
                .await?;
            window.push_back(InFlightWrite { at, piece, reply });
        }
        while let Some(write) = window.pop_front() {
            tally.finish(write, &mut short).await?;
        }
        for (at, rest) in short {
            self.write_rest(fh, at, rest, &mut tally).await?;
        }
        if tally.needs_commit {
            self.commit_checked(fh, offset, len, &tally).await?;
        }
        Ok(())
    }

    /// Writes what a short WRITE left, one WRITE at a time.
    async fn write_rest(
        &self,
        fh: &NfsFh3,
        mut at: u64,
        mut rest: Bytes,
        tally: &mut WriteTally,
    ) -> Result<(), ClientError> {
        while !rest.is_empty() {
            let args = write_args(fh, at, rest.clone(), tally.stable);
            let ok = nfs_ok(self.write(&args).await?)?;
            let written = tally.check(rest.len(), &ok)?;
            if written == 0 {
                return Err(ClientError::Protocol(format!(
                    "WRITE at offset {at} wrote nothing"
                )));
            }
            at += written as u64;
            rest = rest.slice(written..);
        }
        Ok(())
    }

    /// COMMITs what `write_all` wrote and checks the verifier is the one of the WRITEs.
    async fn commit_checked(
        &self,
        fh: &NfsFh3,
        offset: u64,
        len: u64,
        tally: &WriteTally,
    ) -> Result<(), ClientError> {
        let args = CommitArgs {
            file: fh.clone(),
            offset,
            // 0 asks for everything to the end of the file.
            count: u32::try_from(len).unwrap_or(0),
        };
        let ok = nfs_ok(self.commit(&args).await?)?;
        match tally.verf {
            Some(before) if before != ok.verf => Err(ClientError::VerifierChanged {
                before,
                after: ok.verf,
            }),
            _ => Ok(()),
        }
    }

    /// Reads `fh` from offset 0 to `eof`, in chunks of the server's `rtmax`.
    ///
    /// # Errors
    /// [`ClientError::Nfs`] for a non-OK GETATTR or READ; [`ClientError::Protocol`] if a
    /// READ's `count` disagrees with its data, or the file passes
    /// [`MAX_READ_ALL_BYTES`] without `eof`.
    pub async fn read_all(&self, fh: &NfsFh3) -> Result<Vec<u8>, ClientError> {
        let chunk_bytes = self.io_sizes(fh).await?.rtmax;
        self.read_all_chunked(fh, chunk_bytes).await
    }

    /// [`Nfs3Client::read_all`] with chunks of `chunk_bytes`.
    ///
    /// # Errors
    /// As [`Nfs3Client::read_all`].
    ///
    /// # Panics
    /// If `chunk_bytes` is 0.
    pub async fn read_all_chunked(
        &self,
        fh: &NfsFh3,
        chunk_bytes: u32,
    ) -> Result<Vec<u8>, ClientError> {
        assert!(chunk_bytes > 0, "a READ chunk must hold at least one byte");
        // The size only plans the pipelined part; the file may grow or shrink meanwhile.
        let size_bytes = self.getattr_ok(fh).await?.size;
        let reserve = size_bytes.min(u64::from(MAX_DATA) * PIPELINE_CHUNKS as u64);
        let mut out = Vec::with_capacity(usize::try_from(reserve).unwrap_or(0));
        if !self
            .read_pipelined(fh, size_bytes, chunk_bytes, &mut out)
            .await?
        {
            self.read_to_eof(fh, chunk_bytes, &mut out).await?;
        }
        Ok(out)
    }

    /// Reads `[0, size_bytes)` with up to [`PIPELINE_CHUNKS`] READs in flight, appending
    /// to `out`. Returns whether `eof` was seen; stops early at a short READ.
    async fn read_pipelined(
        &self,
        fh: &NfsFh3,
        size_bytes: u64,
        chunk_bytes: u32,
        out: &mut Vec<u8>,
    ) -> Result<bool, ClientError> {
        let mut window: VecDeque<PendingReply> = VecDeque::new();
        let mut next_offset = 0u64;
        loop {
            while window.len() < PIPELINE_CHUNKS && next_offset < size_bytes {
                let args = read_args(fh, next_offset, chunk_bytes);
                window.push_back(self.send_nfs(NfsProc::Read, &args).await?);
                next_offset = next_offset.saturating_add(u64::from(chunk_bytes));
            }
            let Some(reply) = window.pop_front() else {
                return Ok(false);
            };
            let ok = nfs_ok(reply.wait_decode::<ReadRes>().await?)?;
            append_read(out, &ok, chunk_bytes)?;
            if ok.eof {
                return Ok(true);
            }
            if ok.data.len() < chunk_bytes as usize {
                // The chunks still in flight start at the wrong offsets; drop them.
                return Ok(false);
            }
        }
    }

    /// Reads from `out.len()` to `eof`, one READ at a time.
    async fn read_to_eof(
        &self,
        fh: &NfsFh3,
        chunk_bytes: u32,
        out: &mut Vec<u8>,
    ) -> Result<(), ClientError> {
        loop {
            let offset = out.len() as u64;
            let ok = nfs_ok(self.read(&read_args(fh, offset, chunk_bytes)).await?)?;
            append_read(out, &ok, chunk_bytes)?;
            if ok.eof {
                return Ok(());
            }
            if ok.data.is_empty() {
                return Err(ClientError::Protocol(format!(
                    "READ at offset {offset} returned no data and no eof"
                )));
            }
        }
    }

    /// Every entry of `dir` as (name, fileid, cookie), by READDIR from cookie 0 to `eof`,
    /// `.` and `..` included when the server lists them.
    ///
    /// # Errors
    /// [`ClientError::Nfs`] for a non-OK READDIR; [`ClientError::Protocol`] if a page
    /// without `eof` is empty or the listing passes [`MAX_LIST_ENTRIES`].
    pub async fn list_dir(&self, dir: &NfsFh3) -> Result<Vec<DirEntry>, ClientError> {
        let mut out = Vec::new();
        let mut args = ReaddirArgs {
            dir: dir.clone(),
            cookie: 0,
            cookieverf: [0; 8],
            count: READDIR_COUNT_BYTES,
        };
        loop {
            let ok = nfs_ok(self.readdir(&args).await?)?;
            let last = ok.entries.last().map(|e| e.cookie);
            out.extend(
                ok.entries
                    .into_iter()
                    .map(|e| (e.name.0, e.fileid, e.cookie)),
            );
            if ok.eof {
                return Ok(out);
            }
            args.cookie = next_cookie("READDIR", last, out.len())?;
            args.cookieverf = ok.cookieverf;
        }
    }

    /// Every entry of `dir` with attributes and handles, by READDIRPLUS from cookie 0 to
    /// `eof`.
    ///
    /// # Errors
    /// As [`Nfs3Client::list_dir`].
    pub async fn list_dir_plus(&self, dir: &NfsFh3) -> Result<Vec<Entryplus3>, ClientError> {
        let mut out = Vec::new();
        let mut args = ReaddirplusArgs {
            dir: dir.clone(),
            cookie: 0,
            cookieverf: [0; 8],
            dircount: READDIRPLUS_DIRCOUNT_BYTES,
            maxcount: READDIR_COUNT_BYTES,
        };
        loop {
            let ok = nfs_ok(self.readdirplus(&args).await?)?;
            let last = ok.entries.last().map(|e| e.cookie);
            out.extend(ok.entries);
            if ok.eof {
                return Ok(out);
            }
            args.cookie = next_cookie("READDIRPLUS", last, out.len())?;
            args.cookieverf = ok.cookieverf;
        }
    }

    /// The handle of an object CREATE, MKDIR, SYMLINK or MKNOD just made.
    async fn created(
        &self,
        dir: &NfsFh3,
        name: &[u8],
        ok: CreateOk,
    ) -> Result<NfsFh3, ClientError> {
        match ok.obj.0 {
            Some(fh) => Ok(fh),
            None => Ok(self.lookup_ok(dir, name).await?.0),
        }
    }
}

/// A WRITE sent by `write_all` and not yet answered.
struct InFlightWrite {
    at: u64,
    piece: Bytes,
    reply: PendingReply,
}

/// What `write_all` learned from the WRITE replies so far.
struct WriteTally {
    stable: StableHow,
    /// The verifier of the first reply; every later one must match.
    verf: Option<Writeverf3>,
    /// Some reply said UNSTABLE, so a COMMIT must follow.
    needs_commit: bool,
}

impl WriteTally {
    fn new(stable: StableHow) -> Self {
        Self {
            stable,
            verf: None,
            needs_commit: false,
        }
    }

    /// Waits for one pipelined WRITE; a short write leaves its rest in `short`.
    async fn finish(
        &mut self,
        write: InFlightWrite,
        short: &mut Vec<(u64, Bytes)>,
    ) -> Result<(), ClientError> {
        let ok = nfs_ok(write.reply.wait_decode::<WriteRes>().await?)?;
        let written = self.check(write.piece.len(), &ok)?;
        if written < write.piece.len() {
            short.push((write.at + written as u64, write.piece.slice(written..)));
        }
        Ok(())
    }

    /// Checks one WRITE reply for `sent` bytes and returns how many were written.
    fn check(&mut self, sent: usize, ok: &WriteOk) -> Result<usize, ClientError> {
        let written = ok.count as usize;
        if written > sent {
            return Err(ClientError::Protocol(format!(
                "WRITE of {sent} bytes claims {written} written"
            )));
        }
        if (ok.committed as u32) < (self.stable as u32) {
            return Err(ClientError::Protocol(format!(
                "WRITE asked for {:?} but the server committed {:?}",
                self.stable, ok.committed
            )));
        }
        self.needs_commit |= ok.committed == StableHow::Unstable;
        match self.verf {
            None => self.verf = Some(ok.verf),
            Some(before) if before != ok.verf => {
                return Err(ClientError::VerifierChanged {
                    before,
                    after: ok.verf,
                })
            }
            Some(_) => {}
        }
        Ok(written)
    }
}

/// Appends one READ's data to `out`, checking it against what was asked and the limit.
fn append_read(out: &mut Vec<u8>, ok: &ReadOk, requested: u32) -> Result<(), ClientError> {
    let got = ok.data.len();
    if got != ok.count as usize || got > requested as usize {
        return Err(ClientError::Protocol(format!(
            "READ of {requested} bytes returned count {} with {got} bytes of data",
            ok.count
        )));
    }
    if (out.len() + got) as u64 > MAX_READ_ALL_BYTES {
        return Err(ClientError::Protocol(format!(
            "file passes {MAX_READ_ALL_BYTES} bytes without eof"
        )));
    }
    out.extend_from_slice(&ok.data);
    Ok(())
}

/// The cookie to continue a listing after a page without `eof`.
fn next_cookie(proc: &str, last: Option<u64>, listed: usize) -> Result<u64, ClientError> {
    if listed > MAX_LIST_ENTRIES {
        return Err(ClientError::Protocol(format!(
            "{proc} listed more than {MAX_LIST_ENTRIES} entries without eof"
        )));
    }
    last.ok_or_else(|| ClientError::Protocol(format!("{proc} page with no entries and no eof")))
}

/// A chunk size from FSINFO, capped at what one READ or WRITE may carry.
fn chunk_limit(what: &str, advertised: u32) -> Result<u32, ClientError> {
    if advertised == 0 {
        return Err(ClientError::Protocol(format!("FSINFO {what} is 0")));
    }
    Ok(advertised.min(MAX_DATA))
}

fn components(path: &[u8]) -> impl Iterator<Item = &[u8]> {
    path.split(|b| *b == b'/').filter(|c| !c.is_empty())
}

fn dir_op(dir: &NfsFh3, name: &[u8]) -> DirOpArgs3 {
    DirOpArgs3 {
        dir: dir.clone(),
        name: Filename3(Bytes::copy_from_slice(name)),
    }
}

fn mode_only(mode: u32) -> Sattr3 {
    Sattr3 {
        mode: Some(mode),
        ..Sattr3::default()
    }
}

fn read_args(fh: &NfsFh3, offset: u64, count: u32) -> ReadArgs {
    ReadArgs {
        file: fh.clone(),
        offset,
        count,
    }
}

fn write_args(fh: &NfsFh3, offset: u64, data: Bytes, stable: StableHow) -> WriteArgs {
    WriteArgs {
        file: fh.clone(),
        offset,
        // Chunks are at most a u32 `chunk_bytes` long.
        count: u32::try_from(data.len()).unwrap_or(u32::MAX),
        stable,
        data,
    }
}
