//! MOUNT version 3 (RFC 1813 appendix I): how a client turns an export path into the root
//! file handle, and the informational DUMP and EXPORT lists.
//!
//! Naming follows [`crate::nfs`]: `MntArgs`, `MntRes`, ...; void parts are
//! [`Void`]. The file handle is the same [`NfsFh3`] that NFS uses (`fhandle3` has the
//! layout of `nfs_fh3`). Linked lists (`mountlist`, `exports`, `groups`) are `Vec`s,
//! bounded when decoded.

use xdr::{xdr_enum, xdr_struct, Decode, DecodeError, Decoder, Encode, Encoder};

use crate::limits::{
    MAX_AUTH_FLAVORS, MAX_EXPORTS, MAX_EXPORT_GROUPS, MAX_MOUNT_LIST, MNTNAMLEN, MNTPATHLEN,
};
pub use crate::nfs::{NfsFh3, Void};
use xdr::{bounded_opaque, decode_list, encode_list};

xdr_enum! {
    /// `mountstat3`: the status of MNT.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum Mountstat3 {
        /// `MNT3_OK`: the handle and flavors follow.
        Ok = 0,
        Perm = 1,
        NoEnt = 2,
        Io = 5,
        Acces = 13,
        NotDir = 20,
        Inval = 22,
        NameTooLong = 63,
        NotSupp = 10004,
        ServerFault = 10006,
    }
}

xdr_enum! {
    /// MOUNT v3 procedure numbers.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum MountProc {
        Null = 0,
        Mnt = 1,
        Dump = 2,
        Umnt = 3,
        Umntall = 4,
        Export = 5,
    }
}

/// Lower-case MOUNT procedure names for logs, indexed by procedure number.
pub const MOUNT_PROCEDURE_NAMES: [&str; 6] = ["null", "mnt", "dump", "umnt", "umntall", "export"];

const _: () = assert!(MOUNT_PROCEDURE_NAMES.len() == MountProc::Export as usize + 1);

impl MountProc {
    /// The procedure's name for logs.
    #[must_use]
    pub fn name(self) -> &'static str {
        MOUNT_PROCEDURE_NAMES[self as usize]
    }
}

bounded_opaque! {
    /// `dirpath`: an export path, at most [`MNTPATHLEN`] bytes.
    DirPath, "dirpath", MNTPATHLEN
}

bounded_opaque! {
    /// `name`: a host or group name, at most [`MNTNAMLEN`] bytes.
    MntName, "name", MNTNAMLEN
}

/// `mountres3`: the result of MNT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MntRes {
    /// `MNT3_OK` with `mountres3_ok`: the export's root handle and the RPC security
    /// flavors (e.g. 1 = `AUTH_SYS`) the client may use, most preferred first.
    Ok {
        fhandle: NfsFh3,
        auth_flavors: Vec<u32>,
    },
    /// Any other status, with no body. Never [`Mountstat3::Ok`].
    Fail(Mountstat3),
}

impl MntRes {
    /// The status on the wire.
    #[must_use]
    pub fn status(&self) -> Mountstat3 {
        match self {
            Self::Ok { .. } => Mountstat3::Ok,
            Self::Fail(status) => *status,
        }
    }
}

impl Encode for MntRes {
    fn encode(&self, e: &mut Encoder) {
        match self {
            Self::Ok {
                fhandle,
                auth_flavors,
            } => {
                Mountstat3::Ok.encode(e);
                fhandle.encode(e);
                let len = u32::try_from(auth_flavors.len()).expect("auth flavor list too long");
                e.u32(len);
                for flavor in auth_flavors {
                    e.u32(*flavor);
                }
            }
            Self::Fail(status) => {
                debug_assert_ne!(*status, Mountstat3::Ok, "a failed MNT with MNT3_OK");
                status.encode(e);
            }
        }
    }
}

impl Decode for MntRes {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        match Mountstat3::decode(d)? {
            Mountstat3::Ok => {
                let fhandle = NfsFh3::decode(d)?;
                let len = d.length("mountres3_ok.auth_flavors", MAX_AUTH_FLAVORS)?;
                let auth_flavors = (0..len).map(|_| d.u32()).collect::<Result<_, _>>()?;
                Ok(Self::Ok {
                    fhandle,
                    auth_flavors,
                })
            }
            status => Ok(Self::Fail(status)),
        }
    }
}

xdr_struct! {
    /// `mountbody` without its link: one host that has a path mounted.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct MountBody {
        pub ml_hostname: MntName,
        pub ml_directory: DirPath,
    }
}

/// `mountlist`: the DUMP result, at most [`MAX_MOUNT_LIST`] entries when decoded.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MountList(pub Vec<MountBody>);

impl Encode for MountList {
    fn encode(&self, e: &mut Encoder) {
        encode_list(&self.0, e);
    }
}

impl Decode for MountList {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        Ok(Self(decode_list(d, "mountlist", MAX_MOUNT_LIST)?))
    }
}

/// `exportnode` without its link: one export and the clients allowed to mount it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExportNode {
    pub ex_dir: DirPath,
    /// `ex_groups`: the `groups` linked list, at most [`MAX_EXPORT_GROUPS`] when decoded.
    pub ex_groups: Vec<MntName>,
}

impl Encode for ExportNode {
    fn encode(&self, e: &mut Encoder) {
        self.ex_dir.encode(e);
        encode_list(&self.ex_groups, e);
    }
}

impl Decode for ExportNode {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        Ok(Self {
            ex_dir: DirPath::decode(d)?,
            ex_groups: decode_list(d, "groups", MAX_EXPORT_GROUPS)?,
        })
    }
}

/// `exports`: the EXPORT result, at most [`MAX_EXPORTS`] entries when decoded.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Exports(pub Vec<ExportNode>);

impl Encode for Exports {
    fn encode(&self, e: &mut Encoder) {
        encode_list(&self.0, e);
    }
}

impl Decode for Exports {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        Ok(Self(decode_list(d, "exports", MAX_EXPORTS)?))
    }
}

/// Procedure 0.
pub type NullArgs = Void;
pub type NullRes = Void;
/// Procedure 1.
pub type MntArgs = DirPath;
/// Procedure 2.
pub type DumpArgs = Void;
pub type DumpRes = MountList;
/// Procedure 3.
pub type UmntArgs = DirPath;
pub type UmntRes = Void;
/// Procedure 4.
pub type UmntallArgs = Void;
pub type UmntallRes = Void;
/// Procedure 5.
pub type ExportArgs = Void;
pub type ExportRes = Exports;
