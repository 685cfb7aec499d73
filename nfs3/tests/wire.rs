//! Hand-built bytes from the RFC 1813 layouts, the wire limits, and the size helpers the
//! server uses to fill READDIR / READDIRPLUS replies.

mod common;

use bytes::Bytes;
use common::{entry, entryplus, fattr};
use granary_nfs3::limits::{
    FHSIZE3, MAX_AUTH_FLAVORS, MAX_DATA, MAX_EXPORT_GROUPS, MAX_NAME_WIRE, MAX_PATH_WIRE,
    MNTPATHLEN,
};
use granary_nfs3::mount::{self, DirPath, MntRes, MountProc, Mountstat3};
use granary_nfs3::nfs::*;
use proptest::prelude::*;
use xdr::{Decode, DecodeError, Encode, Encoder};

/// Big-endian words and bytes, written the way the RFC draws them.
struct Wire(Vec<u8>);

impl Wire {
    fn new() -> Self {
        Self(Vec::new())
    }
    fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn raw(mut self, b: &[u8]) -> Self {
        self.0.extend_from_slice(b);
        self
    }
    fn bytes(self) -> Bytes {
        Bytes::from(self.0)
    }
}

fn sample_fattr() -> Fattr3 {
    Fattr3 {
        ftype: Ftype3::Reg,
        mode: 0o644,
        nlink: 1,
        uid: 1000,
        gid: 100,
        size: 5,
        used: 4096,
        rdev: Specdata3::default(),
        fsid: 0x0102_0304_0506_0708,
        fileid: 42,
        atime: Nfstime3 {
            seconds: 1_700_000_000,
            nseconds: 1,
        },
        mtime: Nfstime3 {
            seconds: 1_700_000_000,
            nseconds: 2,
        },
        ctime: Nfstime3 {
            seconds: 1_700_000_000,
            nseconds: 3,
        },
    }
}

#[test]
fn getattr_reply_golden() {
    #[rustfmt::skip]
    let golden: &[u8] = &[
        0, 0, 0, 0,             // status: NFS3_OK
        0, 0, 0, 1,             // fattr3.type: NF3REG
        0, 0, 0x01, 0xa4,       // mode: 0644
        0, 0, 0, 1,             // nlink
        0, 0, 0x03, 0xe8,       // uid: 1000
        0, 0, 0, 0x64,          // gid: 100
        0, 0, 0, 0, 0, 0, 0, 5, // size
        0, 0, 0, 0, 0, 0, 0x10, 0, // used: 4096
        0, 0, 0, 0, 0, 0, 0, 0, // rdev: specdata1, specdata2
        1, 2, 3, 4, 5, 6, 7, 8, // fsid
        0, 0, 0, 0, 0, 0, 0, 42, // fileid
        0x65, 0x53, 0xf1, 0x00, 0, 0, 0, 1, // atime: 1700000000 s, 1 ns
        0x65, 0x53, 0xf1, 0x00, 0, 0, 0, 2, // mtime
        0x65, 0x53, 0xf1, 0x00, 0, 0, 0, 3, // ctime
    ];
    let res = GetattrRes::Ok(GetattrOk {
        obj_attributes: sample_fattr(),
    });
    assert_eq!(golden.len(), 4 + FATTR3_SIZE);
    assert_eq!(&res.to_xdr()[..], golden);
    assert_eq!(GetattrRes::from_xdr(Bytes::from_static(golden)), Ok(res));
}

#[test]
fn getattr_failure_is_the_status_alone() {
    let res = GetattrRes::Fail(Nfsstat3::Stale, Void);
    assert_eq!(&res.to_xdr()[..], &[0, 0, 0, 70]);
    assert_eq!(GetattrRes::from_xdr(res.to_xdr()), Ok(res));
}

#[test]
fn lookup_args_golden() {
    #[rustfmt::skip]
    let golden: &[u8] = &[
        0, 0, 0, 8,                         // dir: nfs_fh3 length
        0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 1, // dir: handle bytes
        0, 0, 0, 5,                         // name: length
        b'h', b'e', b'l', b'l', b'o', 0, 0, 0, // name + padding to 4 bytes
    ];
    let args = LookupArgs {
        what: DirOpArgs3 {
            dir: NfsFh3::new(&[0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 1][..]),
            name: Filename3::new("hello"),
        },
    };
    assert_eq!(&args.to_xdr()[..], golden);
    assert_eq!(LookupArgs::from_xdr(Bytes::from_static(golden)), Ok(args));
}

#[test]
fn readdir_reply_is_a_linked_list() {
    let golden = Wire::new()
        .u32(0) // NFS3_OK
        .u32(0) // dir_attributes: none
        .raw(b"verifier") // cookieverf
        .u32(1) // value_follows
        .u64(7) // fileid
        .u32(1)
        .raw(b"a\0\0\0") // name "a" + padding
        .u64(100) // cookie
        .u32(1) // value_follows
        .u64(8)
        .u32(2)
        .raw(b"bc\0\0")
        .u64(200)
        .u32(0) // no more entries
        .u32(1) // eof
        .bytes();
    let res = ReaddirRes::Ok(ReaddirOk {
        dir_attributes: PostOpAttr(None),
        cookieverf: *b"verifier",
        entries: vec![
            Entry3 {
                fileid: 7,
                name: Filename3::new("a"),
                cookie: 100,
            },
            Entry3 {
                fileid: 8,
                name: Filename3::new("bc"),
                cookie: 200,
            },
        ],
        eof: true,
    });
    assert_eq!(res.to_xdr(), golden);
    assert_eq!(ReaddirRes::from_xdr(golden), Ok(res));
}

#[test]
fn mnt_reply_golden() {
    let golden = Wire::new()
        .u32(0) // MNT3_OK
        .u32(4)
        .raw(&[9, 9, 9, 9]) // fhandle
        .u32(1)
        .u32(1) // auth_flavors: [AUTH_SYS]
        .bytes();
    let res = MntRes::Ok {
        fhandle: NfsFh3::new(&[9, 9, 9, 9][..]),
        auth_flavors: vec![1],
    };
    assert_eq!(res.to_xdr(), golden);
    assert_eq!(MntRes::from_xdr(golden), Ok(res));
    assert_eq!(
        MntRes::Fail(Mountstat3::Acces).to_xdr(),
        Wire::new().u32(13).bytes()
    );
}

// ---- Limits ----

fn too_long(what: &'static str, len: u32, max: u32) -> DecodeError {
    DecodeError::TooLong { what, len, max }
}

fn lookup_with_name_len(len: usize) -> Result<LookupArgs, DecodeError> {
    let mut e = Encoder::new();
    NfsFh3::new(&[1u8; 8][..]).encode(&mut e);
    e.opaque(&vec![b'x'; len]);
    LookupArgs::from_xdr(e.into_bytes())
}

#[test]
fn names_between_name_max_and_the_wire_limit_decode() {
    // 256..=1024 must reach the server, which answers NFS3ERR_NAMETOOLONG.
    for len in [0, 255, 256, 1000, MAX_NAME_WIRE as usize] {
        let args = lookup_with_name_len(len).expect("decodes");
        assert_eq!(args.what.name.0.len(), len);
    }
    assert_eq!(
        lookup_with_name_len(MAX_NAME_WIRE as usize + 1),
        Err(too_long("filename3", MAX_NAME_WIRE + 1, MAX_NAME_WIRE))
    );
}

#[test]
fn handles_up_to_fhsize3_decode_and_longer_ones_do_not() {
    for len in [0, 1, 32, FHSIZE3 as usize] {
        let fh = NfsFh3::new(vec![7u8; len]);
        let args = GetattrArgs { object: fh.clone() };
        assert_eq!(GetattrArgs::from_xdr(args.to_xdr()), Ok(args));
    }
    let long = GetattrArgs {
        object: NfsFh3::new(vec![7u8; FHSIZE3 as usize + 1]),
    };
    assert_eq!(
        GetattrArgs::from_xdr(long.to_xdr()),
        Err(too_long("nfs_fh3", FHSIZE3 + 1, FHSIZE3))
    );
}

#[test]
fn paths_are_bounded() {
    let ok = ReadlinkRes::Ok(ReadlinkOk {
        symlink_attributes: PostOpAttr(None),
        data: NfsPath3::new(vec![b'p'; MAX_PATH_WIRE as usize]),
    });
    assert_eq!(ReadlinkRes::from_xdr(ok.to_xdr()), Ok(ok));
    let long = DirPath::new(vec![b'/'; MNTPATHLEN as usize + 1]);
    assert_eq!(
        mount::MntArgs::from_xdr(long.to_xdr()),
        Err(too_long("dirpath", MNTPATHLEN + 1, MNTPATHLEN))
    );
}

fn write_with_data_len(len: u32) -> Bytes {
    // Only the length word of the data: the limit must be checked before the bytes.
    Wire::new()
        .u32(4)
        .raw(&[1, 2, 3, 4]) // file
        .u64(0) // offset
        .u32(len) // count
        .u32(2) // FILE_SYNC
        .u32(len)
        .bytes()
}

#[test]
fn write_data_is_bounded_by_max_data() {
    let mut full = write_with_data_len(MAX_DATA).to_vec();
    full.resize(full.len() + MAX_DATA as usize, 0xab);
    let args = WriteArgs::from_xdr(Bytes::from(full)).expect("1 MiB write decodes");
    assert_eq!(args.data.len(), MAX_DATA as usize);
    assert_eq!(args.stable, StableHow::FileSync);
    assert_eq!(
        WriteArgs::from_xdr(write_with_data_len(MAX_DATA + 1)),
        Err(too_long("WRITE3args.data", MAX_DATA + 1, MAX_DATA))
    );
}

#[test]
fn lists_are_bounded() {
    let groups = |n: u32| {
        let mut w = Wire::new().u32(1).u32(1).raw(b"/x\0\0"); // one export "/x"
        for _ in 0..n {
            w = w.u32(1).u32(0); // a group with an empty name
        }
        w.u32(0).u32(0).bytes() // end of groups, end of exports
    };
    let ok = mount::ExportRes::from_xdr(groups(MAX_EXPORT_GROUPS)).expect("at the limit");
    assert_eq!(ok.0[0].ex_groups.len(), MAX_EXPORT_GROUPS as usize);
    assert_eq!(
        mount::ExportRes::from_xdr(groups(MAX_EXPORT_GROUPS + 1)),
        Err(too_long("groups", MAX_EXPORT_GROUPS + 1, MAX_EXPORT_GROUPS))
    );

    let flavors = Wire::new().u32(0).u32(0).u32(MAX_AUTH_FLAVORS + 1).bytes();
    assert_eq!(
        MntRes::from_xdr(flavors),
        Err(too_long(
            "mountres3_ok.auth_flavors",
            MAX_AUTH_FLAVORS + 1,
            MAX_AUTH_FLAVORS
        ))
    );
}

fn bad<T>(what: &'static str, value: u32) -> Result<T, DecodeError> {
    Err(DecodeError::BadDiscriminant { what, value })
}

#[test]
fn unknown_discriminants_are_errors() {
    let status_3 = Wire::new().u32(3).bytes();
    assert_eq!(GetattrRes::from_xdr(status_3), bad("Nfsstat3", 3));
    let fh = Wire::new().u32(0);
    let name = |w: Wire| w.u32(1).raw(b"n\0\0\0");
    assert_eq!(
        CreateArgs::from_xdr(name(fh).u32(3).bytes()),
        bad("createmode3", 3)
    );
    assert_eq!(
        MknodArgs::from_xdr(name(Wire::new().u32(0)).u32(0).bytes()),
        bad("Ftype3", 0)
    );
    let sattr_bad_atime = Wire::new().u32(0).u32(0).u32(0).u32(0).u32(3).bytes();
    assert_eq!(Sattr3::from_xdr(sattr_bad_atime), bad("time_how", 3));
    assert_eq!(
        Sattr3::from_xdr(Wire::new().u32(2).bytes()),
        Err(DecodeError::BadBool(2))
    );
}

#[test]
fn zero_length_handle_decodes_for_the_server_to_reject() {
    let args = GetattrArgs::from_xdr(Wire::new().u32(0).bytes()).expect("decodes");
    assert!(args.object.0.is_empty());
}

#[cfg(debug_assertions)]
#[test]
#[should_panic(expected = "NFS3_OK")]
fn a_failure_with_nfs3_ok_is_refused() {
    let _ = GetattrRes::Fail(Nfsstat3::Ok, Void).to_xdr();
}

// ---- Procedure numbers ----

#[test]
fn procedure_numbers_and_names_agree() {
    for n in 0..22u32 {
        let proc = NfsProc::from_u32(n).expect("0..=21 are procedures");
        assert_eq!(proc as u32, n);
        assert_eq!(proc.name(), PROCEDURE_NAMES[n as usize]);
    }
    assert_eq!(NfsProc::from_u32(22), None);
    assert_eq!(NfsProc::Readdirplus.name(), "readdirplus");
    assert_eq!(MountProc::from_u32(5).map(MountProc::name), Some("export"));
    assert_eq!(MountProc::from_u32(6), None);
}

#[test]
fn every_status_has_its_rfc_value() {
    let values = [
        0, 1, 2, 5, 6, 13, 17, 18, 19, 20, 21, 22, 27, 28, 30, 31, 63, 66, 69, 70, 71, 10001,
        10002, 10003, 10004, 10005, 10006, 10007, 10008,
    ];
    let known: Vec<u32> = (0..=10_008)
        .filter_map(Nfsstat3::from_u32)
        .map(|s| s as u32)
        .collect();
    assert_eq!(known, values);
    assert_eq!(Nfsstat3::Jukebox as u32, 10008);
    assert_eq!(Nfsstat3::NameTooLong as u32, 63);
}

// ---- Encoded sizes ----

#[test]
fn fixed_sizes_match_encodings() {
    let attrs = PostOpAttr(Some(sample_fattr()));
    assert_eq!(sample_fattr().to_xdr().len(), FATTR3_SIZE);
    assert_eq!(attrs.to_xdr().len(), POST_OP_ATTR_MAX_SIZE);
    let wcc = WccData {
        before: PreOpAttr(Some(WccAttr::default())),
        after: attrs,
    };
    assert_eq!(wcc.to_xdr().len(), WCC_DATA_MAX_SIZE);
    let fh = PostOpFh3(Some(NfsFh3::new(vec![0u8; FHSIZE3 as usize])));
    assert_eq!(fh.to_xdr().len(), POST_OP_FH3_MAX_SIZE);
    let empty = ReaddirOk {
        dir_attributes: attrs,
        ..ReaddirOk::default()
    };
    assert_eq!(empty.to_xdr().len(), READDIR3_RESOK_FIXED_SIZE);
    let empty_plus = ReaddirplusOk {
        dir_attributes: attrs,
        ..ReaddirplusOk::default()
    };
    assert_eq!(empty_plus.to_xdr().len(), READDIRPLUS3_RESOK_FIXED_SIZE);
}

fn linked_size<T: Encode>(entry: &T) -> usize {
    let mut e = Encoder::new();
    e.bool(true); // value_follows
    entry.encode(&mut e);
    e.len()
}

proptest! {
    #[test]
    fn entry3_size_is_exact(entry in entry()) {
        prop_assert_eq!(linked_size(&entry), entry3_size(entry.name.0.len()));
    }

    #[test]
    fn entryplus3_size_is_exact(entry in entryplus()) {
        let size = entryplus3_size(
            entry.name.0.len(),
            entry.name_attributes.0.is_some(),
            entry.name_handle.0.as_ref().map(|fh| fh.0.len()),
        );
        prop_assert_eq!(linked_size(&entry), size);
    }

    #[test]
    fn readdir_reply_size_is_fixed_part_plus_entries(
        attrs in fattr(),
        entries in proptest::collection::vec(entry(), 0..8),
        plus in proptest::collection::vec(entryplus(), 0..8),
    ) {
        let dir_attributes = PostOpAttr(Some(attrs));
        let names: usize = entries.iter().map(|e| entry3_size(e.name.0.len())).sum();
        let ok = ReaddirOk { dir_attributes, entries, ..ReaddirOk::default() };
        prop_assert_eq!(ok.to_xdr().len(), READDIR3_RESOK_FIXED_SIZE + names);

        let sizes: usize = plus.iter().map(|e| entryplus3_size(
            e.name.0.len(),
            e.name_attributes.0.is_some(),
            e.name_handle.0.as_ref().map(|fh| fh.0.len()),
        )).sum();
        let ok = ReaddirplusOk { dir_attributes, entries: plus, ..ReaddirplusOk::default() };
        prop_assert_eq!(ok.to_xdr().len(), READDIRPLUS3_RESOK_FIXED_SIZE + sizes);
    }
}
