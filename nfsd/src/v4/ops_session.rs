//! Clients and sessions (RFC 8881 sections 18.34-18.37, 18.46, 18.48-18.51): EXCHANGE_ID,
//! CREATE_SESSION, DESTROY_SESSION, DESTROY_CLIENTID, BIND_CONN_TO_SESSION,
//! BACKCHANNEL_CTL, RECLAIM_COMPLETE, TEST_STATEID, FREE_STATEID — and the one table that
//! sends every operation to its handler.

use nfs4::ops::{
    exchgid, session_flags, ArgOp, BindConnToSessionArgs, ChannelDirFromClient4,
    ChannelDirFromServer4, CreateSessionArgs, ExchangeIdArgs,
};
use nfs4::results::{BindConnToSessionOk, ExchangeIdOk, Res4, TestStateidOk};
use nfs4::types::{
    AtMostOne, NfsImplId4, Nfstime4, Opaque4, ServerOwner4, StateProtect4A, StateProtect4R, Utf8Str,
};
use nfs4::{Nfsstat4, ResOp};
use rpc::Auth;
use state4::Principal;

use super::compound::{refuse, Cx};
use super::{callback, ops_attr, ops_dir, ops_fh, ops_io, ops_lock, ops_v42};

/// Runs one operation (SEQUENCE at the head of the COMPOUND was handled by the loop).
pub fn dispatch(cx: &mut Cx<'_>, op: &ArgOp) -> ResOp {
    match op {
        ArgOp::Putfh(fh) => ResOp::Putfh(status(ops_fh::putfh(cx, fh))),
        ArgOp::Putrootfh => ResOp::Putrootfh(status(ops_fh::putrootfh(cx))),
        ArgOp::Putpubfh => ResOp::Putpubfh(status(ops_fh::putrootfh(cx))),
        ArgOp::Getfh => ResOp::Getfh(ops_fh::getfh(cx).into()),
        ArgOp::Savefh => ResOp::Savefh(status(ops_fh::savefh(cx))),
        ArgOp::Restorefh => ResOp::Restorefh(status(ops_fh::restorefh(cx))),
        ArgOp::Lookup(name) => ResOp::Lookup(status(ops_fh::lookup(cx, name))),
        ArgOp::Lookupp => ResOp::Lookupp(status(ops_fh::lookupp(cx))),
        ArgOp::Secinfo(name) => ResOp::Secinfo(ops_fh::secinfo(cx, Some(name), false).into()),
        ArgOp::SecinfoNoName(style) => ResOp::SecinfoNoName(
            ops_fh::secinfo(cx, None, *style == nfs4::ops::SecinfoStyle4::Parent).into(),
        ),
        ArgOp::Getattr(mask) => ResOp::Getattr(ops_attr::getattr(cx, mask).into()),
        ArgOp::Setattr(a) => {
            let (status, set) = ops_attr::setattr(cx, a);
            ResOp::Setattr(status, set)
        }
        ArgOp::Access(bits) => ResOp::Access(ops_attr::access(cx, *bits).into()),
        ArgOp::Verify(f) => ResOp::Verify(ops_attr::verify(cx, f, false)),
        ArgOp::Nverify(f) => ResOp::Nverify(ops_attr::verify(cx, f, true)),
        ArgOp::Create(a) => ResOp::Create(ops_dir::create(cx, a).into()),
        ArgOp::Remove(name) => ResOp::Remove(ops_dir::remove(cx, name).into()),
        ArgOp::Rename(a) => ResOp::Rename(ops_dir::rename(cx, a).into()),
        ArgOp::Link(name) => ResOp::Link(ops_dir::link(cx, name).into()),
        ArgOp::Readlink => ResOp::Readlink(ops_dir::readlink(cx).into()),
        ArgOp::Readdir(a) => ResOp::Readdir(ops_dir::readdir(cx, a).into()),
        ArgOp::Open(a) => ResOp::Open(ops_io::open(cx, a).into()),
        ArgOp::Close(a) => ResOp::Close(ops_io::close(cx, a).into()),
        ArgOp::OpenDowngrade(a) => ResOp::OpenDowngrade(ops_io::open_downgrade(cx, a).into()),
        ArgOp::Read(a) => ResOp::Read(ops_io::read(cx, a).into()),
        ArgOp::Write(a) => ResOp::Write(ops_io::write(cx, a).into()),
        ArgOp::Commit(a) => ResOp::Commit(ops_io::commit(cx, a).into()),
        ArgOp::ExchangeId(a) => ResOp::ExchangeId(exchange_id(cx, a).into()),
        ArgOp::CreateSession(a) => ResOp::CreateSession(create_session(cx, a).into()),
        ArgOp::DestroySession(id) => ResOp::DestroySession(status(destroy_session(cx, id))),
        ArgOp::DestroyClientid(id) => ResOp::DestroyClientid(status(destroy_clientid(cx, *id))),
        ArgOp::BindConnToSession(a) => ResOp::BindConnToSession(bind_conn(cx, a).into()),
        ArgOp::BackchannelCtl(a) => ResOp::BackchannelCtl(status(backchannel_ctl(cx, a))),
        ArgOp::ReclaimComplete(one_fs) => {
            ResOp::ReclaimComplete(status(reclaim_complete(cx, *one_fs)))
        }
        ArgOp::TestStateid(a) => ResOp::TestStateid(test_stateid(cx, &a.ts_stateids).into()),
        ArgOp::FreeStateid(sid) => ResOp::FreeStateid(status(free_stateid(cx, sid))),
        ArgOp::Lock(a) => ResOp::Lock(ops_lock::lock(cx, a)),
        ArgOp::Lockt(a) => ResOp::Lockt(ops_lock::lockt(cx, a)),
        ArgOp::Locku(a) => ResOp::Locku(ops_lock::locku(cx, a).into()),
        ArgOp::Sequence(_) => ResOp::Sequence(Res4::Err(Nfsstat4::SequencePos)),
        // NFSv4.2's operations do not exist in minor version 1 (RFC 8881 section 15.2).
        ArgOp::Seek(_)
        | ArgOp::Allocate(_)
        | ArgOp::Deallocate(_)
        | ArgOp::Copy(_)
        | ArgOp::Clone(_)
            if cx.minor < 2 =>
        {
            refuse(&ArgOp::Illegal(op.opnum()), Nfsstat4::OpIllegal)
        }
        ArgOp::Seek(a) => ResOp::Seek(ops_v42::seek(cx, a).into()),
        ArgOp::Allocate(a) => ResOp::Allocate(status(ops_v42::space(cx, a, false))),
        ArgOp::Deallocate(a) => ResOp::Deallocate(status(ops_v42::space(cx, a, true))),
        ArgOp::Copy(a) => ResOp::Copy(ops_v42::copy(cx, a).into()),
        ArgOp::Clone(a) => ResOp::Clone(status(ops_v42::clone(cx, a))),
        ArgOp::NotSupported(_) => refuse(op, Nfsstat4::Notsupp),
        ArgOp::Illegal(_) => refuse(op, Nfsstat4::OpIllegal),
    }
}

/// The status of an operation whose result is only a status.
pub fn status(r: Result<(), Nfsstat4>) -> Nfsstat4 {
    r.err().unwrap_or(Nfsstat4::Ok)
}

fn principal(auth: &Auth) -> Principal {
    match auth {
        Auth::Sys(p) => Principal {
            flavor: 1,
            uid: p.uid,
        },
        _ => Principal {
            flavor: 0,
            uid: u32::MAX,
        },
    }
}

/// Flags a client may send in EXCHANGE_ID.
const EXCHGID_CLIENT_FLAGS: u32 = exchgid::SUPP_MOVED_REFER
    | exchgid::SUPP_MOVED_MIGR
    | exchgid::BIND_PRINC_STATEID
    | exchgid::MASK_PNFS
    | exchgid::UPD_CONFIRMED_REC_A;

fn exchange_id(cx: &mut Cx<'_>, a: &ExchangeIdArgs) -> Result<ExchangeIdOk, Nfsstat4> {
    if a.eia_flags & !EXCHGID_CLIENT_FLAGS != 0 {
        return Err(Nfsstat4::Inval);
    }
    match a.eia_state_protect {
        StateProtect4A::None => {}
        // Machine-credential protection needs an integrity-protected transport, which
        // AUTH_SYS is not (knfsd answers the same); SSV is not implemented.
        StateProtect4A::MachCred(_) => return Err(Nfsstat4::Inval),
        StateProtect4A::Ssv(_) => return Err(Nfsstat4::EncrAlgUnsupp),
    }
    let co = &a.eia_clientowner;
    let got = cx.s.state.exchange_id(
        &co.co_ownerid.0,
        co.co_verifier,
        a.eia_flags,
        principal(&cx.ctx.auth),
        cx.now,
    )?;
    if let (Some(removed), Some(records)) = (got.removed, &cx.s.records) {
        records.forget(removed);
    }
    let mut flags = exchgid::USE_NON_PNFS;
    if got.confirmed {
        flags |= exchgid::CONFIRMED_R;
    }
    Ok(ExchangeIdOk {
        eir_clientid: got.clientid,
        eir_sequenceid: got.sequenceid,
        eir_flags: flags,
        eir_state_protect: StateProtect4R::None,
        eir_server_owner: ServerOwner4 {
            so_minor_id: 0,
            so_major_id: Opaque4(cx.s.server_owner.clone()),
        },
        eir_server_scope: Opaque4(cx.s.server_owner.clone()),
        eir_server_impl_id: AtMostOne(Some(NfsImplId4 {
            nii_domain: Utf8Str(bytes::Bytes::from_static(b"granary.invalid")),
            nii_name: Utf8Str(bytes::Bytes::from(concat!(
                "granary ",
                env!("CARGO_PKG_VERSION")
            ))),
            nii_date: Nfstime4::default(),
        })),
    })
}

fn create_session(
    cx: &mut Cx<'_>,
    a: &CreateSessionArgs,
) -> Result<nfs4::results::CreateSessionOk, Nfsstat4> {
    // Callbacks carry AUTH_NONE or AUTH_SYS; a client that offers only RPCSEC_GSS cannot
    // be called back (knfsd refuses it the same way). One that offers nothing gets a
    // session whose back channel is down (SEQUENCE's status flags say so).
    let cred = callback::callback_cred(&a.csa_sec_parms);
    if cred.is_none() && !a.csa_sec_parms.0.is_empty() {
        return Err(Nfsstat4::EncrAlgUnsupp);
    }
    let mut a = a.clone();
    if cx.ctx.back.is_none() {
        // Not on a connection (tests, the fuzzers): nothing to call back on.
        a.csa_flags &= !session_flags::CONN_BACK_CHAN;
    }
    let (ok, replaced) =
        cx.s.state
            .create_session(&a, principal(&cx.ctx.auth), cx.now)?;
    if let Some(r) = replaced {
        cx.s.release_opens(&r.closed);
        tracing::info!(peer = %cx.ctx.peer, client = r.client, opens = r.closed.len(), "a rebooted NFSv4 client's earlier state was dropped");
        cx.s.callbacks.retain(|id| cx.s.state.session(id).is_ok());
    }
    let client = a.csa_clientid;
    record_client(cx, client);
    let back = (cx.minor, ok.csr_back_chan_attrs);
    let cbs = &cx.s.callbacks;
    cbs.add_session(client, ok.csr_sessionid, back, a.csa_cb_program, cred);
    if let (Some(conn), true) = (
        &cx.ctx.back,
        ok.csr_flags & session_flags::CONN_BACK_CHAN != 0,
    ) {
        cbs.bind(client, &ok.csr_sessionid, conn);
    }
    Ok(ok)
}

/// Writes the record of a client CREATE_SESSION confirmed, before the reply says so.
fn record_client(cx: &Cx<'_>, client: state4::ClientId) {
    let (Some(records), Some(c)) = (&cx.s.records, cx.s.state.client(client)) else {
        return;
    };
    if let Err(e) = records.record(client, &c.owner, c.principal) {
        tracing::warn!(dir = %records.dir().display(), error = %e, "cannot record an NFSv4 client: it cannot reclaim its opens after a restart");
    }
}

fn destroy_session(cx: &mut Cx<'_>, id: &nfs4::types::Sessionid4) -> Result<(), Nfsstat4> {
    let client = cx.s.state.session(id)?.client;
    cx.s.state.destroy_session(id)?;
    cx.s.callbacks.remove_session(client, id);
    Ok(())
}

fn destroy_clientid(cx: &mut Cx<'_>, id: u64) -> Result<(), Nfsstat4> {
    cx.s.state.destroy_clientid(id)?;
    cx.s.callbacks.retain(|s| cx.s.state.session(s).is_ok());
    if let Some(r) = &cx.s.records {
        r.forget(id);
    }
    Ok(())
}

/// BACKCHANNEL_CTL: a new callback program and security for this COMPOUND's session.
fn backchannel_ctl(cx: &mut Cx<'_>, a: &nfs4::ops::BackchannelCtlArgs) -> Result<(), Nfsstat4> {
    let session = cx.session.as_ref().ok_or(Nfsstat4::OpNotInSession)?;
    let cred = callback::callback_cred(&a.bca_sec_parms).ok_or(Nfsstat4::EncrAlgUnsupp)?;
    let cbs = &cx.s.callbacks;
    cbs.set_program(session.client, &session.id, a.bca_cb_program, cred);
    Ok(())
}

fn bind_conn(cx: &mut Cx<'_>, a: &BindConnToSessionArgs) -> Result<BindConnToSessionOk, Nfsstat4> {
    let session = cx.s.state.session(&a.bctsa_sessid)?;
    // The server's choice where the client leaves one: both directions.
    let dir = match (a.bctsa_dir, &cx.ctx.back) {
        (ChannelDirFromClient4::Fore, _) | (_, None) => ChannelDirFromServer4::Fore,
        (ChannelDirFromClient4::Back, Some(_)) => ChannelDirFromServer4::Back,
        (ChannelDirFromClient4::ForeOrBoth | ChannelDirFromClient4::BackOrBoth, Some(_)) => {
            ChannelDirFromServer4::Both
        }
    };
    if let (Some(conn), true) = (&cx.ctx.back, dir != ChannelDirFromServer4::Fore) {
        cx.s.callbacks.bind(session.client, &session.id, conn);
    }
    Ok(BindConnToSessionOk {
        bctsr_sessid: session.id,
        bctsr_dir: dir,
        bctsr_use_conn_in_rdma_mode: false,
    })
}

/// RECLAIM_COMPLETE (RFC 8881 section 18.51). With `rca_one_fs` it speaks of the current
/// filehandle's file system only, which matters to a server that migrates file systems;
/// granary does not, so it only checks there is a current filehandle (the client's
/// global RECLAIM_COMPLETE, which ends its reclaims, follows).
fn reclaim_complete(cx: &mut Cx<'_>, one_fs: bool) -> Result<(), Nfsstat4> {
    let client = cx.client()?;
    if one_fs {
        cx.cur()?;
        return Ok(());
    }
    cx.s.state.reclaim_complete(client)?;
    if !cx.s.state.in_grace(cx.now) {
        // The last client of the previous run is done: NLM may grant new locks too.
        cx.s.core.lock_grace.end(locks::Protocol::Nfs4);
    }
    Ok(())
}

fn test_stateid(cx: &mut Cx<'_>, sids: &[nfs4::Stateid4]) -> Result<TestStateidOk, Nfsstat4> {
    let client = cx.client()?;
    Ok(TestStateidOk(cx.s.state.test_stateids(client, sids)))
}

fn free_stateid(cx: &mut Cx<'_>, sid: &nfs4::Stateid4) -> Result<(), Nfsstat4> {
    let client = cx.client()?;
    let sid = cx.stateid(sid)?;
    cx.s.state.free_stateid(client, &sid)
}
