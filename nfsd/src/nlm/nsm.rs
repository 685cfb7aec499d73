//! The NSM v1 procedures (XNFS chapter 11): granary is the status monitor of its own
//! locks, so a client's statd finds it where it looks for the server's (program 100024
//! through the server's portmapper).
//!
//! - SM_NOTIFY from a host that rebooted frees every NLM lock, waiter and share that
//!   host held (matched by name and address: from another address only the hosts at
//!   that address; from loopback, a local statd forwarding, any address), and calls back
//!   the SM_MON registrations watching that name;
//! - SM_STAT answers this server's state number; SM_SIMU_CRASH takes a new one and tells
//!   the recorded hosts, as after a restart;
//! - SM_MON, SM_UNMON, SM_UNMON_ALL are for local callers only (as rpc.statd: a remote
//!   caller gets `stat_fail`); registrations live in memory.

use std::net::{IpAddr, Ipv4Addr};

use nlm::limits::{NSM_PROGRAM, NSM_V1};
use nlm::nsm::*;
use rpc::{procedure, CacheClass, CallContext, Procedure};
use xdr::Encode;

use super::{Callback, NlmState};

use CacheClass::Idempotent;

pub const PROGRAM: u32 = NSM_PROGRAM;
pub const VERSION: u32 = NSM_V1;

/// Every NSM result is two words.
const REPLY_BYTES: usize = 8;

pub static PROCEDURES: [Procedure<NlmState>; 7] = [
    procedure!("sm_null", null, 0, Idempotent),
    procedure!("sm_stat", stat, REPLY_BYTES, Idempotent),
    procedure!("sm_mon", mon, REPLY_BYTES, Idempotent),
    procedure!("sm_unmon", unmon, REPLY_BYTES, Idempotent),
    procedure!("sm_unmon_all", unmon_all, REPLY_BYTES, Idempotent),
    procedure!("sm_simu_crash", simu_crash, 0, Idempotent),
    procedure!("sm_notify", notify, 0, Idempotent),
];

fn local(ctx: &CallContext) -> bool {
    ctx.peer.ip().to_canonical().is_loopback()
}

fn null(_: &NlmState, _: &CallContext, _: Void) -> Void {
    Void
}

fn stat(s: &NlmState, _: &CallContext, _: SmName) -> StatRes {
    StatRes {
        res_stat: SmRes::StatSucc,
        state: s.monitor.state(),
    }
}

fn mon(s: &NlmState, ctx: &CallContext, m: Mon) -> StatRes {
    let ok = local(ctx) && s.monitor.add_watch(m);
    if !ok {
        rpc::warn_limited!(rpc::ratelog::Kind::Refused, peer = %ctx.peer, "SM_MON refused: only local callers, at most MAX_NSM_WATCHES");
    }
    StatRes {
        res_stat: if ok { SmRes::StatSucc } else { SmRes::StatFail },
        state: s.monitor.state(),
    }
}

fn unmon(s: &NlmState, ctx: &CallContext, id: MonId) -> SmStat {
    if local(ctx) {
        s.monitor.remove_watch(&id);
    }
    SmStat {
        state: s.monitor.state(),
    }
}

fn unmon_all(s: &NlmState, ctx: &CallContext, id: MyId) -> SmStat {
    if local(ctx) {
        s.monitor.remove_watches_of(&id);
    }
    SmStat {
        state: s.monitor.state(),
    }
}

fn simu_crash(s: &NlmState, ctx: &CallContext, _: Void) -> Void {
    if !local(ctx) {
        rpc::warn_limited!(rpc::ratelog::Kind::Refused, peer = %ctx.peer, "SM_SIMU_CRASH refused: only local callers");
        return Void;
    }
    let state = s.monitor.bump_state();
    tracing::info!(
        state,
        "SM_SIMU_CRASH: new NSM state; telling the recorded hosts"
    );
    s.notify_hosts(&s.monitor.hosts());
    Void
}

/// SM_NOTIFY: host `mon_name` rebooted.
fn notify(s: &NlmState, ctx: &CallContext, c: StatChge) -> Void {
    let name = c.mon_name.as_bytes();
    let peer = ctx.peer.ip().to_canonical();
    let shown = String::from_utf8_lossy(name);
    let by_address = shown.parse::<IpAddr>().ok().map(|a| a.to_canonical());
    let freed: Vec<_> = s
        .monitor
        .hosts()
        .into_iter()
        .filter(|(addr, n)| {
            let named = n.as_ref() == name || by_address == Some(*addr);
            named && (*addr == peer || peer.is_loopback())
        })
        .collect();
    tracing::info!(peer = %peer, mon_name = %shown, state = c.state, hosts = freed.len(), "SM_NOTIFY: a host rebooted");
    for (addr, n) in freed {
        s.free_client(addr, &n);
    }
    for w in s.monitor.watches_of(name) {
        let status = Status {
            mon_name: c.mon_name.clone(),
            state: c.state,
            priv_: w.priv_,
        };
        let my = &w.mon_id.my_id;
        let host = String::from_utf8_lossy(my.my_name.as_bytes())
            .parse::<IpAddr>()
            .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
        s.send(Callback {
            host,
            program: my.my_prog as u32,
            version: my.my_vers as u32,
            procedure: my.my_proc as u32,
            args: status.to_xdr(),
            local_name_first: false,
            done: None,
        });
    }
    Void
}

impl NlmState {
    /// Tells `hosts` with SM_NOTIFY that this server has a new state number (after a
    /// restart, or SM_SIMU_CRASH): their lock managers then reclaim.
    pub fn notify_hosts(&self, hosts: &[super::monitor::Host]) {
        let state = self.monitor.state();
        for (addr, name) in hosts {
            let host = *addr;
            let shown = String::from_utf8_lossy(name).into_owned();
            tracing::info!(%host, name = %shown, state, "sending SM_NOTIFY");
            self.send(Callback {
                host,
                program: PROGRAM,
                version: VERSION,
                procedure: Proc::Notify as u32,
                // stat_chge without its mon_name, which the outbox puts first.
                args: state.to_xdr(),
                local_name_first: true,
                done: Some(Box::new(move |r| match r {
                    Ok(_) => tracing::info!(%host, name = %shown, "SM_NOTIFY delivered"),
                    Err(e) => {
                        tracing::warn!(%host, name = %shown, error = %e, "SM_NOTIFY not delivered")
                    }
                })),
            });
        }
    }
}
