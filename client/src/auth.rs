//! Credentials the client sends: `AUTH_NONE` or `AUTH_SYS`, encoded once when set so that
//! each call only clones a `Bytes`.

use bytes::Bytes;
use rpc::msg::{Auth, AuthSys, OpaqueAuth, AUTH_NONE, AUTH_SYS};
use xdr::Encode;

use crate::limits::DEFAULT_MACHINE_NAME;

/// `AUTH_SYS` as `uid`, `gid` and supplementary `gids`, from machine `granary-client`.
///
/// Nothing is checked: more than 16 groups or a longer machine name are sent as given, so
/// tests can check that the server refuses them.
#[must_use]
pub fn auth_sys(uid: u32, gid: u32, gids: &[u32]) -> Auth {
    Auth::Sys(AuthSys {
        stamp: 0,
        machine_name: Bytes::from_static(DEFAULT_MACHINE_NAME.as_bytes()),
        uid,
        gid,
        gids: gids.to_vec(),
    })
}

/// The identity a new connection uses: `AUTH_SYS` root (uid 0, gid 0, no groups).
#[must_use]
pub fn default_auth() -> Auth {
    auth_sys(0, 0, &[])
}

/// The `opaque_auth` credential for `auth`.
#[must_use]
pub fn credential(auth: &Auth) -> OpaqueAuth {
    match auth {
        Auth::None => OpaqueAuth {
            flavor: AUTH_NONE,
            body: Bytes::new(),
        },
        Auth::Sys(sys) => OpaqueAuth {
            flavor: AUTH_SYS,
            body: sys.to_xdr(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auth_sys_credential_round_trips() {
        let auth = auth_sys(1000, 100, &[4, 27]);
        let cred = credential(&auth);
        assert_eq!(cred.flavor, AUTH_SYS);
        assert_eq!(Auth::from_cred(&cred), Ok(auth));
    }

    #[test]
    fn none_has_an_empty_body() {
        let cred = credential(&Auth::None);
        assert_eq!((cred.flavor, cred.body.len()), (AUTH_NONE, 0));
    }
}
