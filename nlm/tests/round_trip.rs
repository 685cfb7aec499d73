//! Every argument and result of every NLM v4 and NSM v1 procedure: encode then decode
//! gives the value back and consumes exactly the encoding; every strict prefix of an
//! encoding is a decode error; random bytes never panic; over-long items are refused.

use std::fmt::Debug;

use bytes::Bytes;
use granary_nlm::limits::{LM_MAXSTRLEN, MAXNETOBJ_SZ, SM_MAXSTRLEN};
use granary_nlm::nlm4::*;
use granary_nlm::nsm::{self, Mon, MonId, MyId, SmName, SmRes, StatChge, StatRes, Status};
use proptest::collection::vec;
use proptest::prelude::*;
use xdr::{Decode, DecodeError, Decoder, Encode, Encoder};

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

fn bytes(max_len: usize) -> impl Strategy<Value = Bytes> {
    vec(any::<u8>(), 0..=max_len).prop_map(Bytes::from)
}

fn netobj() -> impl Strategy<Value = Netobj> {
    bytes(40).prop_map(Netobj)
}

fn stats() -> impl Strategy<Value = Stats> {
    (0..=9u32).prop_map(|v| Stats::from_u32(v).expect("0..=9 are nlm4_stats"))
}

fn lock() -> impl Strategy<Value = Lock> {
    (
        bytes(20),
        netobj(),
        netobj(),
        any::<i32>(),
        any::<u64>(),
        any::<u64>(),
    )
        .prop_map(|(name, fh, oh, svid, l_offset, l_len)| Lock {
            caller_name: CallerName(name),
            fh,
            oh,
            svid,
            l_offset,
            l_len,
        })
}

fn holder() -> impl Strategy<Value = Holder> {
    (
        any::<bool>(),
        any::<i32>(),
        netobj(),
        any::<u64>(),
        any::<u64>(),
    )
        .prop_map(|(exclusive, svid, oh, l_offset, l_len)| Holder {
            exclusive,
            svid,
            oh,
            l_offset,
            l_len,
        })
}

fn test_reply() -> impl Strategy<Value = TestReply> {
    prop_oneof![
        holder().prop_map(TestReply::Denied),
        stats()
            .prop_filter("DENIED carries a holder", |s| *s != Stats::Denied)
            .prop_map(TestReply::Other),
    ]
}

fn share() -> impl Strategy<Value = Share> {
    (bytes(20), netobj(), netobj(), 0..=3u32, 0..=3u32).prop_map(|(name, fh, oh, m, a)| Share {
        caller_name: CallerName(name),
        fh,
        oh,
        mode: FshMode::from_u32(m).expect("0..=3 are fsh4_mode"),
        access: FshAccess::from_u32(a).expect("0..=3 are fsh4_access"),
    })
}

fn sm_name() -> impl Strategy<Value = SmName> {
    bytes(20).prop_map(SmName)
}

fn my_id() -> impl Strategy<Value = MyId> {
    (sm_name(), any::<i32>(), any::<i32>(), any::<i32>()).prop_map(
        |(my_name, my_prog, my_vers, my_proc)| MyId {
            my_name,
            my_prog,
            my_vers,
            my_proc,
        },
    )
}

fn mon_id() -> impl Strategy<Value = MonId> {
    (sm_name(), my_id()).prop_map(|(mon_name, my_id)| MonId { mon_name, my_id })
}

proptest! {
    #[test]
    fn test_args(cookie in netobj(), exclusive in any::<bool>(), alock in lock()) {
        let v = TestArgs { cookie, exclusive, alock };
        round_trips(&v)?;
        every_truncation_fails(&v)?;
    }

    #[test]
    fn lock_args(
        cookie in netobj(), block in any::<bool>(), exclusive in any::<bool>(),
        alock in lock(), reclaim in any::<bool>(), state in any::<i32>(),
    ) {
        let v = LockArgs { cookie, block, exclusive, alock, reclaim, state };
        round_trips(&v)?;
        every_truncation_fails(&v)?;
    }

    #[test]
    fn canc_args(cookie in netobj(), block in any::<bool>(), exclusive in any::<bool>(), alock in lock()) {
        let v = CancArgs { cookie, block, exclusive, alock };
        round_trips(&v)?;
        every_truncation_fails(&v)?;
    }

    #[test]
    fn unlock_args(cookie in netobj(), alock in lock()) {
        let v = UnlockArgs { cookie, alock };
        round_trips(&v)?;
        every_truncation_fails(&v)?;
    }

    #[test]
    fn res(cookie in netobj(), stat in stats()) {
        let v = Res { cookie, stat };
        round_trips(&v)?;
        every_truncation_fails(&v)?;
    }

    #[test]
    fn test_res(cookie in netobj(), stat in test_reply()) {
        let v = TestRes { cookie, stat };
        round_trips(&v)?;
        every_truncation_fails(&v)?;
    }

    #[test]
    fn share_args(cookie in netobj(), share in share(), reclaim in any::<bool>()) {
        let v = ShareArgs { cookie, share, reclaim };
        round_trips(&v)?;
        every_truncation_fails(&v)?;
    }

    #[test]
    fn share_res(cookie in netobj(), stat in stats(), sequence in any::<i32>()) {
        let v = ShareRes { cookie, stat, sequence };
        round_trips(&v)?;
        every_truncation_fails(&v)?;
    }

    #[test]
    fn notify(name in bytes(30), state in any::<i32>()) {
        let v = Notify { name: HostName(name), state };
        round_trips(&v)?;
        every_truncation_fails(&v)?;
    }

    #[test]
    fn nsm_mon(mon_id in mon_id(), priv_ in any::<[u8; 16]>()) {
        let v = Mon { mon_id, priv_ };
        round_trips(&v)?;
        every_truncation_fails(&v)?;
    }

    #[test]
    fn nsm_unmon_and_unmon_all(mon_id in mon_id()) {
        round_trips(&mon_id)?;
        every_truncation_fails(&mon_id)?;
        round_trips(&mon_id.my_id)?;
        every_truncation_fails(&mon_id.my_id)?;
    }

    #[test]
    fn nsm_notify_stat_and_status(
        mon_name in sm_name(), state in any::<i32>(), priv_ in any::<[u8; 16]>(),
        ok in any::<bool>(),
    ) {
        let chge = StatChge { mon_name: mon_name.clone(), state };
        round_trips(&chge)?;
        every_truncation_fails(&chge)?;
        let status = Status { mon_name, state, priv_ };
        round_trips(&status)?;
        every_truncation_fails(&status)?;
        let res_stat = if ok { SmRes::StatSucc } else { SmRes::StatFail };
        let res = StatRes { res_stat, state };
        round_trips(&res)?;
        every_truncation_fails(&res)?;
        round_trips(&nsm::SmStat { state })?;
    }

    #[test]
    fn random_bytes_never_panic(data in vec(any::<u8>(), 0..256)) {
        decode_everything(&Bytes::from(data));
    }

    /// Mostly-small words reach deeper into unions and lengths than random bytes.
    #[test]
    fn random_small_words_never_panic(words in vec(0..12u32, 0..96)) {
        let data: Vec<u8> = words.iter().flat_map(|w| w.to_be_bytes()).collect();
        decode_everything(&Bytes::from(data));
    }
}

fn decode_everything(data: &Bytes) {
    let _ = TestArgs::from_xdr(data.clone());
    let _ = LockArgs::from_xdr(data.clone());
    let _ = CancArgs::from_xdr(data.clone());
    let _ = UnlockArgs::from_xdr(data.clone());
    let _ = Res::from_xdr(data.clone());
    let _ = TestRes::from_xdr(data.clone());
    let _ = ShareArgs::from_xdr(data.clone());
    let _ = ShareRes::from_xdr(data.clone());
    let _ = Notify::from_xdr(data.clone());
    let _ = Mon::from_xdr(data.clone());
    let _ = MonId::from_xdr(data.clone());
    let _ = MyId::from_xdr(data.clone());
    let _ = StatChge::from_xdr(data.clone());
    let _ = StatRes::from_xdr(data.clone());
    let _ = Status::from_xdr(data.clone());
}

/// The layout of `nlm4_lockargs` drawn word by word, as XNFS gives it.
#[test]
fn lock_args_layout_matches_the_spec() {
    let args = LockArgs {
        cookie: Netobj::new(&b"ck"[..]),
        block: true,
        exclusive: false,
        alock: Lock {
            caller_name: CallerName::new(&b"host1"[..]),
            fh: Netobj::new(vec![0xAB; 8]),
            oh: Netobj::new(&b"7@host1"[..]),
            svid: -2,
            l_offset: 0x1_0000_0000,
            l_len: 0,
        },
        reclaim: true,
        state: 3,
    };
    let mut want = Vec::new();
    let word = |w: &mut Vec<u8>, v: u32| w.extend_from_slice(&v.to_be_bytes());
    word(&mut want, 2);
    want.extend_from_slice(b"ck\0\0");
    word(&mut want, 1);
    word(&mut want, 0);
    word(&mut want, 5);
    want.extend_from_slice(b"host1\0\0\0");
    word(&mut want, 8);
    want.extend_from_slice(&[0xAB; 8]);
    word(&mut want, 7);
    want.extend_from_slice(b"7@host1\0");
    word(&mut want, 0xFFFF_FFFE);
    want.extend_from_slice(&0x1_0000_0000u64.to_be_bytes());
    want.extend_from_slice(&0u64.to_be_bytes());
    word(&mut want, 1);
    word(&mut want, 3);
    assert_eq!(&args.to_xdr()[..], &want[..]);
}

/// A netobj, caller name or NSM name one byte over its limit is a decode error naming it.
#[test]
fn over_long_items_are_refused() {
    let over = |max: u32| {
        let mut e = Encoder::new();
        e.opaque(&vec![b'x'; max as usize + 1]);
        e.into_bytes()
    };
    assert!(matches!(
        Netobj::from_xdr(over(MAXNETOBJ_SZ)),
        Err(DecodeError::TooLong { what: "netobj", .. })
    ));
    assert!(matches!(
        CallerName::from_xdr(over(LM_MAXSTRLEN)),
        Err(DecodeError::TooLong {
            what: "caller_name",
            ..
        })
    ));
    assert!(matches!(
        SmName::from_xdr(over(SM_MAXSTRLEN)),
        Err(DecodeError::TooLong {
            what: "sm_name",
            ..
        })
    ));
    assert!(Netobj::from_xdr(over(MAXNETOBJ_SZ - 1)).is_ok());
}

/// Unknown status, mode and access values are garbage, not silently mapped.
#[test]
fn unknown_enum_values_are_refused() {
    let mut e = Encoder::new();
    e.opaque(b"");
    e.u32(10);
    assert!(Res::from_xdr(e.into_bytes()).is_err(), "nlm4_stats 10");
    let mut share = ShareArgs::default().to_xdr().to_vec();
    // The mode word sits after cookie (4), caller_name (4), fh (4), oh (4).
    share[16..20].copy_from_slice(&4u32.to_be_bytes());
    assert!(
        ShareArgs::from_xdr(Bytes::from(share)).is_err(),
        "fsh4_mode 4"
    );
    let procs: Vec<u32> = (0..30).filter(|p| Proc::from_u32(*p).is_some()).collect();
    assert_eq!(
        procs,
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 20, 21, 22, 23]
    );
}
