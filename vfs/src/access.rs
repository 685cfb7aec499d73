//! POSIX permission checks from mode bits and a credential.

use crate::types::{AccessMask, Attr, Cred, FileType};

/// Read, write and execute/search bits, as in `rwx`.
pub const R: u32 = 4;
pub const W: u32 = 2;
pub const X: u32 = 1;

/// True if `cred` has all of `want` (`R | W | X`) on a file with `attr`, by POSIX rules:
/// the owner class, else the group class, else other; root passes every check except
/// execute of a non-directory with no execute bit at all.
#[must_use]
pub fn mode_allows(attr: &Attr, cred: &Cred, want: u32) -> bool {
    debug_assert!(want & !7 == 0, "want must be a combination of R, W, X");
    if cred.is_root() {
        let needs_any_x = want & X != 0 && attr.file_type != FileType::Directory;
        return !needs_any_x || attr.mode & 0o111 != 0;
    }
    let bits = if cred.uid == attr.uid {
        (attr.mode >> 6) & 7
    } else if cred.in_group(attr.gid) {
        (attr.mode >> 3) & 7
    } else {
        attr.mode & 7
    };
    bits & want == want
}

/// The NFSv3 ACCESS answer: which of `want` the credential would be granted.
/// `writable` is false on read-only exports, where modify/extend/delete are never granted.
#[must_use]
pub fn access_mask(attr: &Attr, cred: &Cred, want: AccessMask, writable: bool) -> AccessMask {
    let mut granted = 0;
    let is_dir = attr.is_dir();
    if mode_allows(attr, cred, R) {
        granted |= AccessMask::READ;
    }
    if mode_allows(attr, cred, X) {
        granted |= if is_dir {
            AccessMask::LOOKUP
        } else {
            AccessMask::EXECUTE
        };
    }
    if writable && mode_allows(attr, cred, W) {
        granted |= AccessMask::MODIFY | AccessMask::EXTEND;
        if is_dir {
            granted |= AccessMask::DELETE;
        }
    }
    AccessMask(granted & want.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{DeviceNumber, FileId};
    use gtime::Timestamp;

    fn attr(file_type: FileType, mode: u32, uid: u32, gid: u32) -> Attr {
        Attr {
            file_type,
            mode,
            nlink: 1,
            uid,
            gid,
            size_bytes: 0,
            used_bytes: 0,
            rdev: DeviceNumber::default(),
            fsid: 0,
            fileid: FileId(1),
            generation: 0,
            atime: Timestamp::default(),
            mtime: Timestamp::default(),
            ctime: Timestamp::default(),
        }
    }

    fn user(uid: u32, gid: u32, groups: &[u32]) -> Cred {
        Cred {
            uid,
            gid,
            groups: groups.to_vec(),
        }
    }

    #[test]
    fn owner_group_other_classes_are_exclusive() {
        let a = attr(FileType::Regular, 0o604, 10, 20);
        assert!(mode_allows(&a, &user(10, 99, &[]), R | W));
        // A group member gets the group bits (none), not other's.
        assert!(!mode_allows(&a, &user(11, 20, &[]), R));
        assert!(!mode_allows(&a, &user(11, 5, &[20]), R));
        assert!(mode_allows(&a, &user(11, 5, &[]), R));
        assert!(!mode_allows(&a, &user(11, 5, &[]), W));
    }

    #[test]
    fn root_needs_some_execute_bit_on_files_only() {
        let file = attr(FileType::Regular, 0o600, 10, 20);
        assert!(mode_allows(&file, &Cred::root(), R | W));
        assert!(!mode_allows(&file, &Cred::root(), X));
        let dir = attr(FileType::Directory, 0o000, 10, 20);
        assert!(mode_allows(&dir, &Cred::root(), R | W | X));
    }

    #[test]
    fn access_mask_on_read_only_export_grants_no_writes() {
        let dir = attr(FileType::Directory, 0o777, 0, 0);
        let got = access_mask(&dir, &user(1, 1, &[]), AccessMask(AccessMask::ALL), false);
        assert_eq!(got.0, AccessMask::READ | AccessMask::LOOKUP);
        let got = access_mask(&dir, &user(1, 1, &[]), AccessMask(AccessMask::ALL), true);
        assert_eq!(got.0, AccessMask::ALL & !AccessMask::EXECUTE);
    }
}
