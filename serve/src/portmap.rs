//! Registration with a local portmapper (rpcbind, program 100000 version 2) so clients
//! that ask it for NFS and MOUNT find granary's port. Optional: without a portmapper the
//! server serves anyway and says so.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use bytes::Bytes;
use rpc::msg::{decode_reply_header, AcceptStat, CallHeader, OpaqueAuth, ReplyStatus};
use xdr::{Decoder, Encoder};

const PMAP_PROGRAM: u32 = 100_000;
const PMAP_VERSION: u32 = 2;
const PMAPPROC_SET: u32 = 1;
const PMAPPROC_UNSET: u32 = 2;

/// The transport a program is registered for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Tcp,
    Udp,
}

impl Transport {
    /// The protocol number rpcbind's version 2 takes (IPPROTO_TCP, IPPROTO_UDP).
    fn protocol(self) -> u32 {
        match self {
            Self::Tcp => 6,
            Self::Udp => 17,
        }
    }
}

/// A program, its version, and the transport it is served over.
pub type Registration = (u32, u32, Transport);
const PORTMAP_ADDR: ([u8; 4], u16) = ([127, 0, 0, 1], 111);
const TIMEOUT: Duration = Duration::from_millis(500);

/// Why a registration did not happen.
#[derive(Debug, thiserror::Error)]
pub enum PortmapError {
    #[error("no portmapper on 127.0.0.1:111 ({0})")]
    Absent(std::io::Error),
    #[error("portmapper I/O failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("portmapper sent an unreadable reply")]
    BadReply,
    #[error("portmapper refused the request")]
    Refused,
}

/// Registers each (program, version, transport) on `port`, replacing older
/// registrations, and returns those the portmapper took. One it refuses (another service of this host holds
/// it and the portmapper lets only its owner remove it: rpc.statd's NSM, the kernel's
/// lockd) is logged, and the others are still registered.
///
/// # Errors
/// When no portmapper runs or the exchange fails.
pub fn register(offered: &[Registration], port: u16) -> Result<Vec<Registration>, PortmapError> {
    let mut conn = connect()?;
    let mut taken = Vec::new();
    for &(program, version, transport) in offered {
        // UNSET removes the program's registrations on every transport: once per
        // program and version.
        if !taken.iter().any(|&(p, v, _)| (p, v) == (program, version)) {
            call(&mut conn, PMAPPROC_UNSET, (program, version, transport), 0)?;
        }
        if call(&mut conn, PMAPPROC_SET, (program, version, transport), port)? {
            taken.push((program, version, transport));
        } else {
            tracing::warn!(
                program,
                version,
                ?transport,
                "the portmapper refused to register this program: another service of this \
                 host holds it (rpc.statd holds 100024, the kernel's lockd 100021; stop it \
                 to let clients reach granary's); the other programs are registered"
            );
        }
    }
    if taken.is_empty() {
        return Err(PortmapError::Refused);
    }
    Ok(taken)
}

/// Removes the registrations made by [`register`].
///
/// # Errors
/// When the portmapper is gone or refuses.
pub fn unregister(offered: &[Registration]) -> Result<(), PortmapError> {
    let mut conn = connect()?;
    // UNSET removes a program version's registrations on every transport: once each.
    for (i, &registration @ (program, version, _)) in offered.iter().enumerate() {
        if !offered[..i]
            .iter()
            .any(|&(p, v, _)| (p, v) == (program, version))
        {
            call(&mut conn, PMAPPROC_UNSET, registration, 0)?;
        }
    }
    Ok(())
}

fn connect() -> Result<TcpStream, PortmapError> {
    let addr = SocketAddr::from(PORTMAP_ADDR);
    let conn = TcpStream::connect_timeout(&addr, TIMEOUT).map_err(PortmapError::Absent)?;
    conn.set_read_timeout(Some(TIMEOUT))?;
    conn.set_write_timeout(Some(TIMEOUT))?;
    Ok(conn)
}

fn call(
    conn: &mut TcpStream,
    procedure: u32,
    (program, version, transport): Registration,
    port: u16,
) -> Result<bool, PortmapError> {
    let mut e = Encoder::from_buf(rpc::record::start_record(96));
    let header = CallHeader {
        xid: rand::random(),
        program: PMAP_PROGRAM,
        version: PMAP_VERSION,
        procedure,
        cred: OpaqueAuth::default(),
        verf: OpaqueAuth::default(),
    };
    header.encode(&mut e);
    for v in [program, version, transport.protocol(), u32::from(port)] {
        e.u32(v);
    }
    conn.write_all(&rpc::record::seal(e.into_inner()))?;
    let mut mark = [0u8; 4];
    conn.read_exact(&mut mark)?;
    let len = (u32::from_be_bytes(mark) & !rpc::record::LAST_FRAGMENT) as usize;
    if len > 1024 {
        return Err(PortmapError::BadReply);
    }
    let mut body = vec![0u8; len];
    conn.read_exact(&mut body)?;
    let mut d = Decoder::new(Bytes::from(body));
    match decode_reply_header(&mut d) {
        Ok((_, ReplyStatus::Accepted(AcceptStat::Success))) => {
            d.bool().map_err(|_| PortmapError::BadReply)
        }
        Ok(_) => Err(PortmapError::Refused),
        Err(_) => Err(PortmapError::BadReply),
    }
}
