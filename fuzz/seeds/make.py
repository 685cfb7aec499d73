#!/usr/bin/env python3
"""Writes the small committed seed corpus of the fuzz targets (run from fuzz/)."""
import struct

def u32(*v):
    return b"".join(struct.pack(">I", x) for x in v)

def opaque(b):
    return u32(len(b)) + b + b"\0" * (-len(b) % 4)

def auth_sys(uid=1000, gid=1000, gids=(1000,)):
    body = u32(1) + opaque(b"fuzzhost") + u32(uid, gid, len(gids), *gids)
    return u32(1) + opaque(body)

def call(xid, prog, vers, proc, args=b"", cred=None):
    cred = cred if cred is not None else u32(0, 0)
    return u32(xid, 0, 2, prog, vers, proc) + cred + u32(0, 0) + args

NFS, MOUNT, NLM, NSM = 100003, 100005, 100021, 100024

def nlm_lock(name=b"fuzzhost", svid=7, off=0, length=0):
    return opaque(name) + opaque(b"\1" * 32) + opaque(b"7@fuzzhost") + u32(svid) + struct.pack(">QQ", off, length)
seeds = {
    "null": call(1, NFS, 3, 0),
    "mnt_root": call(2, MOUNT, 3, 1, opaque(b"/"), auth_sys()),
    "mnt_dotted": call(3, MOUNT, 3, 1, opaque(b"//./"), auth_sys()),
    "dump": call(4, MOUNT, 3, 2),
    "export": call(5, MOUNT, 3, 5),
    "getattr_junk_fh": call(6, NFS, 3, 1, opaque(b"\1" * 32), auth_sys()),
    "lookup": call(7, NFS, 3, 3, opaque(b"\1" * 32) + opaque(b"name"), auth_sys(0, 0, ())),
    "commit_overflow": call(8, NFS, 3, 21, opaque(b"\1" * 32) + struct.pack(">QI", 2**64 - 2, 16)),
    "big_cred": u32(9, 0, 2, NFS, 3, 0) + u32(1) + opaque(b"\0" * 404) + u32(0, 0),
    "rpc_v3": u32(10, 0, 3, NFS, 3, 0) + u32(0, 0, 0, 0),
    "nlm_test": call(11, NLM, 4, 1, opaque(b"ck") + u32(1) + nlm_lock()),
    "nlm_lock_block": call(12, NLM, 4, 2, opaque(b"ck") + u32(1, 1) + nlm_lock() + u32(0, 3)),
    "nlm_unlock_msg": call(13, NLM, 4, 9, opaque(b"ck") + nlm_lock(off=2**64 - 1, length=2)),
    "nlm_share": call(14, NLM, 4, 20, opaque(b"ck") + opaque(b"h") + opaque(b"\1" * 32) + opaque(b"o") + u32(3, 3, 0)),
    "nlm_free_all": call(15, NLM, 4, 23, opaque(b"fuzzhost") + u32(5)),
    "nsm_notify": call(16, NSM, 1, 6, opaque(b"fuzzhost") + u32(3)),
    "nsm_mon": call(17, NSM, 1, 2, opaque(b"h") + opaque(b"127.0.0.1") + u32(100021, 4, 16) + b"\0" * 16),
}
for name, body in seeds.items():
    open(f"seeds/rpc_call/{name}", "wb").write(body)
    last = struct.pack(">I", (1 << 31) | len(body)) + body
    open(f"seeds/record_marking/{name}", "wb").write(last)
half = len(seeds["mnt_root"]) // 2
two = (struct.pack(">I", half) + seeds["mnt_root"][:half]
       + struct.pack(">I", (1 << 31) | (len(seeds["mnt_root"]) - half)) + seeds["mnt_root"][half:])
open("seeds/record_marking/two_fragments", "wb").write(two)
