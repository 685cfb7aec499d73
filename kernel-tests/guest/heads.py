#!/usr/bin/env python3
"""Close-to-open between two mounts of one file system (kernel-tests group `heads`).

    heads.py A B [C]

A and B (and C) are views of one directory: on the object target, head A's NFSv4.2 mount
and head B's NFSv3 mount of one object export (two granary processes, one PostgreSQL
database and one S3 bucket), and C head B's NFSv4.2 mount, for the byte-range lock check
(`heads-locks`: a lock through A keeps C's F_SETLK off the same bytes; `heads-lock-wait`:
C's F_SETLKW gets them within 3 s of the holder's exit); on the reference,
the same tmpfs directory each time. What one
side writes and closes, the other opens next and must read whole; names, modes, owners,
times and link counts changed on one side are seen by the other's next open or
directory listing. That is what NFS promises across clients (close-to-open: the writer's
close sends its data and COMMIT, the reader's open asks the server for the attributes and
drops cached pages of a file that changed), and what docs/OBJECT.md promises across heads
(names and attributes at once, data once published; a COMMIT publishes).

B is read only through open() and listdir(): Linux revalidates a file's or directory's
attributes at open (LOOKUP_OPEN), and a directory whose attributes changed has its
cached listing and names dropped, while a plain stat() may answer from the attribute
cache for a few seconds, as NFS allows. Each check prints what the reader saw; nothing
depends on times or inode numbers, so the output equals the reference's.
"""

import errno
import fcntl
import hashlib
import os
import random
import select
import shutil
import stat
import sys
import time

SIZES = [0, 1, 4095, 4096, 4097, 65539, 1048577, 4194309]  # inline sizes to past 4 MiB
MTIME_NS = 4102444800_123456789  # 2100-01-01, with nanoseconds


_CHECK = [None, 0.0]


def check(name):
    """Ends the check running (a note of its time, which comparisons ignore), starts NAME."""
    if _CHECK[0]:
        print(f"note: {_CHECK[0]} took {time.monotonic() - _CHECK[1]:.1f} s")
    _CHECK[:] = [name, time.monotonic()]
    if name:
        print(f"== {name}")


def sha(blob):
    return hashlib.sha256(blob).hexdigest()[:16]


def data(seed, n):
    return random.Random(seed).randbytes(n)


def write(path, blob, flags=os.O_WRONLY | os.O_CREAT | os.O_TRUNC, at=None):
    """open, write every byte (at offset `at` if given), close."""
    fd = os.open(path, flags, 0o644)
    try:
        if at is not None:
            os.lseek(fd, at, os.SEEK_SET)
        view = memoryview(blob)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def opened(path):
    """open, fstat, read to the end, close: (stat, bytes), or the errno's name."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
    try:
        st = os.fstat(fd)
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        return st, b"".join(chunks)
    finally:
        os.close(fd)


def kind(mode):
    for test, name in ((stat.S_ISREG, "file"), (stat.S_ISDIR, "dir"), (stat.S_ISLNK, "symlink"),
                       (stat.S_ISFIFO, "fifo")):
        if test(mode):
            return name
    return "other"


def read_check(label, path, want):
    """B opens PATH and must read exactly WANT (bytes), or fail with the errno WANT names."""
    got = opened(path)
    if isinstance(got, str):
        print(f"{label}: open {got}")
        return
    st, blob = got
    same = "every byte" if blob == want else f"DIFFERENT from what was written (sha {sha(want)})"
    print(f"{label}: size {st.st_size}, read {len(blob)} bytes, sha {sha(blob)}: {same}")


def attrs(path):
    """A file's or directory's attributes as an open sees them (revalidated with the
    server); a symlink's or FIFO's from lstat, which may come from the client's cache (the
    checks change neither after making it)."""
    st = os.lstat(path)
    if stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode):
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            st = os.fstat(fd)
        finally:
            os.close(fd)
    return st


def listing(label, path):
    """B lists PATH: each name with its type, mode, owner, link count and size (files)."""
    try:
        names = sorted(os.listdir(path))
    except OSError as e:
        print(f"{label}: listdir {errno.errorcode.get(e.errno, e.errno)}")
        return
    print(f"{label}: {' '.join(names) if names else '(empty)'}")
    for name in names:
        st = attrs(os.path.join(path, name))
        size = f" size {st.st_size}" if stat.S_ISREG(st.st_mode) else ""
        print(f"    {name}: {kind(st.st_mode)} {stat.filemode(st.st_mode)} "
              f"{st.st_uid}:{st.st_gid} links {st.st_nlink}{size}")


def main():
    a, b = (os.path.join(root, "heads") for root in sys.argv[1:3])
    shutil.rmtree(a, ignore_errors=True)
    os.mkdir(a)
    da, db = os.path.join(a, "d"), os.path.join(b, "d")
    files = {}

    check("heads-create")
    os.mkdir(da)
    for n in SIZES:
        files[n] = data(n, n)
        write(f"{da}/f.{n}", files[n])
    os.mkdir(f"{da}/sub", 0o750)
    os.symlink("f.1", f"{da}/link")
    os.mkfifo(f"{da}/fifo", 0o640)
    listing("B lists d", db)
    for n in SIZES:
        read_check(f"B reads f.{n}", f"{db}/f.{n}", files[n])
    print(f"B reads link: {os.readlink(f'{db}/link')}")

    # B has every file's pages cached now: its next open must drop them.
    check("heads-rewrite")
    big = bytearray(files[1048577])
    big[524285:524292] = b"granary"
    write(f"{da}/f.1048577", b"granary", os.O_WRONLY, at=524285)
    files[1048577] = bytes(big)
    write(f"{da}/f.4097", data(7, 100), os.O_WRONLY | os.O_APPEND)
    files[4097] += data(7, 100)
    with open(f"{da}/f.65539", "r+b") as f:
        f.truncate(1000)
    files[65539] = files[65539][:1000]
    with open(f"{da}/f.4096", "r+b") as f:
        f.truncate(10000)
    files[4096] += bytes(10000 - 4096)
    write(f"{da}/f.1", b"end", os.O_WRONLY, at=300000)
    files[1] += bytes(300000 - 1) + b"end"
    write(f"{da}/f.4194309", b"last bytes", os.O_WRONLY, at=4194309 - 10)
    files[4194309] = files[4194309][:-10] + b"last bytes"
    for n in SIZES:
        read_check(f"B reads f.{n}", f"{db}/f.{n}", files[n])

    check("heads-attrs")
    os.chmod(f"{da}/f.0", 0o600)
    os.chown(f"{da}/f.4095", 1001, 1002)
    os.utime(f"{da}/f.4096", ns=(MTIME_NS, MTIME_NS))
    os.chmod(f"{da}/sub", 0o2775)
    for name in ("f.0", "f.4095", "f.4096", "sub"):
        fd = os.open(f"{db}/{name}", os.O_RDONLY)  # a directory opens too
        st = os.fstat(fd)
        os.close(fd)
        mtime = " mtime 2100-01-01 with its ns" if st.st_mtime_ns == MTIME_NS else ""
        print(f"B opens {name}: {stat.filemode(st.st_mode)} {st.st_uid}:{st.st_gid}{mtime}")

    check("heads-namespace")
    os.rename(f"{da}/f.0", f"{da}/sub/moved")
    os.rename(f"{da}/f.1", f"{da}/renamed")
    os.link(f"{da}/f.4096", f"{da}/hard")
    os.unlink(f"{da}/f.4095")
    os.rename(f"{da}/f.65539", f"{da}/f.4097")  # over an existing file
    os.mkdir(f"{da}/newdir")
    os.rename(f"{da}/sub", f"{da}/newdir/sub")  # a directory to another parent
    os.symlink("renamed", f"{da}/link2")
    listing("B lists d", db)
    listing("B lists d/newdir/sub", f"{db}/newdir/sub")
    read_check("B opens f.1 (renamed away)", f"{db}/f.1", b"")
    read_check("B opens f.4095 (removed)", f"{db}/f.4095", b"")
    read_check("B reads renamed", f"{db}/renamed", files[1])
    read_check("B reads f.4097 (f.65539 renamed over it)", f"{db}/f.4097", files[65539])
    read_check("B reads hard", f"{db}/hard", files[4096])
    read_check("B reads link2", f"{db}/link2", files[1])

    # The other way round: B (NFSv3, head B) writes, A (NFSv4.2, head A) reads.
    check("heads-b-to-a")
    from_b = data(11, 1048579)
    write(f"{db}/from-b", from_b)
    write(f"{db}/renamed", b"patched by B", os.O_WRONLY, at=4096)
    patched = bytearray(files[1])
    patched[4096:4108] = b"patched by B"
    os.rename(f"{db}/f.4194309", f"{db}/newdir/big")
    listing("A lists d", da)
    read_check("A reads from-b", f"{da}/from-b", from_b)
    read_check("A reads renamed", f"{da}/renamed", bytes(patched))
    read_check("A reads newdir/big", f"{da}/newdir/big", files[4194309])

    # One file rewritten 8 times with another size each time, read on the other side
    # after each close: every version whole, never the previous one's cached pages.
    check("heads-rounds")
    seen = 0
    for k in range(8):
        blob = data(100 + k, random.Random(k).randrange(1, 200000))
        write(f"{da}/round", blob)
        got = opened(f"{db}/round")
        if not isinstance(got, str) and got[1] == blob and got[0].st_size == len(blob):
            seen += 1
        else:
            print(f"round {k}: B did not read what A wrote ({'open ' + got if isinstance(got, str) else sha(got[1])})")
    print(f"B read every byte A wrote in {seen} of 8 rounds")

    check("heads-remove")
    shutil.rmtree(da)
    listing("B lists heads", b)
    read_check("B opens d/renamed", f"{db}/renamed", b"")
    write(f"{a}/after", b"after the remove")
    read_check("B reads after", f"{b}/after", b"after the remove")

    if len(sys.argv) > 3:
        locks_across(a, os.path.join(sys.argv[3], "heads"))
    check(None)


def lock_in_child(path, start, length, go, done):
    """A process that holds a write lock of PATH's bytes START..START+LENGTH (fcntl
    F_SETLK) until it reads a byte from GO; it writes a byte to DONE once it holds it.
    Returns its pid."""
    pid = os.fork()
    if pid == 0:
        try:
            fd = os.open(path, os.O_RDWR)
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, length, start)
            os.write(done, b"l")
            os.read(go, 1)
            os._exit(0)
        except OSError as e:
            print(f"the holder could not lock: {errno.errorcode.get(e.errno, e.errno)}")
            os.write(done, b"e")
            os._exit(1)
    return pid


def try_lock(path, start, length):
    """F_SETLK of a write lock through PATH: 'granted' (then released) or 'refused'."""
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, length, start)
        fcntl.lockf(fd, fcntl.LOCK_UN, length, start)
        return "granted"
    except OSError as e:
        if e.errno in (errno.EAGAIN, errno.EACCES):
            return "refused"
        return f"failed: {errno.errorcode.get(e.errno, e.errno)}"
    finally:
        os.close(fd)


def locks_across(a, c):
    """A write lock held through A (head A's NFSv4.2 mount) makes F_SETLK of the same
    bytes through C (head B's NFSv4.2 mount) fail with EAGAIN, not of other bytes, and
    the bytes are C's once the holder lets go (docs/LOCKS.md, "Across heads"). On the
    reference both views are one tmpfs directory, where two processes exclude each other
    the same way."""
    check("heads-locks")
    write(f"{a}/locked", data(21, 4096))
    go, go_w = os.pipe()
    done_r, done = os.pipe()
    pid = lock_in_child(f"{a}/locked", 0, 100, go, done)
    held = os.read(done_r, 1) == b"l"
    print(f"holder through A: {'holds bytes 0-99' if held else 'no lock'}")
    print(f"through B, bytes 50-59: {try_lock(f'{c}/locked', 50, 10)}")
    print(f"through B, bytes 200-299: {try_lock(f'{c}/locked', 200, 100)}")
    os.write(go_w, b"g")
    os.waitpid(pid, 0)
    # The holder's exit unlocks (LOCKU, or CLOSE) before it is reaped; the other head
    # finds the bytes free at once, or within a few tries while the record catches up.
    got = "refused"
    for _ in range(50):
        got = try_lock(f"{c}/locked", 50, 10)
        if got != "refused":
            break
        time.sleep(0.1)
    print(f"through B after the holder exited: {got}")
    blocked_across(a, c)


def blocked_across(a, c):
    """A process blocked in F_SETLKW through C (head B) on bytes a holder through A
    (head A) holds gets them within 3 s of the holder's exit: head B hears of head A's
    release and tells its NFSv4.2 client (CB_NOTIFY_LOCK). Without that, the client that
    was offered notices asks again only after 30 s, and head B's own recheck of its
    waiters (every 10 s from the wait's start) finds the bytes free 7-8 s after an exit
    13 s into the wait. The time is a note (comparisons ignore it)."""
    check("heads-lock-wait")
    go, go_w = os.pipe()
    done_r, done = os.pipe()
    pid = lock_in_child(f"{a}/locked", 0, 100, go, done)
    held = os.read(done_r, 1) == b"l"
    print(f"holder through A: {'holds bytes 0-99' if held else 'no lock'}")
    got_r, got_w = os.pipe()
    waiter = os.fork()
    if waiter == 0:
        try:
            fd = os.open(f"{c}/locked", os.O_RDWR)
            fcntl.lockf(fd, fcntl.LOCK_EX, 10, 50)
            os.write(got_w, repr(time.monotonic()).encode())
            os._exit(0)
        except OSError as e:
            os.write(got_w, f"error {errno.errorcode.get(e.errno, e.errno)}".encode())
            os._exit(1)
    # Past head B's first recheck of its waiters (10 s), well before its second.
    time.sleep(13)
    released = time.monotonic()
    os.write(go_w, b"g")
    os.waitpid(pid, 0)
    ready, _, _ = select.select([got_r], [], [], 40)
    said = os.read(got_r, 64).decode() if ready else "nothing in 40 s"
    if not ready:
        os.kill(waiter, 9)
    os.waitpid(waiter, 0)
    try:
        took = float(said) - released
        late = "within 3 s" if took < 3 else "late"
        print(f"through B, F_SETLKW blocked by the holder: granted {late} of its exit")
        print(f"note: heads-lock-wait: granted {took:.2f} s after the holder exited")
    except ValueError:
        print(f"through B, F_SETLKW blocked by the holder: {said}")


main()
