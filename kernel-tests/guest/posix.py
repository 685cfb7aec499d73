#!/usr/bin/env python3
"""POSIX semantics through the kernel client, one named test per check.

    posix.py DIR [TEST...]

Runs each TEST in DIR/TEST (created fresh) and prints one line per observation: results of
system calls as "ok" or an errno name, sizes, modes, owners and checksums, never
times, inode numbers or paths. suite.sh runs the same tests on the guest's tmpfs
and on each NFS mount and compares the outputs test by test.

KT_RELOAD (a shell command) makes later reads come from the server: on an NFS
mount it unmounts and mounts again, on tmpfs it drops caches. It needs every file
on the mount closed, so tests call reload() only between open files. Lines that
start with "note:" are not compared (suite.sh shows them on failure).
"""

import errno
import hashlib
import os
import stat
import subprocess
import sys
import time

TESTS = {}


def test(fn):
    TESTS[fn.__name__.replace("_", "-")] = fn
    return fn


def out(*words):
    print(*words, flush=True)


def note(*words):
    print("note:", *words, flush=True)


def call(fn, *args, **kw):
    """'ok' (or the call's value when it is not None) or the errno name."""
    try:
        r = fn(*args, **kw)
        return "ok" if r is None else r
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))


def reload():
    os.chdir("/")
    r = subprocess.run(["bash", "-c", os.environ["KT_RELOAD"]], capture_output=True, text=True)
    if r.returncode != 0:
        out("reload failed:", r.returncode, r.stdout.strip(), r.stderr.strip())
        sys.exit(1)


def write_file(path, data, flags=os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode=0o644):
    fd = os.open(path, flags, mode)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def read_file(path):
    with open(path, "rb") as f:
        return f.read()


def digest(data):
    return hashlib.sha256(data).hexdigest()[:16]


def pattern(n, seed=1):
    """n deterministic non-zero bytes."""
    block = hashlib.sha256(str(seed).encode()).digest() * 128  # 4 KiB
    block = bytes(b | 1 for b in block)
    return (block * (n // len(block) + 1))[:n]


def kind(mode):
    for name, f in (("dir", stat.S_ISDIR), ("file", stat.S_ISREG), ("link", stat.S_ISLNK),
                    ("fifo", stat.S_ISFIFO), ("chr", stat.S_ISCHR), ("blk", stat.S_ISBLK),
                    ("sock", stat.S_ISSOCK)):
        if f(mode):
            return name
    return "?"


def desc(path):
    """type, permission bits (octal), owner, size (files), link count (not dirs)."""
    try:
        st = os.lstat(path)
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
    d = f"{kind(st.st_mode)} {stat.S_IMODE(st.st_mode):04o} {st.st_uid}:{st.st_gid}"
    if stat.S_ISREG(st.st_mode):
        d += f" size={st.st_size} nlink={st.st_nlink}"
    if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
        d += f" rdev={os.major(st.st_rdev)},{os.minor(st.st_rdev)}"
    return d


def listing(d):
    return " ".join(sorted(n for n in os.listdir(d) if not n.startswith(".nfs")))


# ------------------------------------------------------------------ tests


@test
def excl_create(d):
    p = f"{d}/f"
    fl = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    fd = call(os.open, p, fl, 0o640)
    out("first O_EXCL:", "ok" if isinstance(fd, int) else fd)
    if isinstance(fd, int):
        os.write(fd, b"first")
        os.close(fd)
    out("second O_EXCL:", call(os.open, p, fl, 0o640))
    os.symlink("dangling-target", f"{d}/sl")
    out("O_EXCL on dangling symlink:", call(os.open, f"{d}/sl", fl, 0o640))
    out("dangling target created:", os.path.exists(f"{d}/dangling-target"))
    os.mkdir(f"{d}/sub")
    out("O_EXCL on dir:", call(os.open, f"{d}/sub", fl, 0o640))
    reload()
    out("after reload:", desc(p), read_file(p))


@test
def append(d):
    p = f"{d}/log"
    write_file(p, b"start\n")
    a = os.open(p, os.O_WRONLY | os.O_APPEND)
    b = os.open(p, os.O_WRONLY | os.O_APPEND)
    for i in range(20):
        os.write(a if i % 2 else b, f"line {i} {'x' * i}\n".encode())
    out("offset after appends:", os.lseek(a, 0, os.SEEK_CUR))
    os.close(a)
    os.close(b)
    c = os.open(p, os.O_RDWR | os.O_APPEND)
    os.lseek(c, 0, os.SEEK_SET)
    os.write(c, b"at-end\n")  # O_APPEND wins over the seek
    os.close(c)
    reload()
    data = read_file(p)
    out("size:", len(data), "sha:", digest(data))
    out("last line:", data.splitlines()[-1])


@test
def truncate(d):
    p = f"{d}/t"
    write_file(p, pattern(10000))
    os.truncate(p, 1_000_000)            # grow: the new range reads as zeros
    data = read_file(p)
    out("grow size:", len(data), "head intact:", data[:10000] == pattern(10000),
        "tail zero:", data[10000:] == bytes(990000))
    os.truncate(p, 5000)                 # shrink
    os.truncate(p, 20000)                # grow again: old bytes 5000.. must not come back
    reload()
    data = read_file(p)
    out("shrink+grow size:", len(data), "head intact:", data[:5000] == pattern(5000),
        "rest zero:", data[5000:] == bytes(15000))
    fd = os.open(p, os.O_RDWR)
    os.ftruncate(fd, 3)
    os.lseek(fd, 3 * 65536 + 17, os.SEEK_SET)   # a hole in the middle
    os.write(fd, b"tail")
    os.close(fd)
    reload()
    data = read_file(p)
    out("hole size:", len(data), "sha:", digest(data),
        "hole zero:", data[3:3 * 65536 + 17] == bytes(3 * 65536 + 14))
    fd = os.open(p, os.O_WRONLY | os.O_TRUNC)
    os.close(fd)
    out("O_TRUNC:", desc(p))


@test
def large_offset(d):
    """A write past 4 GiB (64-bit offsets on the wire) into a sparse file."""
    p = f"{d}/big"
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
    os.pwrite(fd, b"low", 0)
    out("pwrite at 4 GiB + 5:", call(os.pwrite, fd, b"high", (4 << 30) + 5))
    os.close(fd)
    reload()
    st = os.stat(p)
    out("size:", st.st_size)
    fd = os.open(p, os.O_RDONLY)
    out("read at 4 GiB + 5:", os.pread(fd, 4, (4 << 30) + 5))
    out("read at 2 GiB:", os.pread(fd, 8, 2 << 30))
    out("read at 0:", os.pread(fd, 4, 0))
    os.close(fd)
    os.unlink(p)


@test
def rename(d):
    write_file(f"{d}/a", b"AAAA")
    write_file(f"{d}/b", b"BB")
    ino = os.stat(f"{d}/a").st_ino
    out("file over file:", call(os.rename, f"{d}/a", f"{d}/b"))
    out("same inode kept:", os.stat(f"{d}/b").st_ino == ino, "a gone:", not os.path.lexists(f"{d}/a"))
    os.mkdir(f"{d}/d1")
    write_file(f"{d}/d1/inner", b"in")
    os.mkdir(f"{d}/empty")
    out("dir over empty dir:", call(os.rename, f"{d}/d1", f"{d}/empty"))
    out("moved content:", read_file(f"{d}/empty/inner"))
    os.mkdir(f"{d}/d2")
    out("dir over non-empty dir:", call(os.rename, f"{d}/d2", f"{d}/empty"))
    out("file over dir:", call(os.rename, f"{d}/b", f"{d}/d2"))
    out("dir over file:", call(os.rename, f"{d}/d2", f"{d}/b"))
    out("dir into itself:", call(os.rename, f"{d}/empty", f"{d}/empty/x"))
    out("missing source:", call(os.rename, f"{d}/nope", f"{d}/x"))
    os.link(f"{d}/b", f"{d}/b2")
    out("onto own hard link:", call(os.rename, f"{d}/b", f"{d}/b2"))  # POSIX: no-op
    out("across dirs:", call(os.rename, f"{d}/b2", f"{d}/d2/b3"))
    out("rename to itself:", call(os.rename, f"{d}/d2/b3", f"{d}/d2/b3"))
    reload()
    out("top:", listing(d))
    out("d2:", listing(f"{d}/d2"), "empty:", listing(f"{d}/empty"))
    out("b:", desc(f"{d}/b"), read_file(f"{d}/b"))


@test
def rmdir_unlink(d):
    os.makedirs(f"{d}/full/sub")
    out("rmdir non-empty:", call(os.rmdir, f"{d}/full"))
    out("unlink dir:", call(os.unlink, f"{d}/full/sub"))
    write_file(f"{d}/file", b"x")
    out("rmdir file:", call(os.rmdir, f"{d}/file"))
    out("rmdir missing:", call(os.rmdir, f"{d}/missing"))
    out("unlink missing:", call(os.unlink, f"{d}/missing"))
    out("mkdir existing:", call(os.mkdir, f"{d}/full"))
    out("mkdir over file:", call(os.mkdir, f"{d}/file"))
    out("create under file:", call(os.open, f"{d}/file/x", os.O_CREAT | os.O_WRONLY))
    out("rmdir sub:", call(os.rmdir, f"{d}/full/sub"), "rmdir full:", call(os.rmdir, f"{d}/full"))
    out("name 255:", call(write_file, f"{d}/{'n' * 255}", b""))
    out("name 256:", call(write_file, f"{d}/{'n' * 256}", b""))
    reload()
    out("left:", " ".join(n if len(n) < 20 else f"n*{len(n)}" for n in sorted(os.listdir(d))))


@test
def hardlinks(d):
    p = f"{d}/f"
    write_file(p, b"shared")
    os.link(p, f"{d}/g")
    os.mkdir(f"{d}/sub")
    os.link(p, f"{d}/sub/h")
    out("nlink after 2 links:", os.stat(p).st_nlink)
    write_file(f"{d}/g", b"changed", os.O_WRONLY | os.O_TRUNC)
    out("change seen through other name:", read_file(f"{d}/sub/h"))
    out("link over existing:", call(os.link, p, f"{d}/g"))
    out("link to dir:", call(os.link, f"{d}/sub", f"{d}/sublink"))
    out("link from missing:", call(os.link, f"{d}/missing", f"{d}/x"))
    os.unlink(f"{d}/g")
    reload()
    out("after unlink + reload:", desc(p), desc(f"{d}/sub/h"))
    os.unlink(p)
    out("last name:", desc(f"{d}/sub/h"), read_file(f"{d}/sub/h"))


@test
def symlinks(d):
    write_file(f"{d}/target", b"T")
    os.symlink("target", f"{d}/rel")
    os.symlink(f"{d}/target", f"{d}/abs")
    os.symlink("no/such/thing", f"{d}/dangling")
    long_target = "x" * 1000 + "/" + "y" * 2000
    os.symlink(long_target, f"{d}/long")
    os.symlink("loop2", f"{d}/loop1")
    os.symlink("loop1", f"{d}/loop2")
    reload()
    out("readlink rel:", os.readlink(f"{d}/rel"), "read via rel:", read_file(f"{d}/rel"))
    out("readlink abs ok:", os.readlink(f"{d}/abs") == f"{d}/target", "read via abs:", read_file(f"{d}/abs"))
    out("dangling:", desc(f"{d}/dangling"), "open:", call(os.open, f"{d}/dangling", os.O_RDONLY))
    out("long target kept:", os.readlink(f"{d}/long") == long_target)
    out("loop:", call(os.open, f"{d}/loop1", os.O_RDONLY))
    out("O_NOFOLLOW:", call(os.open, f"{d}/rel", os.O_RDONLY | os.O_NOFOLLOW))
    out("symlink over existing:", call(os.symlink, "x", f"{d}/rel"))
    out("lstat:", desc(f"{d}/rel").split()[0], "stat:", kind(os.stat(f"{d}/rel").st_mode))
    os.mkdir(f"{d}/dir")
    os.symlink("dir", f"{d}/dirlink")
    write_file(f"{d}/dirlink/inside", b"i")
    out("through dir link:", listing(f"{d}/dir"))
    out("rmdir on link:", call(os.rmdir, f"{d}/dirlink"))
    out("unlink link:", call(os.unlink, f"{d}/rel"), "target left:", desc(f"{d}/target"))


@test
def special_files(d):
    out("mkfifo:", call(os.mkfifo, f"{d}/fifo", 0o640))
    out("mknod chr:", call(os.mknod, f"{d}/chr", stat.S_IFCHR | 0o600, os.makedev(1, 3)))
    out("mknod blk:", call(os.mknod, f"{d}/blk", stat.S_IFBLK | 0o600, os.makedev(7, 0)))
    out("mknod sock:", call(os.mknod, f"{d}/sock", stat.S_IFSOCK | 0o600))
    reload()
    for n in ("fifo", "chr", "blk", "sock"):
        out(n, desc(f"{d}/{n}"))


@test
def chmod_chown(d):
    """As root on an export without root squash."""
    p = f"{d}/f"
    write_file(p, b"#!/bin/sh\n", mode=0o644)
    for m in (0o000, 0o4755, 0o2755, 0o1777, 0o7777, 0o640):
        out(f"chmod {m:04o}:", call(os.chmod, p, m), desc(p))
    reload()
    out("after reload:", desc(p))
    out("chown 1234:5678:", call(os.chown, p, 1234, 5678))
    out("  ", desc(p))
    out("chown -1:99:", call(os.chown, p, -1, 99))
    out("  ", desc(p))
    os.chmod(p, 0o6755)
    out("chown 4321 on setuid file:", call(os.chown, p, 4321, -1))
    reload()
    out("  (set-id bits after chown)", desc(p))
    os.chmod(p, 0o000)
    out("root reads mode 000:", call(lambda: len(read_file(p))))
    os.mkdir(f"{d}/dir", 0o755)
    out("chmod dir 3777:", call(os.chmod, f"{d}/dir", 0o3777), desc(f"{d}/dir"))
    out("chown dir 7:8:", call(os.chown, f"{d}/dir", 7, 8), desc(f"{d}/dir"))
    os.umask(0o022)
    write_file(f"{d}/dir/sgid-inherit", b"")
    out("file in setgid dir:", desc(f"{d}/dir/sgid-inherit"))


@test
def squash(d):
    """As root on an export with root squash; the reference runs as nobody (65534)."""
    p = f"{d}/f"
    out("create:", call(write_file, p, b"squashed", mode=0o644))
    out("  ", desc(p))
    out("chmod 600:", call(os.chmod, p, 0o600), desc(p))
    out("chown 0:0:", call(os.chown, p, 0, 0))
    out("chown 1234:", call(os.chown, p, 1234, -1))
    out("chgrp 0:", call(os.chown, p, -1, 0))
    out("mkdir:", call(os.mkdir, f"{d}/sub", 0o700), desc(f"{d}/sub"))
    os.chmod(p, 0o000)
    reload()
    out("read mode 000:", call(lambda: len(read_file(p))))
    out("unlink:", call(os.unlink, p))
    out("mknod chr:", call(os.mknod, f"{d}/chr", stat.S_IFCHR | 0o600, os.makedev(1, 3)))
    out("left:", listing(d))


@test
def unlink_open(d):
    p = f"{d}/f"
    write_file(p, b"still here")
    fd = os.open(p, os.O_RDWR)
    os.unlink(p)
    out("name gone:", not os.path.lexists(p))
    out("read after unlink:", os.pread(fd, 100, 0))
    os.pwrite(fd, b" and written", 10)
    out("write+read after unlink:", os.pread(fd, 100, 0))
    hidden = [n for n in os.listdir(d) if n.startswith(".nfs")]
    note("while open:", " ".join(sorted(os.listdir(d))) or "(empty)", f"({len(hidden)} .nfs names)")
    out("visible names:", listing(d) or "(none)")
    os.close(fd)
    for _ in range(50):  # the client removes its .nfsXXXX after the close, asynchronously
        if not os.listdir(d):
            break
        time.sleep(0.1)
    out("after close:", " ".join(sorted(os.listdir(d))) or "(empty)")
    out("rmdir:", call(os.rmdir, d))


@test
def times(d):
    p = f"{d}/f"
    write_file(p, b"one")
    reload()
    s0 = os.stat(p)
    time.sleep(0.05)
    write_file(p, b"two", os.O_WRONLY)
    s1 = os.stat(p)
    out("write: mtime moved:", s1.st_mtime_ns > s0.st_mtime_ns, "ctime moved:", s1.st_ctime_ns > s0.st_ctime_ns)
    time.sleep(0.05)
    os.chmod(p, 0o600)
    s2 = os.stat(p)
    out("chmod: mtime same:", s2.st_mtime_ns == s1.st_mtime_ns, "ctime moved:", s2.st_ctime_ns > s1.st_ctime_ns)
    time.sleep(0.05)
    os.truncate(p, 1)
    s3 = os.stat(p)
    out("truncate: mtime moved:", s3.st_mtime_ns > s2.st_mtime_ns, "ctime moved:", s3.st_ctime_ns > s2.st_ctime_ns)
    time.sleep(0.05)
    os.utime(p, ns=(1_000_000_001_123_456_789, 1_234_567_890_987_654_321))
    reload()
    s4 = os.stat(p)
    out("utime ns: atime", s4.st_atime_ns, "mtime", s4.st_mtime_ns)
    out("utime: ctime moved:", s4.st_ctime_ns > s3.st_ctime_ns)
    os.utime(p, ns=(4_102_444_800_000_000_000, 4_102_444_800_000_000_001))  # 2100-01-01
    reload()
    out("year 2100 mtime:", os.stat(p).st_mtime_ns)
    d0 = os.stat(d)
    time.sleep(0.05)
    write_file(f"{d}/new", b"")
    d1 = os.stat(d)
    out("create: dir mtime moved:", d1.st_mtime_ns > d0.st_mtime_ns)
    time.sleep(0.05)
    os.rename(f"{d}/new", f"{d}/new2")
    d2 = os.stat(d)
    out("rename: dir mtime moved:", d2.st_mtime_ns > d1.st_mtime_ns)


@test
def close_to_open(d):
    """Data written by one open is seen by the next open of another fd and after reload."""
    p = f"{d}/f"
    fd = os.open(p, os.O_WRONLY | os.O_CREAT, 0o644)
    for i in range(64):
        os.pwrite(fd, pattern(4096, i), i * 4096)
    os.fsync(fd)
    os.close(fd)
    data = read_file(p)
    out("read after close:", len(data), digest(data))
    fd = os.open(p, os.O_RDWR)
    os.pwrite(fd, b"Z" * 100, 4000)   # straddles a page boundary
    os.close(fd)
    reload()
    data = read_file(p)
    out("after reload:", len(data), digest(data))


def main():
    """posix.py DIR [TEST...]: each TEST (default: all but squash) in DIR/TEST, with a
    "== posix-TEST" line before its output. A test that raises prints the exception as
    its last line and the next test runs."""
    if len(sys.argv) < 2 or any(t not in TESTS for t in sys.argv[2:]):
        sys.exit(f"usage: posix.py DIR [{'|'.join(TESTS)}]...")
    top = sys.argv[1]
    names = sys.argv[2:] or [t for t in TESTS if t != "squash"]
    os.umask(0o022)
    os.makedirs(top, exist_ok=True)
    for name in names:
        out(f"== posix-{name}")
        os.chdir("/")
        d = f"{top}/{name}"
        try:
            os.makedirs(d)
            TESTS[name](d)
        except Exception as e:  # report and go on with the next test
            out("exception:", type(e).__name__, e)


if __name__ == "__main__":
    main()
