#!/usr/bin/env python3
"""Byte-range locks through the kernel, between two clients of one server: fcntl and
flock locks taken by processes that reach the same file through two paths.

    locks.py PATH_A PATH_B CHECK

PATH_A and PATH_B are one directory seen through two NFS mounts that are two NFSv4
clients of the server (an NFSv4.2 and an NFSv4.1 mount: the Linux client keeps one
client per minor version, each with its own client id), or twice the same directory of
the reference tmpfs (where the locks are the local kernel's). Each process below opens
the file through one of the two paths; check.sh's grp_locks runs every CHECK on both and
suite.sh compares the lines. guest/nlm.sh runs CHECK hammer between an NFSv3 mount (NLM)
and an NFSv4.2 mount. Printed: results (ok or an errno name) and what F_GETLK
reports (type, start, length); never pids or times (times go to "note:" lines).
"""

import errno
import fcntl
import os
import select
import signal
import sqlite3
import struct
import sys
import time

# struct flock on x86_64: short l_type, short l_whence, off_t l_start, off_t l_len,
# pid_t l_pid (32 bytes with padding).
FLOCK = "hhqqi4x"
NAMES = {fcntl.F_RDLCK: "read", fcntl.F_WRLCK: "write", fcntl.F_UNLCK: "unlocked"}


def flock_struct(kind, start, length):
    return struct.pack(FLOCK, kind, os.SEEK_SET, start, length, 0)


class Worker:
    """A child process that opens `path` and runs lock commands sent through a pipe, so
    its locks stay held between commands (POSIX locks belong to a process)."""

    def __init__(self, path):
        self.path = path
        cmd_r, self.cmd_w = os.pipe()
        self.res_r, res_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            os.close(self.cmd_w)
            os.close(self.res_r)
            self._serve(os.fdopen(cmd_r, "r"), os.fdopen(res_w, "w"))
            os._exit(0)
        os.close(cmd_r)
        os.close(res_w)
        self.res = os.fdopen(self.res_r, "r")

    def _serve(self, cmds, out):
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        for line in cmds:
            op, *args = line.split()
            if op == "quit":
                return
            try:
                r = self._run(fd, op, [int(a) for a in args])
            except OSError as e:
                r = errno.errorcode.get(e.errno, str(e.errno))
            out.write(r + "\n")
            out.flush()

    @staticmethod
    def _run(fd, op, a):
        kinds = {"r": fcntl.F_RDLCK, "w": fcntl.F_WRLCK, "u": fcntl.F_UNLCK}
        if op in ("setlk", "setlkw"):
            cmd = fcntl.F_SETLK if op == "setlk" else fcntl.F_SETLKW
            fcntl.fcntl(fd, cmd, flock_struct(kinds["rwu"[a[0]]], a[1], a[2]))
            return "ok"
        if op == "getlk":
            got = fcntl.fcntl(fd, fcntl.F_GETLK, flock_struct(kinds["rwu"[a[0]]], a[1], a[2]))
            t, _, start, length, _ = struct.unpack(FLOCK, got)
            if t == fcntl.F_UNLCK:
                return "free"
            return "held %s start %d len %d" % (NAMES[t], start, length)
        if op == "flock":
            fcntl.flock(fd, a[0])
            return "ok"
        raise ValueError(op)

    def ask(self, line, wait=60.0):
        """Sends a command; its answer, or None if none came within `wait` seconds."""
        os.write(self.cmd_w, (line + "\n").encode())
        return self.answer(wait)

    def answer(self, wait):
        ready, _, _ = select.select([self.res_r], [], [], wait)
        if not ready:
            return None
        return self.res.readline().strip()

    def stop(self):
        # An explicit command: a worker forked later holds a copy of this pipe's write
        # end, so closing ours would not end the loop.
        os.write(self.cmd_w, b"quit\n")
        os.close(self.cmd_w)
        os.waitpid(self.pid, 0)

    def kill(self):
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)


R, W, U = 0, 1, 2
TO_END = 0


def show(label, got):
    print("%s: %s" % (label, got if got is not None else "no answer"))


def fcntl_exclusion(a_path, b_path):
    a, b = Worker(a_path), Worker(b_path)
    show("A write 0+100", a.ask("setlk %d 0 100" % W))
    show("B write 50+10", b.ask("setlk %d 50 10" % W))
    show("B read 99+1", b.ask("setlk %d 99 1" % R))
    show("B getlk write 50+10", b.ask("getlk %d 50 10" % W))
    show("B read 200+10", b.ask("setlk %d 200 10" % R))
    show("A getlk write 205+1", a.ask("getlk %d 205 1" % W))
    show("A unlock 0+100", a.ask("setlk %d 0 100" % U))
    show("B write 50+10 again", b.ask("setlk %d 50 10" % W))
    a.stop()
    b.stop()


def shared_and_upgrade(a_path, b_path):
    a, b = Worker(a_path), Worker(b_path)
    show("A read 0+10", a.ask("setlk %d 0 10" % R))
    show("B read 0+10", b.ask("setlk %d 0 10" % R))
    show("A upgrade to write", a.ask("setlk %d 0 10" % W))
    show("B getlk write 0+10", b.ask("getlk %d 0 10" % W))
    show("B unlock", b.ask("setlk %d 0 10" % U))
    show("A upgrade to write again", a.ask("setlk %d 0 10" % W))
    show("B read 5+1", b.ask("setlk %d 5 1" % R))
    show("A downgrade to read", a.ask("setlk %d 0 10" % R))
    show("B read 5+1 again", b.ask("setlk %d 5 1" % R))
    a.stop()
    b.stop()


def split_and_merge(a_path, b_path):
    a, b = Worker(a_path), Worker(b_path)
    show("A write 0+100", a.ask("setlk %d 0 100" % W))
    show("A unlock 40+10", a.ask("setlk %d 40 10" % U))
    show("B write 45+1 (the hole)", b.ask("setlk %d 45 1" % W))
    show("B write 30+1", b.ask("setlk %d 30 1" % W))
    show("B getlk write 60+1", b.ask("getlk %d 60 1" % W))
    show("B getlk write 0+1", b.ask("getlk %d 0 1" % W))
    show("B unlock 45+1", b.ask("setlk %d 45 1" % U))
    show("A write 40+10 (merges)", a.ask("setlk %d 40 10" % W))
    show("B getlk write 45+1", b.ask("getlk %d 45 1" % W))
    # 64-bit offsets and "to the end".
    show("A write from 2^40 to the end", a.ask("setlk %d %d 0" % (W, 1 << 40)))
    show("B write 2^41+1", b.ask("setlk %d %d 1" % (W, 1 << 41)))
    show("B getlk write 2^41+1", b.ask("getlk %d %d 1" % (W, 1 << 41)))
    show("B write 2^40-1 +1", b.ask("setlk %d %d 1" % (W, (1 << 40) - 1)))
    a.stop()
    b.stop()


def many_locks(a_path, b_path):
    a, b = Worker(a_path), Worker(b_path)
    n = 300
    took = time.monotonic()
    held = sum(a.ask("setlk %d %d 1" % (W, 2 * i)) == "ok" for i in range(n))
    print("A one-byte write locks at even offsets: %d of %d" % (held, n))
    free = sum(b.ask("setlk %d %d 1" % (W, 2 * i + 1)) == "ok" for i in range(0, n, 10))
    busy = sum(b.ask("setlk %d %d 1" % (W, 2 * i)) == "EAGAIN" for i in range(0, n, 10))
    print("B at odd offsets: %d of %d ok; at even offsets: %d of %d EAGAIN" % (free, n // 10, busy, n // 10))
    print("note: %d lock calls in %.1f s" % (n + n // 5, time.monotonic() - took))
    a.stop()
    b.stop()


def flock_exclusion(a_path, b_path):
    a, b = Worker(a_path), Worker(b_path)
    show("A flock LOCK_EX", a.ask("flock %d" % fcntl.LOCK_EX))
    show("B flock LOCK_EX|LOCK_NB", b.ask("flock %d" % (fcntl.LOCK_EX | fcntl.LOCK_NB)))
    show("B flock LOCK_SH|LOCK_NB", b.ask("flock %d" % (fcntl.LOCK_SH | fcntl.LOCK_NB)))
    show("A flock LOCK_SH (downgrade)", a.ask("flock %d" % fcntl.LOCK_SH))
    show("B flock LOCK_SH|LOCK_NB again", b.ask("flock %d" % (fcntl.LOCK_SH | fcntl.LOCK_NB)))
    show("A flock LOCK_EX|LOCK_NB (B shares)", a.ask("flock %d" % (fcntl.LOCK_EX | fcntl.LOCK_NB)))
    show("B flock LOCK_UN", b.ask("flock %d" % fcntl.LOCK_UN))
    show("A flock LOCK_EX|LOCK_NB again", a.ask("flock %d" % (fcntl.LOCK_EX | fcntl.LOCK_NB)))
    a.stop()
    b.stop()


def blocked_waiter(a_path, b_path):
    a, b = Worker(a_path), Worker(b_path)
    show("A write 0+1", a.ask("setlk %d 0 1" % W))
    # B blocks in F_SETLKW: no answer while A holds the lock.
    show("B F_SETLKW write 0+1, after 3 s", b.ask("setlkw %d 0 1" % W, wait=3.0))
    show("A unlock", a.ask("setlk %d 0 1" % U))
    took = time.monotonic()
    # Linux polls a blocked NFSv4 lock after 1, 2, 4, 8, 16 s, then every 30 s.
    show("B granted", b.answer(90.0))
    print("note: B was granted %.1f s after A unlocked" % (time.monotonic() - took))
    show("A write 0+1 (B holds it)", a.ask("setlk %d 0 1" % W))
    a.stop()
    b.stop()


def killed_holder(a_path, b_path):
    a, b = Worker(a_path), Worker(b_path)
    show("A write whole file", a.ask("setlk %d 0 0" % W))
    show("B write 10+1", b.ask("setlk %d 10 1" % W))
    a.kill()
    took = time.monotonic()
    got = None
    while time.monotonic() - took < 30:
        got = b.ask("setlk %d 10 1" % W)
        if got == "ok":
            break
        time.sleep(0.5)
    show("B write 10+1 after A was killed", got)
    print("note: B got it %.1f s after the kill" % (time.monotonic() - took))
    b.stop()


def sqlite_writers(a_path, b_path):
    """Two processes, one per client, insert rows into one SQLite database (rollback
    journal: POSIX locks at 1 GiB) in separate transactions."""
    rows = 60
    for p in (a_path,):
        db = sqlite3.connect(p)
        db.execute("PRAGMA journal_mode=DELETE")
        db.execute("CREATE TABLE IF NOT EXISTS t (who TEXT, n INTEGER)")
        db.commit()
        db.close()
    took = time.monotonic()
    pids = []
    for who, p in (("a", a_path), ("b", b_path)):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                db = sqlite3.connect(p, timeout=120)
                for n in range(rows):
                    with db:
                        db.execute("INSERT INTO t VALUES (?, ?)", (who, n))
                db.close()
            except Exception as e:  # pylint: disable=broad-except
                print("writer %s: %s" % (who, e))
                code = 1
            sys.stdout.flush()
            os._exit(code)
        pids.append(pid)
    codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]
    print("writers exited: %s" % codes)
    print("note: %d transactions in %.1f s" % (2 * rows, time.monotonic() - took))
    db = sqlite3.connect(b_path)
    print("integrity_check: %s" % db.execute("PRAGMA integrity_check").fetchone()[0])
    for who in ("a", "b"):
        got = db.execute("SELECT count(*), count(DISTINCT n) FROM t WHERE who = ?", (who,)).fetchone()
        print("rows of %s: %d (distinct %d)" % (who, got[0], got[1]))
    db.close()


def sqlite_hammer(a_path, b_path):
    """Two writers on each path (two mounts of one export) insert rows into one SQLite
    database (rollback journal) for KT_SQLITE_SECS seconds (default 20), 1 to 3 rows a
    transaction, each counting the rows of the transactions whose COMMIT returned; then
    integrity_check, and each writer's rows in the table against its count."""
    secs = float(os.environ.get("KT_SQLITE_SECS", "20"))
    db = sqlite3.connect(a_path)
    db.execute("PRAGMA journal_mode=DELETE")
    db.execute("CREATE TABLE IF NOT EXISTS h (who TEXT, n INTEGER)")
    db.commit()
    db.close()
    start = time.monotonic()
    deadline = start + secs
    writers = []
    for who, p in (("a1", a_path), ("a2", a_path), ("b1", b_path), ("b2", b_path)):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            code, committed, n = 0, 0, 0
            try:
                conn = sqlite3.connect(p, timeout=120)
                while time.monotonic() < deadline:
                    k = 1 + n % 3
                    with conn:
                        conn.executemany("INSERT INTO h VALUES (?, ?)",
                                         [(who, n + i) for i in range(k)])
                    committed += k
                    n += k
                conn.close()
            except Exception as e:  # pylint: disable=broad-except
                print("writer %s: %s" % (who, e))
                code = 1
            os.write(w, b"%d" % committed)
            sys.stdout.flush()
            os._exit(code)
        os.close(w)
        writers.append((who, pid, r))
    codes, committed = [], {}
    for who, pid, r in writers:
        with os.fdopen(r, "rb") as f:
            committed[who] = int(f.read() or b"0")
        codes.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
    ended = time.monotonic()
    print("writers exited: %s" % codes)
    db = sqlite3.connect(b_path)
    print("integrity_check: %s" % db.execute("PRAGMA integrity_check").fetchone()[0])
    rows = dict(db.execute("SELECT who, count(*) FROM h GROUP BY who").fetchall())
    db.close()
    table = {who: rows.get(who, 0) for who in committed}
    total = sum(committed.values())
    print("rows equal the committed inserts: %s" %
          ("yes" if table == committed else "no: table %s, committed %s" % (table, committed)))
    print("note: %d rows committed by 4 writers in %.1f s (the last ended %.1f s after the"
          " deadline): %s" % (total, ended - start, ended - deadline,
                              committed))


CHECKS = {
    "fcntl": fcntl_exclusion,
    "upgrade": shared_and_upgrade,
    "split": split_and_merge,
    "many": many_locks,
    "flock": flock_exclusion,
    "waiter": blocked_waiter,
    "killed": killed_holder,
    "sqlite": sqlite_writers,
    "hammer": sqlite_hammer,
}


def main():
    a_path, b_path, check = sys.argv[1:4]
    sys.stdout.reconfigure(line_buffering=True)
    CHECKS[check](a_path, b_path)


if __name__ == "__main__":
    main()
