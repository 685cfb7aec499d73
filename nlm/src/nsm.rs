//! NSM version 1 (XNFS chapter 11, `sm_inter.x`): the status monitor a lock server asks
//! to watch its clients, and that hosts tell when they reboot (`SM_NOTIFY`).

use xdr::{bounded_opaque, xdr_enum, xdr_struct};

use crate::limits::{SM_MAXSTRLEN, SM_PRIV_BYTES};
pub use crate::nlm4::Void;

bounded_opaque! {
    /// A host name in NSM arguments, at most [`SM_MAXSTRLEN`] bytes.
    SmName, "sm_name", SM_MAXSTRLEN
}

xdr_struct! {
    /// `my_id`: who to call back when a monitored host reboots: an RPC procedure
    /// (`my_prog`, `my_vers`, `my_proc`) on host `my_name`.
    #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
    pub struct MyId {
        pub my_name: SmName,
        pub my_prog: i32,
        pub my_vers: i32,
        pub my_proc: i32,
    }
}

xdr_struct! {
    /// `mon_id`: a monitored host and who watches it (SM_UNMON's arguments).
    #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
    pub struct MonId {
        pub mon_name: SmName,
        pub my_id: MyId,
    }
}

xdr_struct! {
    /// `mon`: SM_MON's arguments; `priv_` (XDR `priv`) comes back in the callback.
    #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
    pub struct Mon {
        pub mon_id: MonId,
        pub priv_: [u8; SM_PRIV_BYTES],
    }
}

xdr_struct! {
    /// `stat_chge`: SM_NOTIFY's arguments: host `mon_name` now has NSM state `state`.
    #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
    pub struct StatChge {
        pub mon_name: SmName,
        pub state: i32,
    }
}

xdr_struct! {
    /// `sm_stat`: this host's NSM state number (odd while up).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct SmStat {
        pub state: i32,
    }
}

xdr_enum! {
    /// `res`: whether SM_STAT or SM_MON succeeded.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum SmRes {
        StatSucc = 0,
        StatFail = 1,
    }
}

xdr_struct! {
    /// `sm_stat_res`: SM_STAT's and SM_MON's result.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct StatRes {
        pub res_stat: SmRes,
        pub state: i32,
    }
}

xdr_struct! {
    /// `status`: the callback a monitor sends to `my_id` when a monitored host reboots.
    #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
    pub struct Status {
        pub mon_name: SmName,
        pub state: i32,
        pub priv_: [u8; SM_PRIV_BYTES],
    }
}

xdr_enum! {
    /// NSM v1 procedure numbers.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum Proc {
        Null = 0,
        Stat = 1,
        Mon = 2,
        Unmon = 3,
        UnmonAll = 4,
        SimuCrash = 5,
        Notify = 6,
    }
}
