//! Proptest strategies for every NFSv3 and MOUNT v3 wire type, shared by the test files.
//! Variable-length items stay small so that truncation tests (quadratic in length) are
//! quick; the limits themselves are tested with hand-built values.
#![allow(dead_code)]

use bytes::Bytes;
use granary_nfs3::mount::{
    DirPath, ExportNode, Exports, MntName, MntRes, MountBody, MountList, Mountstat3,
};
use granary_nfs3::nfs::*;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;

pub fn bytes(max_len: usize) -> impl Strategy<Value = Bytes> {
    vec(any::<u8>(), 0..=max_len).prop_map(Bytes::from)
}

pub fn fh() -> impl Strategy<Value = NfsFh3> {
    bytes(64).prop_map(NfsFh3)
}

pub fn filename() -> impl Strategy<Value = Filename3> {
    bytes(12).prop_map(Filename3)
}

pub fn path() -> impl Strategy<Value = NfsPath3> {
    bytes(20).prop_map(NfsPath3)
}

/// Every status except `NFS3_OK`: what a `Fail` arm may carry.
pub fn fail_status() -> impl Strategy<Value = Nfsstat3> {
    let all: Vec<Nfsstat3> = (1..=10_008).filter_map(Nfsstat3::from_u32).collect();
    select(all)
}

pub fn ftype() -> impl Strategy<Value = Ftype3> {
    (1..=7u32).prop_map(|v| Ftype3::from_u32(v).expect("1..=7 are ftype3 values"))
}

pub fn stable_how() -> impl Strategy<Value = StableHow> {
    (0..=2u32).prop_map(|v| StableHow::from_u32(v).expect("0..=2 are stable_how values"))
}

pub fn time() -> impl Strategy<Value = Nfstime3> {
    (any::<u32>(), any::<u32>()).prop_map(|(seconds, nseconds)| Nfstime3 { seconds, nseconds })
}

pub fn specdata() -> impl Strategy<Value = Specdata3> {
    (any::<u32>(), any::<u32>()).prop_map(|(specdata1, specdata2)| Specdata3 {
        specdata1,
        specdata2,
    })
}

pub fn fattr() -> impl Strategy<Value = Fattr3> {
    (
        (
            ftype(),
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
        ),
        (
            any::<u64>(),
            any::<u64>(),
            specdata(),
            any::<u64>(),
            any::<u64>(),
        ),
        (time(), time(), time()),
    )
        .prop_map(
            |((ftype, mode, nlink, uid, gid), (size, used, rdev, fsid, fileid), (a, m, c))| {
                Fattr3 {
                    ftype,
                    mode,
                    nlink,
                    uid,
                    gid,
                    size,
                    used,
                    rdev,
                    fsid,
                    fileid,
                    atime: a,
                    mtime: m,
                    ctime: c,
                }
            },
        )
}

pub fn post_op_attr() -> impl Strategy<Value = PostOpAttr> {
    proptest::option::of(fattr()).prop_map(PostOpAttr)
}

pub fn wcc_data() -> impl Strategy<Value = WccData> {
    let wcc_attr = (any::<u64>(), time(), time()).prop_map(|(size, mtime, ctime)| WccAttr {
        size,
        mtime,
        ctime,
    });
    (proptest::option::of(wcc_attr), post_op_attr()).prop_map(|(before, after)| WccData {
        before: PreOpAttr(before),
        after,
    })
}

pub fn post_op_fh() -> impl Strategy<Value = PostOpFh3> {
    proptest::option::of(fh()).prop_map(PostOpFh3)
}

pub fn set_time() -> impl Strategy<Value = SetTime> {
    prop_oneof![
        Just(SetTime::DontChange),
        Just(SetTime::SetToServerTime),
        time().prop_map(SetTime::SetToClientTime),
    ]
}

pub fn sattr() -> impl Strategy<Value = Sattr3> {
    (
        any::<Option<u32>>(),
        any::<Option<u32>>(),
        any::<Option<u32>>(),
        any::<Option<u64>>(),
        set_time(),
        set_time(),
    )
        .prop_map(|(mode, uid, gid, size, atime, mtime)| Sattr3 {
            mode,
            uid,
            gid,
            size,
            atime,
            mtime,
        })
}

pub fn dirop() -> impl Strategy<Value = DirOpArgs3> {
    (fh(), filename()).prop_map(|(dir, name)| DirOpArgs3 { dir, name })
}

pub fn create_how() -> impl Strategy<Value = CreateHow3> {
    prop_oneof![
        sattr().prop_map(CreateHow3::Unchecked),
        sattr().prop_map(CreateHow3::Guarded),
        any::<[u8; 8]>().prop_map(CreateHow3::Exclusive),
    ]
}

pub fn device_data() -> impl Strategy<Value = DeviceData3> {
    (sattr(), specdata()).prop_map(|(dev_attributes, spec)| DeviceData3 {
        dev_attributes,
        spec,
    })
}

pub fn mknod_data() -> impl Strategy<Value = MknodData3> {
    prop_oneof![
        device_data().prop_map(MknodData3::Chr),
        device_data().prop_map(MknodData3::Blk),
        sattr().prop_map(MknodData3::Sock),
        sattr().prop_map(MknodData3::Fifo),
        Just(MknodData3::Reg),
        Just(MknodData3::Dir),
        Just(MknodData3::Lnk),
    ]
}

pub fn entry() -> impl Strategy<Value = Entry3> {
    (any::<u64>(), filename(), any::<u64>()).prop_map(|(fileid, name, cookie)| Entry3 {
        fileid,
        name,
        cookie,
    })
}

pub fn entryplus() -> impl Strategy<Value = Entryplus3> {
    (entry(), post_op_attr(), post_op_fh()).prop_map(|(e, name_attributes, name_handle)| {
        Entryplus3 {
            fileid: e.fileid,
            name: e.name,
            cookie: e.cookie,
            name_attributes,
            name_handle,
        }
    })
}

/// A result: the ok body or a failure status with the fail body.
pub fn res<T: std::fmt::Debug, F: std::fmt::Debug>(
    ok: impl Strategy<Value = T>,
    fail: impl Strategy<Value = F>,
) -> impl Strategy<Value = Res3<T, F>> {
    prop_oneof![
        ok.prop_map(Res3::Ok),
        (fail_status(), fail).prop_map(|(status, body)| Res3::Fail(status, body)),
    ]
}

// ---- Arguments of every NFS procedure ----

pub fn getattr_args() -> impl Strategy<Value = GetattrArgs> {
    fh().prop_map(|object| GetattrArgs { object })
}

pub fn setattr_args() -> impl Strategy<Value = SetattrArgs> {
    (fh(), sattr(), proptest::option::of(time())).prop_map(|(object, new_attributes, g)| {
        SetattrArgs {
            object,
            new_attributes,
            guard: SattrGuard3(g),
        }
    })
}

pub fn lookup_args() -> impl Strategy<Value = LookupArgs> {
    dirop().prop_map(|what| LookupArgs { what })
}

pub fn access_args() -> impl Strategy<Value = AccessArgs> {
    (fh(), any::<u32>()).prop_map(|(object, access)| AccessArgs { object, access })
}

pub fn readlink_args() -> impl Strategy<Value = ReadlinkArgs> {
    fh().prop_map(|symlink| ReadlinkArgs { symlink })
}

pub fn read_args() -> impl Strategy<Value = ReadArgs> {
    (fh(), any::<u64>(), any::<u32>()).prop_map(|(file, offset, count)| ReadArgs {
        file,
        offset,
        count,
    })
}

pub fn write_args() -> impl Strategy<Value = WriteArgs> {
    (fh(), any::<u64>(), any::<u32>(), stable_how(), bytes(40)).prop_map(
        |(file, offset, count, stable, data)| WriteArgs {
            file,
            offset,
            count,
            stable,
            data,
        },
    )
}

pub fn create_args() -> impl Strategy<Value = CreateArgs> {
    (dirop(), create_how()).prop_map(|(where_, how)| CreateArgs { where_, how })
}

pub fn mkdir_args() -> impl Strategy<Value = MkdirArgs> {
    (dirop(), sattr()).prop_map(|(where_, attributes)| MkdirArgs { where_, attributes })
}

pub fn symlink_args() -> impl Strategy<Value = SymlinkArgs> {
    (dirop(), sattr(), path()).prop_map(|(where_, symlink_attributes, symlink_data)| SymlinkArgs {
        where_,
        symlink: SymlinkData3 {
            symlink_attributes,
            symlink_data,
        },
    })
}

pub fn mknod_args() -> impl Strategy<Value = MknodArgs> {
    (dirop(), mknod_data()).prop_map(|(where_, what)| MknodArgs { where_, what })
}

pub fn remove_args() -> impl Strategy<Value = RemoveArgs> {
    dirop().prop_map(|object| RemoveArgs { object })
}

pub fn rename_args() -> impl Strategy<Value = RenameArgs> {
    (dirop(), dirop()).prop_map(|(from, to)| RenameArgs { from, to })
}

pub fn link_args() -> impl Strategy<Value = LinkArgs> {
    (fh(), dirop()).prop_map(|(file, link)| LinkArgs { file, link })
}

pub fn readdir_args() -> impl Strategy<Value = ReaddirArgs> {
    (fh(), any::<u64>(), any::<[u8; 8]>(), any::<u32>()).prop_map(
        |(dir, cookie, cookieverf, count)| ReaddirArgs {
            dir,
            cookie,
            cookieverf,
            count,
        },
    )
}

pub fn readdirplus_args() -> impl Strategy<Value = ReaddirplusArgs> {
    (readdir_args(), any::<u32>()).prop_map(|(a, maxcount)| ReaddirplusArgs {
        dir: a.dir,
        cookie: a.cookie,
        cookieverf: a.cookieverf,
        dircount: a.count,
        maxcount,
    })
}

pub fn fsstat_args() -> impl Strategy<Value = FsstatArgs> {
    fh().prop_map(|fsroot| FsstatArgs { fsroot })
}

pub fn fsinfo_args() -> impl Strategy<Value = FsinfoArgs> {
    fh().prop_map(|fsroot| FsinfoArgs { fsroot })
}

pub fn pathconf_args() -> impl Strategy<Value = PathconfArgs> {
    fh().prop_map(|object| PathconfArgs { object })
}

pub fn commit_args() -> impl Strategy<Value = CommitArgs> {
    (fh(), any::<u64>(), any::<u32>()).prop_map(|(file, offset, count)| CommitArgs {
        file,
        offset,
        count,
    })
}

// ---- Results of every NFS procedure ----

pub fn getattr_res() -> impl Strategy<Value = GetattrRes> {
    res(
        fattr().prop_map(|obj_attributes| GetattrOk { obj_attributes }),
        Just(Void),
    )
}

pub fn setattr_res() -> impl Strategy<Value = SetattrRes> {
    res(
        wcc_data().prop_map(|obj_wcc| SetattrOk { obj_wcc }),
        wcc_data().prop_map(|obj_wcc| SetattrFail { obj_wcc }),
    )
}

pub fn lookup_res() -> impl Strategy<Value = LookupRes> {
    res(
        (fh(), post_op_attr(), post_op_attr()).prop_map(
            |(object, obj_attributes, dir_attributes)| LookupOk {
                object,
                obj_attributes,
                dir_attributes,
            },
        ),
        post_op_attr().prop_map(|dir_attributes| LookupFail { dir_attributes }),
    )
}

pub fn access_res() -> impl Strategy<Value = AccessRes> {
    res(
        (post_op_attr(), any::<u32>()).prop_map(|(obj_attributes, access)| AccessOk {
            obj_attributes,
            access,
        }),
        post_op_attr().prop_map(|obj_attributes| AccessFail { obj_attributes }),
    )
}

pub fn readlink_res() -> impl Strategy<Value = ReadlinkRes> {
    res(
        (post_op_attr(), path()).prop_map(|(symlink_attributes, data)| ReadlinkOk {
            symlink_attributes,
            data,
        }),
        post_op_attr().prop_map(|symlink_attributes| ReadlinkFail { symlink_attributes }),
    )
}

pub fn read_res() -> impl Strategy<Value = ReadRes> {
    res(
        (post_op_attr(), any::<u32>(), any::<bool>(), bytes(40)).prop_map(
            |(file_attributes, count, eof, data)| ReadOk {
                file_attributes,
                count,
                eof,
                data,
            },
        ),
        post_op_attr().prop_map(|file_attributes| ReadFail { file_attributes }),
    )
}

pub fn write_res() -> impl Strategy<Value = WriteRes> {
    res(
        (wcc_data(), any::<u32>(), stable_how(), any::<[u8; 8]>()).prop_map(
            |(file_wcc, count, committed, verf)| WriteOk {
                file_wcc,
                count,
                committed,
                verf,
            },
        ),
        wcc_data().prop_map(|file_wcc| WriteFail { file_wcc }),
    )
}

/// CREATE, MKDIR, SYMLINK and MKNOD share this result.
pub fn create_res() -> impl Strategy<Value = CreateRes> {
    res(
        (post_op_fh(), post_op_attr(), wcc_data()).prop_map(|(obj, obj_attributes, dir_wcc)| {
            CreateOk {
                obj,
                obj_attributes,
                dir_wcc,
            }
        }),
        wcc_data().prop_map(|dir_wcc| CreateFail { dir_wcc }),
    )
}

/// REMOVE and RMDIR share this result.
pub fn remove_res() -> impl Strategy<Value = RemoveRes> {
    res(
        wcc_data().prop_map(|dir_wcc| RemoveOk { dir_wcc }),
        wcc_data().prop_map(|dir_wcc| RemoveFail { dir_wcc }),
    )
}

pub fn rename_res() -> impl Strategy<Value = RenameRes> {
    res(
        (wcc_data(), wcc_data()).prop_map(|(fromdir_wcc, todir_wcc)| RenameOk {
            fromdir_wcc,
            todir_wcc,
        }),
        (wcc_data(), wcc_data()).prop_map(|(fromdir_wcc, todir_wcc)| RenameFail {
            fromdir_wcc,
            todir_wcc,
        }),
    )
}

pub fn link_res() -> impl Strategy<Value = LinkRes> {
    res(
        (post_op_attr(), wcc_data()).prop_map(|(file_attributes, linkdir_wcc)| LinkOk {
            file_attributes,
            linkdir_wcc,
        }),
        (post_op_attr(), wcc_data()).prop_map(|(file_attributes, linkdir_wcc)| LinkFail {
            file_attributes,
            linkdir_wcc,
        }),
    )
}

pub fn readdir_res() -> impl Strategy<Value = ReaddirRes> {
    res(
        (
            post_op_attr(),
            any::<[u8; 8]>(),
            vec(entry(), 0..4),
            any::<bool>(),
        )
            .prop_map(|(dir_attributes, cookieverf, entries, eof)| ReaddirOk {
                dir_attributes,
                cookieverf,
                entries,
                eof,
            }),
        post_op_attr().prop_map(|dir_attributes| ReaddirFail { dir_attributes }),
    )
}

pub fn readdirplus_res() -> impl Strategy<Value = ReaddirplusRes> {
    res(
        (
            post_op_attr(),
            any::<[u8; 8]>(),
            vec(entryplus(), 0..4),
            any::<bool>(),
        )
            .prop_map(|(dir_attributes, cookieverf, entries, eof)| ReaddirplusOk {
                dir_attributes,
                cookieverf,
                entries,
                eof,
            }),
        post_op_attr().prop_map(|dir_attributes| ReaddirplusFail { dir_attributes }),
    )
}

pub fn fsstat_res() -> impl Strategy<Value = FsstatRes> {
    res(
        (post_op_attr(), any::<[u64; 6]>(), any::<u32>()).prop_map(|(obj_attributes, n, inv)| {
            FsstatOk {
                obj_attributes,
                tbytes: n[0],
                fbytes: n[1],
                abytes: n[2],
                tfiles: n[3],
                ffiles: n[4],
                afiles: n[5],
                invarsec: inv,
            }
        }),
        post_op_attr().prop_map(|obj_attributes| FsstatFail { obj_attributes }),
    )
}

pub fn fsinfo_res() -> impl Strategy<Value = FsinfoRes> {
    res(
        (
            post_op_attr(),
            any::<[u32; 7]>(),
            any::<u64>(),
            time(),
            any::<u32>(),
        )
            .prop_map(|(obj_attributes, n, maxfilesize, time_delta, properties)| {
                FsinfoOk {
                    obj_attributes,
                    rtmax: n[0],
                    rtpref: n[1],
                    rtmult: n[2],
                    wtmax: n[3],
                    wtpref: n[4],
                    wtmult: n[5],
                    dtpref: n[6],
                    maxfilesize,
                    time_delta,
                    properties,
                }
            }),
        post_op_attr().prop_map(|obj_attributes| FsinfoFail { obj_attributes }),
    )
}

pub fn pathconf_res() -> impl Strategy<Value = PathconfRes> {
    res(
        (
            post_op_attr(),
            any::<u32>(),
            any::<u32>(),
            any::<[bool; 4]>(),
        )
            .prop_map(|(obj_attributes, linkmax, name_max, b)| PathconfOk {
                obj_attributes,
                linkmax,
                name_max,
                no_trunc: b[0],
                chown_restricted: b[1],
                case_insensitive: b[2],
                case_preserving: b[3],
            }),
        post_op_attr().prop_map(|obj_attributes| PathconfFail { obj_attributes }),
    )
}

pub fn commit_res() -> impl Strategy<Value = CommitRes> {
    res(
        (wcc_data(), any::<[u8; 8]>()).prop_map(|(file_wcc, verf)| CommitOk { file_wcc, verf }),
        wcc_data().prop_map(|file_wcc| CommitFail { file_wcc }),
    )
}

// ---- MOUNT ----

pub fn dirpath() -> impl Strategy<Value = DirPath> {
    bytes(20).prop_map(DirPath)
}

pub fn mnt_name() -> impl Strategy<Value = MntName> {
    bytes(12).prop_map(MntName)
}

pub fn mnt_res() -> impl Strategy<Value = MntRes> {
    let fail: Vec<Mountstat3> = (1..=10_006).filter_map(Mountstat3::from_u32).collect();
    prop_oneof![
        (fh(), vec(any::<u32>(), 0..4)).prop_map(|(fhandle, auth_flavors)| MntRes::Ok {
            fhandle,
            auth_flavors,
        }),
        select(fail).prop_map(MntRes::Fail),
    ]
}

pub fn mount_list() -> impl Strategy<Value = MountList> {
    vec(
        (mnt_name(), dirpath()).prop_map(|(ml_hostname, ml_directory)| MountBody {
            ml_hostname,
            ml_directory,
        }),
        0..4,
    )
    .prop_map(MountList)
}

pub fn exports() -> impl Strategy<Value = Exports> {
    vec(
        (dirpath(), vec(mnt_name(), 0..4))
            .prop_map(|(ex_dir, ex_groups)| ExportNode { ex_dir, ex_groups }),
        0..4,
    )
    .prop_map(Exports)
}
