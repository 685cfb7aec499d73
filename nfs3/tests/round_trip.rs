//! Every argument and result of every NFSv3 and MOUNT v3 procedure: encode then decode
//! gives the value back and consumes exactly the encoding; every strict prefix of an
//! encoding is a decode error, never a panic or a shorter value; random bytes never panic.

mod common;

use std::fmt::Debug;

use bytes::Bytes;
use common::*;
use granary_nfs3::{mount, nfs};
use proptest::prelude::*;
use xdr::{Decode, Decoder, Encode};

fn round_trips<T: Encode + Decode + PartialEq + Debug>(value: &T) -> Result<(), TestCaseError> {
    let bytes = value.to_xdr();
    prop_assert_eq!(bytes.len() % 4, 0);
    let mut d = Decoder::new(bytes);
    let back = T::decode(&mut d).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(&back, value);
    prop_assert_eq!(d.remaining(), 0);
    Ok(())
}

fn every_truncation_fails<T: Encode + Decode + Debug>(value: &T) -> Result<(), TestCaseError> {
    let bytes = value.to_xdr();
    for len in 0..bytes.len() {
        let decoded = T::from_xdr(bytes.slice(..len));
        prop_assert!(
            decoded.is_err(),
            "a {}-byte prefix of {} bytes decoded as {:?}",
            len,
            bytes.len(),
            decoded
        );
    }
    Ok(())
}

macro_rules! codec_tests {
    ($($name:ident: $strategy:expr;)*) => {
        proptest! {
            $(
                #[test]
                fn $name(value in $strategy) {
                    round_trips(&value)?;
                    every_truncation_fails(&value)?;
                }
            )*
        }
    };
}

codec_tests! {
    null_args: Just(nfs::NullArgs::default());
    null_res: Just(nfs::NullRes::default());
    getattr_args_codec: getattr_args();
    getattr_res_codec: getattr_res();
    setattr_args_codec: setattr_args();
    setattr_res_codec: setattr_res();
    lookup_args_codec: lookup_args();
    lookup_res_codec: lookup_res();
    access_args_codec: access_args();
    access_res_codec: access_res();
    readlink_args_codec: readlink_args();
    readlink_res_codec: readlink_res();
    read_args_codec: read_args();
    read_res_codec: read_res();
    write_args_codec: write_args();
    write_res_codec: write_res();
    create_args_codec: create_args();
    create_res_codec: create_res();
    mkdir_args_codec: mkdir_args();
    mkdir_res_codec: create_res().prop_map(|r| -> nfs::MkdirRes { r });
    symlink_args_codec: symlink_args();
    symlink_res_codec: create_res().prop_map(|r| -> nfs::SymlinkRes { r });
    mknod_args_codec: mknod_args();
    mknod_res_codec: create_res().prop_map(|r| -> nfs::MknodRes { r });
    remove_args_codec: remove_args();
    remove_res_codec: remove_res();
    rmdir_args_codec: remove_args().prop_map(|a| -> nfs::RmdirArgs { a });
    rmdir_res_codec: remove_res().prop_map(|r| -> nfs::RmdirRes { r });
    rename_args_codec: rename_args();
    rename_res_codec: rename_res();
    link_args_codec: link_args();
    link_res_codec: link_res();
    readdir_args_codec: readdir_args();
    readdir_res_codec: readdir_res();
    readdirplus_args_codec: readdirplus_args();
    readdirplus_res_codec: readdirplus_res();
    fsstat_args_codec: fsstat_args();
    fsstat_res_codec: fsstat_res();
    fsinfo_args_codec: fsinfo_args();
    fsinfo_res_codec: fsinfo_res();
    pathconf_args_codec: pathconf_args();
    pathconf_res_codec: pathconf_res();
    commit_args_codec: commit_args();
    commit_res_codec: commit_res();

    mount_null_args: Just(mount::NullArgs::default());
    mount_mnt_args: dirpath().prop_map(|p| -> mount::MntArgs { p });
    mount_mnt_res: mnt_res();
    mount_dump_res: mount_list().prop_map(|l| -> mount::DumpRes { l });
    mount_umnt_args: dirpath().prop_map(|p| -> mount::UmntArgs { p });
    mount_export_res: exports().prop_map(|e| -> mount::ExportRes { e });
}

/// Decodes `data` as every argument type: each must fail or succeed, never panic.
fn decode_all_args(data: &Bytes) {
    let _ = nfs::GetattrArgs::from_xdr(data.clone());
    let _ = nfs::SetattrArgs::from_xdr(data.clone());
    let _ = nfs::LookupArgs::from_xdr(data.clone());
    let _ = nfs::AccessArgs::from_xdr(data.clone());
    let _ = nfs::ReadlinkArgs::from_xdr(data.clone());
    let _ = nfs::ReadArgs::from_xdr(data.clone());
    let _ = nfs::WriteArgs::from_xdr(data.clone());
    let _ = nfs::CreateArgs::from_xdr(data.clone());
    let _ = nfs::MkdirArgs::from_xdr(data.clone());
    let _ = nfs::SymlinkArgs::from_xdr(data.clone());
    let _ = nfs::MknodArgs::from_xdr(data.clone());
    let _ = nfs::RemoveArgs::from_xdr(data.clone());
    let _ = nfs::RenameArgs::from_xdr(data.clone());
    let _ = nfs::LinkArgs::from_xdr(data.clone());
    let _ = nfs::ReaddirArgs::from_xdr(data.clone());
    let _ = nfs::ReaddirplusArgs::from_xdr(data.clone());
    let _ = nfs::FsstatArgs::from_xdr(data.clone());
    let _ = nfs::FsinfoArgs::from_xdr(data.clone());
    let _ = nfs::PathconfArgs::from_xdr(data.clone());
    let _ = nfs::CommitArgs::from_xdr(data.clone());
    let _ = mount::MntArgs::from_xdr(data.clone());
}

/// Decodes `data` as every result type (what granary's client does with server bytes).
fn decode_all_results(data: &Bytes) {
    let _ = nfs::GetattrRes::from_xdr(data.clone());
    let _ = nfs::SetattrRes::from_xdr(data.clone());
    let _ = nfs::LookupRes::from_xdr(data.clone());
    let _ = nfs::AccessRes::from_xdr(data.clone());
    let _ = nfs::ReadlinkRes::from_xdr(data.clone());
    let _ = nfs::ReadRes::from_xdr(data.clone());
    let _ = nfs::WriteRes::from_xdr(data.clone());
    let _ = nfs::CreateRes::from_xdr(data.clone());
    let _ = nfs::RemoveRes::from_xdr(data.clone());
    let _ = nfs::RenameRes::from_xdr(data.clone());
    let _ = nfs::LinkRes::from_xdr(data.clone());
    let _ = nfs::ReaddirRes::from_xdr(data.clone());
    let _ = nfs::ReaddirplusRes::from_xdr(data.clone());
    let _ = nfs::FsstatRes::from_xdr(data.clone());
    let _ = nfs::FsinfoRes::from_xdr(data.clone());
    let _ = nfs::PathconfRes::from_xdr(data.clone());
    let _ = nfs::CommitRes::from_xdr(data.clone());
    let _ = mount::MntRes::from_xdr(data.clone());
    let _ = mount::DumpRes::from_xdr(data.clone());
    let _ = mount::ExportRes::from_xdr(data.clone());
}

proptest! {
    #[test]
    fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..256)) {
        let data = Bytes::from(data);
        decode_all_args(&data);
        decode_all_results(&data);
    }

    /// Random words that are mostly small numbers reach deeper into unions and lists than
    /// random bytes do.
    #[test]
    fn random_small_words_never_panic(words in proptest::collection::vec(0..12u32, 0..96)) {
        let data: Vec<u8> = words.iter().flat_map(|w| w.to_be_bytes()).collect();
        let data = Bytes::from(data);
        decode_all_args(&data);
        decode_all_results(&data);
    }
}
