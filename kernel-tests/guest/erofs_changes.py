#!/usr/bin/env python3
"""erofs_changes.py DIR: every kind of change to a read-only EROFS tree (create, write,
truncate, mkdir, rmdir, unlink, rename, link, symlink, mkfifo, chmod, chown, utime), one
line each: the errno name (EROFS expected, "refused" for EROFS or EACCES where the NFS
client decides, see call()) or "ok". Used by check.sh's erofs
group on the loop mount (the reference) and on the NFS mounts."""

import errno
import os
import sys

d = sys.argv[1]


def call(what, fn, *args, refused=False):
    """refused=True: EROFS and EACCES both print "refused". Opening a file for writing
    and truncating it are refused by the NFS client itself after an ACCESS call, which can
    only withhold the write bits (EACCES): NFSv3 has no way to say "read-only file system"
    there (knfsd and granary alike); the errno itself is a note."""
    try:
        fn(*args)
        res = "ok"
    except OSError as e:
        res = errno.errorcode.get(e.errno, str(e.errno))
    if refused and res in ("EROFS", "EACCES"):
        print(f"note: {what}: {res}")
        res = "refused"
    print(f"{what}: {res}", flush=True)


call("create", lambda: os.close(os.open(f"{d}/new", os.O_WRONLY | os.O_CREAT, 0o644)))
call("open for writing", lambda: os.close(os.open(f"{d}/text-4097", os.O_WRONLY)), refused=True)
call("truncate", os.truncate, f"{d}/text-4097", 1, refused=True)
call("mkdir", os.mkdir, f"{d}/newdir")
call("rmdir", os.rmdir, f"{d}/sticky")
call("unlink", os.unlink, f"{d}/text-0")
call("rename", os.rename, f"{d}/text-0", f"{d}/renamed")
call("link", os.link, f"{d}/text-0", f"{d}/hard")
call("symlink", os.symlink, "x", f"{d}/sym")
call("mkfifo", os.mkfifo, f"{d}/fifo2")
call("chmod", os.chmod, f"{d}/text-0", 0o600)
call("chown", os.chown, f"{d}/text-0", 1, 1)
call("utime", os.utime, f"{d}/text-0", (1, 1))
