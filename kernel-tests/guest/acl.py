#!/usr/bin/env python3
"""POSIX ACLs, default ACLs, supplementary groups and set-gid directories through the
kernel client (issue 25): the server's kernel must decide as the caller.

    acl.py ROOT BACKING

root lays the files out in BACKING (the server's directory behind ROOT; for the
reference, ROOT itself) with setfacl; each case runs in a forked child that takes the
caller's ids (setgroups, setresgid, setresuid) and acts on ROOT; the parent prints the
result (ok or the errno name). What CREATE and MKDIR made is read back in BACKING
(owner, group, mode, getfacl). suite.sh compares the output with the guest's tmpfs and
runs it on knfsd exporting a tmpfs too, in the same boot.
"""

import errno
import os
import subprocess
import sys

ALICE, BOB, TEAM = 1001, 1002, 2000


def sh(*args):
    subprocess.run(args, check=True)


def setfacl(path, *args):
    sh("setfacl", *args, path)


def getfacl(path):
    out = subprocess.run(["getfacl", "-cp", path], check=True, capture_output=True, text=True)
    return " ".join(sorted(line for line in out.stdout.split("\n") if line))


def acl_of(path):
    return getfacl(path) if os.path.exists(path) else "missing"


def layout(b):
    def f(name, mode, data=b"data\n", owner=(0, 0)):
        p = os.path.join(b, name)
        with open(p, "wb") as fh:
            fh.write(data)
        os.chown(p, *owner)
        os.chmod(p, mode)
        return p

    def d(name, mode, owner=(0, 0)):
        p = os.path.join(b, name)
        os.mkdir(p)
        os.chown(p, *owner)
        os.chmod(p, mode)
        return p

    os.chmod(b, 0o755)
    setfacl(f("deny", 0o644), "-m", f"u:{ALICE}:---")
    setfacl(f("grant", 0o600), "-m", f"u:{ALICE}:rw-")
    setfacl(f("wdeny", 0o666), "-m", f"u:{ALICE}:r--")
    setfacl(d("rxonly", 0o777), "-m", f"u:{ALICE}:r-x")
    f("rxonly/victim", 0o666)
    setfacl(d("gdir", 0o755), "-m", f"u:{ALICE}:rwx")
    setfacl(d("inherit", 0o755), "-m", f"u:{ALICE}:rwx", "-d", "-m", f"u:{BOB}:rwx")
    f("team", 0o640, owner=(0, TEAM))
    d("teamdir", 0o770, owner=(0, TEAM))
    d("sgid", 0o2775, owner=(0, TEAM))
    os.chmod(os.path.join(b, "sgid"), 0o2775)


def as_user(uid, groups, fn):
    """fn() in a child with uid/gid uid and the supplementary groups; its result."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        # The client's umask would take bits from CREATE/MKDIR before the server sees
        # them, and Linux's client applies it even under a default ACL when the server
        # lacks the NFSACL side protocol (granary has none; knfsd has): 0 keeps the
        # mode the same on every server, so the default ACL is what is compared.
        os.umask(0)
        try:
            os.setgroups(groups)
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            fn()
            res = "ok"
        except OSError as e:
            res = errno.errorcode.get(e.errno, str(e.errno))
        os.write(w, res.encode())
        os._exit(0)
    os.close(w)
    res = os.read(r, 64).decode()
    os.close(r)
    os.waitpid(pid, 0)
    return res


def read(p):
    with open(p, "rb") as fh:
        fh.read()


def write(p):
    with open(p, "r+b") as fh:
        fh.write(b"w")


def may_read(p):
    """access(R_OK), which the client asks the server (ACCESS)."""
    if not os.access(p, os.R_OK):
        raise PermissionError(errno.EACCES, "access")


def create(p, mode=0o644):
    os.close(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode))


def meta(p):
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return "missing"
    return f"{st.st_uid}:{st.st_gid} {st.st_mode & 0o7777:04o}"


def main():
    root, backing = sys.argv[1], sys.argv[2]
    base = os.path.join(backing, "acl")
    os.mkdir(base)
    layout(base)
    r = os.path.join(root, "acl")
    p = lambda name: os.path.join(r, name)
    alice, bob = (ALICE, [ALICE]), (BOB, [BOB])
    member, outsider = (ALICE, [ALICE, TEAM]), (ALICE, [ALICE])

    def case(title, who, fn):
        print(f"{title}: {as_user(who[0], who[1], fn)}")

    print("== acl-deny")
    case("alice read deny", alice, lambda: read(p("deny")))
    case("bob read deny", bob, lambda: read(p("deny")))
    case("alice write wdeny", alice, lambda: write(p("wdeny")))
    case("bob write wdeny", bob, lambda: write(p("wdeny")))
    case("alice truncate wdeny", alice, lambda: os.truncate(p("wdeny"), 0))
    case("alice access(R) deny", alice, lambda: may_read(p("deny")))
    case("bob access(R) deny", bob, lambda: may_read(p("deny")))
    case("alice create in rxonly", alice, lambda: create(p("rxonly/a")))
    case("alice remove in rxonly", alice, lambda: os.unlink(p("rxonly/victim")))
    case("alice rename in rxonly", alice, lambda: os.rename(p("rxonly/victim"), p("rxonly/v2")))
    case("bob create in rxonly", bob, lambda: create(p("rxonly/b")))
    case("bob rename in rxonly", bob, lambda: os.rename(p("rxonly/b"), p("rxonly/b2")))
    case("bob remove in rxonly", bob, lambda: os.unlink(p("rxonly/b2")))
    print("== acl-grant")
    case("alice read grant", alice, lambda: read(p("grant")))
    case("alice write grant", alice, lambda: write(p("grant")))
    case("bob read grant", bob, lambda: read(p("grant")))
    case("alice touch grant", alice, lambda: os.utime(p("grant")))
    case("alice set a time on grant", alice, lambda: os.utime(p("grant"), (1, 1)))
    case("alice create in gdir", alice, lambda: create(p("gdir/mine"), 0o640))
    print(f"gdir/mine: {meta(os.path.join(base, 'gdir/mine'))}")
    case("bob create in gdir", bob, lambda: create(p("gdir/his")))
    case("bob remove in gdir", bob, lambda: os.unlink(p("gdir/mine")))
    case("alice chmod grant", alice, lambda: os.chmod(p("grant"), 0o666))
    case("alice chown mine to bob", alice, lambda: os.chown(p("gdir/mine"), BOB, -1))
    case("alice chgrp mine to team (not in it)", alice, lambda: os.chown(p("gdir/mine"), -1, TEAM))
    case("member chgrp mine to team", member, lambda: os.chown(p("gdir/mine"), -1, TEAM))
    print(f"gdir/mine: {meta(os.path.join(base, 'gdir/mine'))}")
    case("alice remove in gdir", alice, lambda: os.unlink(p("gdir/mine")))
    print("== acl-default")
    case("alice create in inherit", alice, lambda: create(p("inherit/f"), 0o664))
    print(f"inherit/f: {meta(os.path.join(base, 'inherit/f'))} {acl_of(os.path.join(base, 'inherit/f'))}")
    case("bob write inherit/f", bob, lambda: write(p("inherit/f")))
    case("alice mkdir in inherit", alice, lambda: os.mkdir(p("inherit/d"), 0o770))
    print(f"inherit/d: {meta(os.path.join(base, 'inherit/d'))} {acl_of(os.path.join(base, 'inherit/d'))}")
    case("bob create in inherit/d", bob, lambda: create(p("inherit/d/bobs"), 0o600))
    print("== acl-groups")
    case("member read team", member, lambda: read(p("team")))
    case("outsider read team", outsider, lambda: read(p("team")))
    case("member create in teamdir", member, lambda: create(p("teamdir/t")))
    case("outsider create in teamdir", outsider, lambda: create(p("teamdir/u")))
    case("member create in sgid", member, lambda: create(p("sgid/f")))
    print(f"sgid/f: {meta(os.path.join(base, 'sgid/f'))}")
    case("member mkdir in sgid", member, lambda: os.mkdir(p("sgid/d"), 0o755))
    print(f"sgid/d: {meta(os.path.join(base, 'sgid/d'))}")
    sh("rm", "-rf", base)


if __name__ == "__main__":
    main()
