//! Every NFSv3 and MOUNT v3 argument decoder (and the RPC credential decoders): the first
//! byte picks the type, the rest is its XDR. Whatever decodes must encode back to bytes
//! that decode to the same value (the codec's round-trip promise), and nothing panics.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use nfs3::mount::DirPath;
use nfs3::nfs::*;
use rpc::msg::{AuthSys, OpaqueAuth};
use xdr::{Decode, Decoder, Encode};

fn round_trip<T: Decode + Encode + PartialEq + std::fmt::Debug>(data: &[u8]) {
    let mut d = Decoder::new(Bytes::copy_from_slice(data));
    let Ok(value) = T::decode(&mut d) else {
        return;
    };
    let again = T::decode(&mut Decoder::new(value.to_xdr())).expect("re-decode");
    assert_eq!(value, again);
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    match which % 24 {
        0 => round_trip::<GetattrArgs>(rest),
        1 => round_trip::<SetattrArgs>(rest),
        2 => round_trip::<LookupArgs>(rest),
        3 => round_trip::<AccessArgs>(rest),
        4 => round_trip::<ReadlinkArgs>(rest),
        5 => round_trip::<ReadArgs>(rest),
        6 => round_trip::<WriteArgs>(rest),
        7 => round_trip::<CreateArgs>(rest),
        8 => round_trip::<MkdirArgs>(rest),
        9 => round_trip::<SymlinkArgs>(rest),
        10 => round_trip::<MknodArgs>(rest),
        11 => round_trip::<RemoveArgs>(rest),
        12 => round_trip::<RenameArgs>(rest),
        13 => round_trip::<LinkArgs>(rest),
        14 => round_trip::<ReaddirArgs>(rest),
        15 => round_trip::<ReaddirplusArgs>(rest),
        16 => round_trip::<FsstatArgs>(rest),
        17 => round_trip::<FsinfoArgs>(rest),
        18 => round_trip::<PathconfArgs>(rest),
        19 => round_trip::<CommitArgs>(rest),
        20 => round_trip::<DirPath>(rest),
        21 => round_trip::<OpaqueAuth>(rest),
        22 => round_trip::<AuthSys>(rest),
        _ => {
            let _ = rpc::Auth::from_cred(&OpaqueAuth {
                flavor: 1,
                body: Bytes::copy_from_slice(rest),
            });
        }
    }
});
