//! Every operation's arguments and results, COMPOUND and CB_COMPOUND, and the attribute
//! codec: encode then decode gives the value back and consumes exactly the encoding;
//! every strict prefix of an encoding is a decode error, never a panic or a shorter
//! value; random bytes never panic.

use std::fmt::Debug;

use bytes::Bytes;
use granary_nfs4::attr::{AttrError, Fattr};
use granary_nfs4::compound::{
    CbArgOp, CbCompound4Args, CbCompound4Res, CbNotifyLockArgs, CbRecallArgs, CbResOp,
    CbSequenceArgs, CbSequenceOk, ReferringCall4, ReferringCallList4, Stopped,
};
use granary_nfs4::ops::*;
use granary_nfs4::results::*;
use granary_nfs4::types::*;
use granary_nfs4::{Compound4Args, Compound4Res};
use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use xdr::{Decode, Decoder, Encode, Encoder};

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
            "a {len}-byte prefix of {} decoded: {decoded:?}",
            bytes.len()
        );
    }
    Ok(())
}

fn bytes_up_to(max: usize) -> impl Strategy<Value = Bytes> {
    vec(any::<u8>(), 0..=max).prop_map(Bytes::from)
}

fn name() -> impl Strategy<Value = Component4> {
    bytes_up_to(40).prop_map(Component4)
}

fn fh() -> impl Strategy<Value = NfsFh4> {
    bytes_up_to(128).prop_map(NfsFh4)
}

fn opaque() -> impl Strategy<Value = Opaque4> {
    bytes_up_to(64).prop_map(Opaque4)
}

fn utf8() -> impl Strategy<Value = Utf8Str> {
    bytes_up_to(32).prop_map(Utf8Str)
}

fn stateid() -> impl Strategy<Value = Stateid4> {
    (any::<u32>(), any::<[u8; 12]>()).prop_map(|(seqid, other)| Stateid4 { seqid, other })
}

fn bitmap() -> impl Strategy<Value = Bitmap4> {
    vec(any::<u32>(), 0..=3).prop_map(Bitmap4)
}

fn fattr4() -> impl Strategy<Value = Fattr4> {
    (bitmap(), bytes_up_to(64)).prop_map(|(attrmask, v)| Fattr4 {
        attrmask,
        attr_vals: AttrList4(v),
    })
}

fn owner() -> impl Strategy<Value = StateOwner4> {
    (any::<u64>(), opaque()).prop_map(|(clientid, owner)| StateOwner4 { clientid, owner })
}

fn time() -> impl Strategy<Value = Nfstime4> {
    (any::<i64>(), any::<u32>()).prop_map(|(seconds, nseconds)| Nfstime4 { seconds, nseconds })
}

fn status() -> impl Strategy<Value = Nfsstat4> {
    prop_oneof![
        Just(Nfsstat4::Noent),
        Just(Nfsstat4::Access),
        Just(Nfsstat4::Stale),
        Just(Nfsstat4::BadStateid),
        Just(Nfsstat4::Delay),
        Just(Nfsstat4::Notsupp),
        Just(Nfsstat4::SeqMisordered),
        Just(Nfsstat4::Badxdr),
    ]
}

fn lock_type() -> impl Strategy<Value = NfsLockType4> {
    prop_oneof![
        Just(NfsLockType4::Read),
        Just(NfsLockType4::Write),
        Just(NfsLockType4::ReadW),
        Just(NfsLockType4::WriteW)
    ]
}

fn stable() -> impl Strategy<Value = StableHow4> {
    prop_oneof![
        Just(StableHow4::Unstable),
        Just(StableHow4::DataSync),
        Just(StableHow4::FileSync)
    ]
}

fn channel_attrs() -> impl Strategy<Value = ChannelAttrs4> {
    (any::<[u32; 6]>(), option::of(any::<u32>())).prop_map(|(w, ird)| ChannelAttrs4 {
        ca_headerpadsize: w[0],
        ca_maxrequestsize: w[1],
        ca_maxresponsesize: w[2],
        ca_maxresponsesize_cached: w[3],
        ca_maxoperations: w[4],
        ca_maxrequests: w[5],
        ca_rdma_ird: ird,
    })
}

fn sec_parms() -> impl Strategy<Value = CallbackSecList> {
    let sys = (
        any::<u32>(),
        bytes_up_to(20),
        any::<u32>(),
        any::<u32>(),
        vec(any::<u32>(), 0..=16),
    )
        .prop_map(|(stamp, m, uid, gid, gids)| {
            CallbackSecParms4::Sys(AuthsysParms {
                stamp,
                machinename: MachineName(m),
                uid,
                gid,
                gids,
            })
        });
    let gss = (any::<u32>(), bytes_up_to(8), bytes_up_to(8)).prop_map(|(service, a, b)| {
        CallbackSecParms4::Gss {
            service,
            handle_from_server: SecOid4(a),
            handle_from_client: SecOid4(b),
        }
    });
    vec(prop_oneof![Just(CallbackSecParms4::None), sys, gss], 0..3).prop_map(CallbackSecList)
}

fn createhow() -> impl Strategy<Value = Createhow4> {
    prop_oneof![
        fattr4().prop_map(Createhow4::Unchecked),
        fattr4().prop_map(Createhow4::Guarded),
        any::<[u8; 8]>().prop_map(Createhow4::Exclusive),
        (any::<[u8; 8]>(), fattr4()).prop_map(|(cva_verf, cva_attrs)| Createhow4::Exclusive41(
            CreatVerfAttr {
                cva_verf,
                cva_attrs
            }
        )),
    ]
}

fn claim() -> impl Strategy<Value = OpenClaim4> {
    prop_oneof![
        name().prop_map(OpenClaim4::Null),
        Just(OpenClaim4::Previous(OpenDelegationType4::None)),
        (stateid(), name()).prop_map(|(delegate_stateid, file)| OpenClaim4::DelegateCur {
            delegate_stateid,
            file
        }),
        name().prop_map(OpenClaim4::DelegatePrev),
        Just(OpenClaim4::Fh),
        Just(OpenClaim4::DelegPrevFh),
        stateid().prop_map(OpenClaim4::DelegCurFh),
    ]
}

fn locker() -> impl Strategy<Value = Locker4> {
    prop_oneof![
        (any::<u32>(), stateid(), any::<u32>(), owner()).prop_map(|(a, s, b, o)| Locker4::New(
            OpenToLockOwner4 {
                open_seqid: a,
                open_stateid: s,
                lock_seqid: b,
                lock_owner: o
            }
        )),
        (stateid(), any::<u32>()).prop_map(|(lock_stateid, lock_seqid)| Locker4::Existing(
            ExistLockOwner4 {
                lock_stateid,
                lock_seqid
            }
        )),
    ]
}

fn createtype() -> impl Strategy<Value = Createtype4> {
    let spec = (any::<u32>(), any::<u32>()).prop_map(|(a, b)| Specdata4 {
        specdata1: a,
        specdata2: b,
    });
    prop_oneof![
        bytes_up_to(40).prop_map(|b| Createtype4::Link(Linktext4(b))),
        spec.clone().prop_map(Createtype4::Blk),
        spec.prop_map(Createtype4::Chr),
        Just(Createtype4::Sock),
        Just(Createtype4::Fifo),
        Just(Createtype4::Dir),
        Just(Createtype4::Other(1)),
    ]
}

fn arg_op() -> impl Strategy<Value = ArgOp> {
    let a = prop_oneof![
        any::<u32>().prop_map(ArgOp::Access),
        (any::<u32>(), stateid()).prop_map(|(seqid, open_stateid)| ArgOp::Close(CloseArgs {
            seqid,
            open_stateid
        })),
        (any::<u64>(), any::<u32>())
            .prop_map(|(offset, count)| ArgOp::Commit(CommitArgs { offset, count })),
        (createtype(), name(), fattr4()).prop_map(|(objtype, objname, createattrs)| ArgOp::Create(
            CreateArgs {
                objtype,
                objname,
                createattrs
            }
        )),
        bitmap().prop_map(ArgOp::Getattr),
        Just(ArgOp::Getfh),
        name().prop_map(ArgOp::Link),
        (
            lock_type(),
            any::<bool>(),
            any::<u64>(),
            any::<u64>(),
            locker()
        )
            .prop_map(|(locktype, reclaim, offset, length, locker)| ArgOp::Lock(
                LockArgs {
                    locktype,
                    reclaim,
                    offset,
                    length,
                    locker
                }
            )),
        (lock_type(), any::<u64>(), any::<u64>(), owner()).prop_map(
            |(locktype, offset, length, owner)| ArgOp::Lockt(LocktArgs {
                locktype,
                offset,
                length,
                owner
            })
        ),
        (
            lock_type(),
            any::<u32>(),
            stateid(),
            any::<u64>(),
            any::<u64>()
        )
            .prop_map(
                |(locktype, seqid, lock_stateid, offset, length)| ArgOp::Locku(LockuArgs {
                    locktype,
                    seqid,
                    lock_stateid,
                    offset,
                    length
                })
            ),
        name().prop_map(ArgOp::Lookup),
        Just(ArgOp::Lookupp),
        fattr4().prop_map(ArgOp::Nverify),
        (
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
            owner(),
            option::of(createhow()),
            claim()
        )
            .prop_map(
                |(seqid, share_access, share_deny, owner, how, claim)| ArgOp::Open(OpenArgs {
                    seqid,
                    share_access,
                    share_deny,
                    owner,
                    openhow: how.map_or(Openflag4::NoCreate, Openflag4::Create),
                    claim,
                })
            ),
    ];
    let b = prop_oneof![
        (stateid(), any::<u32>(), any::<u32>(), any::<u32>()).prop_map(
            |(open_stateid, seqid, share_access, share_deny)| {
                ArgOp::OpenDowngrade(OpenDowngradeArgs {
                    open_stateid,
                    seqid,
                    share_access,
                    share_deny,
                })
            }
        ),
        fh().prop_map(ArgOp::Putfh),
        Just(ArgOp::Putpubfh),
        Just(ArgOp::Putrootfh),
        (stateid(), any::<u64>(), any::<u32>()).prop_map(|(stateid, offset, count)| ArgOp::Read(
            ReadArgs {
                stateid,
                offset,
                count
            }
        )),
        (
            any::<u64>(),
            any::<[u8; 8]>(),
            any::<u32>(),
            any::<u32>(),
            bitmap()
        )
            .prop_map(|(cookie, cookieverf, dircount, maxcount, attr_request)| {
                ArgOp::Readdir(ReaddirArgs {
                    cookie,
                    cookieverf,
                    dircount,
                    maxcount,
                    attr_request,
                })
            }),
        Just(ArgOp::Readlink),
        name().prop_map(ArgOp::Remove),
        (name(), name())
            .prop_map(|(oldname, newname)| ArgOp::Rename(RenameArgs { oldname, newname })),
        Just(ArgOp::Restorefh),
        Just(ArgOp::Savefh),
        name().prop_map(ArgOp::Secinfo),
        (stateid(), fattr4()).prop_map(|(stateid, obj_attributes)| ArgOp::Setattr(SetattrArgs {
            stateid,
            obj_attributes
        })),
        fattr4().prop_map(ArgOp::Verify),
        (stateid(), any::<u64>(), stable(), bytes_up_to(100)).prop_map(
            |(stateid, offset, stable, data)| ArgOp::Write(WriteArgs {
                stateid,
                offset,
                stable,
                data
            })
        ),
    ];
    let c = prop_oneof![
        (any::<u32>(), sec_parms()).prop_map(|(bca_cb_program, bca_sec_parms)| {
            ArgOp::BackchannelCtl(BackchannelCtlArgs {
                bca_cb_program,
                bca_sec_parms,
            })
        }),
        (any::<[u8; 16]>(), any::<bool>()).prop_map(|(s, rdma)| ArgOp::BindConnToSession(
            BindConnToSessionArgs {
                bctsa_sessid: s,
                bctsa_dir: ChannelDirFromClient4::ForeOrBoth,
                bctsa_use_conn_in_rdma_mode: rdma
            }
        )),
        (
            any::<[u8; 8]>(),
            opaque(),
            any::<u32>(),
            option::of((utf8(), utf8(), time()))
        )
            .prop_map(
                |(co_verifier, co_ownerid, eia_flags, imp)| ArgOp::ExchangeId(ExchangeIdArgs {
                    eia_clientowner: ClientOwner4 {
                        co_verifier,
                        co_ownerid
                    },
                    eia_flags,
                    eia_state_protect: StateProtect4A::None,
                    eia_client_impl_id: AtMostOne(imp.map(|(nii_domain, nii_name, nii_date)| {
                        NfsImplId4 {
                            nii_domain,
                            nii_name,
                            nii_date,
                        }
                    })),
                })
            ),
        (
            any::<u64>(),
            any::<u32>(),
            any::<u32>(),
            channel_attrs(),
            channel_attrs(),
            any::<u32>(),
            sec_parms()
        )
            .prop_map(
                |(csa_clientid, csa_sequence, csa_flags, f, b, csa_cb_program, csa_sec_parms)| {
                    ArgOp::CreateSession(CreateSessionArgs {
                        csa_clientid,
                        csa_sequence,
                        csa_flags,
                        csa_fore_chan_attrs: f,
                        csa_back_chan_attrs: b,
                        csa_cb_program,
                        csa_sec_parms,
                    })
                }
            ),
        any::<[u8; 16]>().prop_map(ArgOp::DestroySession),
        stateid().prop_map(ArgOp::FreeStateid),
        Just(ArgOp::SecinfoNoName(SecinfoStyle4::Parent)),
        (
            any::<[u8; 16]>(),
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
            any::<bool>()
        )
            .prop_map(|(s, q, slot, hi, cache)| ArgOp::Sequence(SequenceArgs {
                sa_sessionid: s,
                sa_sequenceid: q,
                sa_slotid: slot,
                sa_highest_slotid: hi,
                sa_cachethis: cache
            })),
        vec(stateid(), 0..4)
            .prop_map(|ts_stateids| ArgOp::TestStateid(TestStateidArgs { ts_stateids })),
        any::<u64>().prop_map(ArgOp::DestroyClientid),
        any::<bool>().prop_map(ArgOp::ReclaimComplete),
        (stateid(), any::<u64>(), any::<u64>()).prop_map(|(stateid, offset, length)| {
            ArgOp::Allocate(RangeArgs {
                stateid,
                offset,
                length,
            })
        }),
        (stateid(), any::<u64>(), any::<u64>()).prop_map(|(stateid, offset, length)| {
            ArgOp::Deallocate(RangeArgs {
                stateid,
                offset,
                length,
            })
        }),
        (
            stateid(),
            stateid(),
            any::<[u64; 3]>(),
            any::<bool>(),
            any::<bool>()
        )
            .prop_map(|(s, d, n, c, y)| ArgOp::Copy(CopyArgs {
                ca_src_stateid: s,
                ca_dst_stateid: d,
                ca_src_offset: n[0],
                ca_dst_offset: n[1],
                ca_count: n[2],
                ca_consecutive: c,
                ca_synchronous: y,
                ca_source_servers: 0,
            })),
        (stateid(), any::<u64>()).prop_map(|(sa_stateid, sa_offset)| ArgOp::Seek(SeekArgs {
            sa_stateid,
            sa_offset,
            sa_what: DataContent4::Hole
        })),
        (stateid(), stateid(), any::<[u64; 3]>()).prop_map(|(s, d, n)| ArgOp::Clone(CloneArgs {
            cl_src_stateid: s,
            cl_dst_stateid: d,
            cl_src_offset: n[0],
            cl_dst_offset: n[1],
            cl_count: n[2],
        })),
    ];
    prop_oneof![a, b, c]
}

fn cinfo() -> impl Strategy<Value = ChangeInfo4> {
    (any::<bool>(), any::<u64>(), any::<u64>()).prop_map(|(atomic, before, after)| ChangeInfo4 {
        atomic,
        before,
        after,
    })
}

fn res<T: Debug + Clone + 'static>(
    ok: impl Strategy<Value = T> + 'static,
) -> impl Strategy<Value = Res4<T>> {
    prop_oneof![ok.prop_map(Res4::Ok), status().prop_map(Res4::Err)]
}

fn denied() -> impl Strategy<Value = LockDenied4> {
    (any::<u64>(), any::<u64>(), lock_type(), owner()).prop_map(
        |(offset, length, locktype, owner)| LockDenied4 {
            offset,
            length,
            locktype,
            owner,
        },
    )
}

fn res_op() -> impl Strategy<Value = ResOp> {
    let a = prop_oneof![
        res((any::<u32>(), any::<u32>())
            .prop_map(|(supported, access)| AccessOk { supported, access }))
        .prop_map(ResOp::Access),
        res(stateid()).prop_map(ResOp::Close),
        res(any::<[u8; 8]>()).prop_map(ResOp::Commit),
        res((cinfo(), bitmap()).prop_map(|(cinfo, attrset)| CreateOk { cinfo, attrset }))
            .prop_map(ResOp::Create),
        res(fattr4()).prop_map(ResOp::Getattr),
        res(fh()).prop_map(ResOp::Getfh),
        res(cinfo()).prop_map(ResOp::Link),
        prop_oneof![
            stateid().prop_map(LockRes::Ok),
            denied().prop_map(LockRes::Denied),
            status().prop_map(LockRes::Err)
        ]
        .prop_map(ResOp::Lock),
        prop_oneof![
            Just(LockRes::Ok(Nothing)),
            denied().prop_map(LockRes::Denied)
        ]
        .prop_map(ResOp::Lockt),
        res(stateid()).prop_map(ResOp::Locku),
        status().prop_map(ResOp::Lookup),
        Just(ResOp::Lookupp(Nfsstat4::Ok)),
        res(
            (stateid(), cinfo(), any::<u32>(), bitmap(), any::<bool>()).prop_map(
                |(stateid, cinfo, rflags, attrset, ext)| OpenOk {
                    stateid,
                    cinfo,
                    rflags,
                    attrset,
                    delegation: if ext {
                        OpenDelegation4::NoneExt {
                            why: why_no_delegation::CONTENTION,
                            will_signal: Some(false),
                        }
                    } else {
                        OpenDelegation4::None
                    },
                }
            )
        )
        .prop_map(ResOp::Open),
    ];
    let b = prop_oneof![
        res((any::<bool>(), bytes_up_to(100)).prop_map(|(eof, data)| ReadOk { eof, data }))
            .prop_map(ResOp::Read),
        res((
            any::<[u8; 8]>(),
            vec((any::<u64>(), name(), fattr4()), 0..4),
            any::<bool>()
        )
            .prop_map(|(cookieverf, es, eof)| ReaddirOk {
                cookieverf,
                entries: es
                    .into_iter()
                    .map(|(cookie, name, attrs)| Entry4 {
                        cookie,
                        name,
                        attrs
                    })
                    .collect(),
                eof,
            }))
        .prop_map(ResOp::Readdir),
        res(bytes_up_to(40).prop_map(Linktext4)).prop_map(ResOp::Readlink),
        res(cinfo()).prop_map(ResOp::Remove),
        res(
            (cinfo(), cinfo()).prop_map(|(source_cinfo, target_cinfo)| RenameOk {
                source_cinfo,
                target_cinfo
            })
        )
        .prop_map(ResOp::Rename),
        res(vec(
            prop_oneof![
                Just(Secinfo4::Flavor(1)),
                bytes_up_to(9).prop_map(|o| Secinfo4::Gss {
                    oid: SecOid4(o),
                    qop: 0,
                    service: 1
                })
            ],
            0..3
        )
        .prop_map(SecinfoOk))
        .prop_map(ResOp::SecinfoNoName),
        (status(), bitmap()).prop_map(|(s, b)| ResOp::Setattr(s, b)),
        res((any::<u32>(), stable(), any::<[u8; 8]>()).prop_map(
            |(count, committed, writeverf)| WriteOk {
                count,
                committed,
                writeverf
            }
        ))
        .prop_map(ResOp::Write),
        res((
            any::<u64>(),
            any::<u32>(),
            any::<u32>(),
            any::<u64>(),
            opaque(),
            opaque()
        )
            .prop_map(|(c, s, f, minor, major, scope)| ExchangeIdOk {
                eir_clientid: c,
                eir_sequenceid: s,
                eir_flags: f,
                eir_state_protect: StateProtect4R::None,
                eir_server_owner: ServerOwner4 {
                    so_minor_id: minor,
                    so_major_id: major
                },
                eir_server_scope: scope,
                eir_server_impl_id: AtMostOne(None),
            }))
        .prop_map(ResOp::ExchangeId),
        res((
            any::<[u8; 16]>(),
            any::<u32>(),
            any::<u32>(),
            channel_attrs(),
            channel_attrs()
        )
            .prop_map(|(s, q, f, a, b)| CreateSessionOk {
                csr_sessionid: s,
                csr_sequence: q,
                csr_flags: f,
                csr_fore_chan_attrs: a,
                csr_back_chan_attrs: b,
            }))
        .prop_map(ResOp::CreateSession),
        res(
            (any::<[u8; 16]>(), any::<[u32; 5]>()).prop_map(|(s, w)| SequenceOk {
                sr_sessionid: s,
                sr_sequenceid: w[0],
                sr_slotid: w[1],
                sr_highest_slotid: w[2],
                sr_target_highest_slotid: w[3],
                sr_status_flags: w[4],
            })
        )
        .prop_map(ResOp::Sequence),
        res(vec(status(), 0..4).prop_map(TestStateidOk)).prop_map(ResOp::TestStateid),
        res((any::<bool>(), any::<u64>())
            .prop_map(|(sr_eof, sr_offset)| SeekOk { sr_eof, sr_offset }))
        .prop_map(ResOp::Seek),
        res(
            (any::<u64>(), stable(), any::<[u8; 8]>()).prop_map(|(n, c, v)| CopyOk {
                cr_response: WriteResponse4 {
                    wr_callback_id: AtMostOne(None),
                    wr_count: n,
                    wr_committed: c,
                    wr_writeverf: v
                },
                cr_consecutive: true,
                cr_synchronous: true,
            })
        )
        .prop_map(ResOp::Copy),
        Just(ResOp::Refused {
            op: opnum::LAYOUTGET,
            status: Nfsstat4::Notsupp
        }),
        Just(ResOp::Refused {
            op: opnum::ILLEGAL,
            status: Nfsstat4::OpIllegal
        }),
    ];
    prop_oneof![a, b]
}

proptest! {
    #[test]
    fn every_argument_round_trips(op in arg_op()) {
        round_trips(&op)?;
        every_truncation_fails(&op)?;
    }

    #[test]
    fn every_result_round_trips(op in res_op()) {
        round_trips(&op)?;
        every_truncation_fails(&op)?;
    }

    #[test]
    fn compounds_round_trip(ops in vec(arg_op(), 0..6), results in vec(res_op(), 0..6), minor in 0u32..3) {
        let args = Compound4Args::new(minor, ops);
        round_trips(&args)?;
        let res = Compound4Res { status: Nfsstat4::Ok, tag: Tag4(Bytes::from_static(b"t")), results };
        round_trips(&res)?;
        every_truncation_fails(&res)?;
    }

    #[test]
    fn random_bytes_never_panic(raw in vec(any::<u8>(), 0..400)) {
        let _ = Compound4Args::from_xdr(Bytes::from(raw.clone()));
        let _ = Compound4Res::from_xdr(Bytes::from(raw.clone()));
        let _ = CbCompound4Args::from_xdr(Bytes::from(raw));
    }

    #[test]
    fn callbacks_round_trip(sess in any::<[u8; 16]>(), w in any::<[u32; 3]>(), fh in fh(), o in owner(), s in stateid()) {
        let args = CbCompound4Args {
            tag: Tag4::default(),
            minorversion: 1,
            callback_ident: w[0],
            ops: vec![
                CbArgOp::Sequence(CbSequenceArgs {
                    csa_sessionid: sess, csa_sequenceid: w[1], csa_slotid: 0, csa_highest_slotid: 0, csa_cachethis: false,
                    csa_referring_call_lists: vec![ReferringCallList4 { rcl_sessionid: sess, rcl_referring_calls: vec![ReferringCall4 { rc_sequenceid: w[2], rc_slotid: 1 }] }],
                }),
                CbArgOp::NotifyLock(CbNotifyLockArgs { cnla_fh: fh.clone(), cnla_lock_owner: o }),
                CbArgOp::Recall(CbRecallArgs { stateid: s, truncate: false, fh }),
            ],
        };
        round_trips(&args)?;
        every_truncation_fails(&args)?;
        let res = CbCompound4Res {
            status: Nfsstat4::Ok,
            tag: Tag4::default(),
            results: vec![
                CbResOp::Sequence(Res4::Ok(CbSequenceOk { csr_sessionid: sess, csr_sequenceid: w[1], csr_slotid: 0, csr_highest_slotid: 0, csr_target_highest_slotid: 0 })),
                CbResOp::Status { op: 13, status: Nfsstat4::Ok },
            ],
        };
        round_trips(&res)?;
    }

    #[test]
    fn attributes_pack_in_number_order_and_unpack(size in any::<u64>(), mode in 0u32..0o7777, change in any::<u64>(), owner in utf8(), t in time()) {
        let f = Fattr { size: Some(size), mode: Some(mode), change: Some(change), owner: Some(owner), time_modify: Some(t), ..Fattr::default() };
        let packed = f.to_fattr4();
        prop_assert_eq!(packed.attrmask.iter().collect::<Vec<_>>(), vec![3, 4, 33, 36, 53]);
        // change and size are the first two values: 8 bytes each, in number order.
        prop_assert_eq!(&packed.attr_vals.0[..8], &change.to_be_bytes()[..]);
        prop_assert_eq!(&packed.attr_vals.0[8..16], &size.to_be_bytes()[..]);
        prop_assert_eq!(Fattr::from_fattr4(&packed), Ok(f));
    }
}

#[test]
fn compound_decoding_stops_at_an_unimplemented_operation_without_reading_it() {
    let mut e = Encoder::new();
    Tag4::default().encode(&mut e);
    e.u32(1);
    e.u32(3); // three operations
    ArgOp::Putrootfh.encode(&mut e);
    e.u32(opnum::LAYOUTGET);
    e.u32(0xdead_beef); // arguments nobody reads
    ArgOp::Getfh.encode(&mut e);
    let args = Compound4Args::from_xdr(e.into_bytes()).unwrap();
    assert_eq!(
        args.ops,
        vec![ArgOp::Putrootfh, ArgOp::NotSupported(opnum::LAYOUTGET)]
    );
    assert_eq!(args.stopped, None);
}

#[test]
fn compound_decoding_reports_the_index_of_a_malformed_operation() {
    let mut e = Encoder::new();
    Tag4::default().encode(&mut e);
    e.u32(2);
    e.u32(2);
    ArgOp::Putrootfh.encode(&mut e);
    e.u32(opnum::LOOKUP);
    e.u32(5000); // a name length over MAX_NAME_WIRE
    let args = Compound4Args::from_xdr(e.into_bytes()).unwrap();
    assert_eq!(args.ops, vec![ArgOp::Putrootfh]);
    match args.stopped {
        Some(Stopped::BadXdr {
            index: 1,
            opnum: opnum::LOOKUP,
            ..
        }) => {}
        other => panic!("expected BadXdr at 1, got {other:?}"),
    }
}

#[test]
fn a_huge_operation_count_is_refused_before_allocation() {
    let mut e = Encoder::new();
    Tag4::default().encode(&mut e);
    e.u32(1);
    e.u32(u32::MAX);
    let args = Compound4Args::from_xdr(e.into_bytes()).unwrap();
    assert!(args.ops.is_empty());
    assert_eq!(args.stopped, Some(Stopped::TooMany(u32::MAX)));
}

#[test]
fn an_undefined_operation_is_illegal() {
    let mut e = Encoder::new();
    Tag4::default().encode(&mut e);
    e.u32(1);
    e.u32(1);
    e.u32(2); // below OP_ACCESS: undefined
    let args = Compound4Args::from_xdr(e.into_bytes()).unwrap();
    assert_eq!(args.ops, vec![ArgOp::Illegal(2)]);
}

#[test]
fn unpacking_an_unknown_attribute_says_which() {
    let f = Fattr4 {
        attrmask: Bitmap4::from_bits(&[4, 12]),
        attr_vals: AttrList4(Bytes::from_static(&[0; 8])),
    };
    assert_eq!(Fattr::from_fattr4(&f), Err(AttrError::NotSupported(12)));
    assert_eq!(AttrError::NotSupported(12).status(), Nfsstat4::Attrnotsupp);
}

#[test]
fn unpacking_values_shorter_or_longer_than_the_mask_is_badxdr() {
    let short = Fattr4 {
        attrmask: Bitmap4::from_bits(&[4]),
        attr_vals: AttrList4(Bytes::from_static(&[0; 4])),
    };
    assert_eq!(
        Fattr::from_fattr4(&short).unwrap_err().status(),
        Nfsstat4::Badxdr
    );
    let long = Fattr4 {
        attrmask: Bitmap4::from_bits(&[4]),
        attr_vals: AttrList4(Bytes::from_static(&[0; 12])),
    };
    assert_eq!(Fattr::from_fattr4(&long), Err(AttrError::Trailing(4)));
}

#[test]
fn bitmaps_hold_and_list_members() {
    let b = Bitmap4::from_bits(&[0, 31, 32, 75]);
    assert_eq!(b.0, vec![0x8000_0001, 0x1, 0x800]);
    assert!(b.contains(75) && !b.contains(74) && !b.contains(200));
    assert_eq!(b.iter().collect::<Vec<_>>(), vec![0, 31, 32, 75]);
    let i = b.intersect(&Bitmap4::from_bits(&[31, 75]));
    assert_eq!(i.iter().collect::<Vec<_>>(), vec![31, 75]);
}

#[test]
fn operation_names_follow_their_numbers() {
    use granary_nfs4::ops::opnum;
    assert_eq!(opnum::name(opnum::ACCESS), "access");
    assert_eq!(opnum::name(opnum::SEQUENCE), "sequence");
    assert_eq!(opnum::name(opnum::OPEN_DOWNGRADE), "open_downgrade");
    assert_eq!(opnum::name(opnum::CLONE), "clone");
    assert_eq!(opnum::name(opnum::REMOVEXATTR), "removexattr");
    assert_eq!(opnum::name(opnum::ILLEGAL), "illegal");
    assert_eq!(opnum::name(2), "illegal");
}

/// A SETATTR refused before it ran (unreadable arguments) still carries its bitmap of
/// attributes set, as RFC 8881's SETATTR4res always does (found by the `nfs4_compound`
/// fuzz target: the reply did not decode).
#[test]
fn a_failed_setattr_keeps_its_bitmap_and_other_failures_are_void() {
    use granary_nfs4::ops::opnum;
    for (op, status) in [
        (opnum::SETATTR, Nfsstat4::Badxdr),
        (opnum::LOOKUP, Nfsstat4::Badxdr),
        (opnum::LOCK, Nfsstat4::OpNotInSession),
        (opnum::ILLEGAL, Nfsstat4::OpIllegal),
    ] {
        let r = ResOp::failed(op, status);
        assert_eq!(r.opnum(), op);
        assert_eq!(r.status(), status);
        let mut e = xdr::Encoder::new();
        r.encode(&mut e);
        let bytes = e.into_bytes();
        let mut d = xdr::Decoder::new(bytes);
        let back = ResOp::decode(&mut d).expect("a failed result decodes");
        assert_eq!(d.remaining(), 0);
        assert_eq!(back.status(), status);
        assert_eq!(back.opnum(), op);
    }
}
