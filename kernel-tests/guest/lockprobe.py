#!/usr/bin/env python3
"""fcntl byte-range locks from one process, for the NLM checks (guest/nlm.sh).

  lockprobe.py hold PATH SECS   lock the whole file exclusively (waiting), print "locked",
                                hold it SECS seconds, exit (the kernel unlocks)
  lockprobe.py try PATH [sh]    try to lock it exclusively (or shared) without waiting;
                                print "ok" or the errno's name
  lockprobe.py wait PATH        lock it exclusively, waiting; print "got"
  lockprobe.py poll PATH SECS   try (without waiting) every 0.5 s for up to SECS seconds;
                                print "got" once it has the lock, else the last errno's name
  lockprobe.py deadlock P1 P2   two processes, one per path (the same file through two
                                mounts): each locks its own byte (0 through P1, 1 through
                                P2), then waits for the other's; the server must refuse
                                one wait (EDEADLK), which then exits and frees its byte,
                                so the other gets it: prints the two results sorted
                                ("EDEADLK got"); without detection both wait until the
                                caller's timeout
Prints only results, never times: the caller compares lines.
"""
import errno
import fcntl
import os
import sys
import time


def name(e):
    """The errno's name (Python names 35 EDEADLOCK, Linux's alias of EDEADLK)."""
    if e.errno == errno.EDEADLK:
        return "EDEADLK"
    return errno.errorcode.get(e.errno, str(e.errno))


def cross(path, mine, theirs, ready, go, report):
    """Locks byte `mine` of `path`, says so on `ready`, waits for the word on `go`, then
    waits for byte `theirs`; writes "got" or the errno's name to `report`."""
    fd = os.open(path, os.O_RDWR)
    fcntl.lockf(fd, fcntl.LOCK_EX, 1, mine)
    os.write(ready, b"x")
    os.read(go, 1)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX, 1, theirs)
        result = "got"
    except OSError as e:
        result = name(e)
    os.write(report, result.encode() + b"\n")
    os.close(fd)


def deadlock(p1, p2):
    results = []
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    report_r, report_w = os.pipe()
    child = os.fork()
    if child == 0:
        cross(p2, 1, 0, ready_w, go_r, report_w)
        os._exit(0)
    # The child holds byte 1; this process takes byte 0, lets the child wait for it, and
    # waits for byte 1 a moment later, so that both waits are at the server at once.
    os.read(ready_r, 1)
    fd = os.open(p1, os.O_RDWR)
    fcntl.lockf(fd, fcntl.LOCK_EX, 1, 0)
    os.write(go_w, b"x")
    time.sleep(2)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX, 1, 1)
        results.append("got")
    except OSError as e:
        results.append(name(e))
    os.close(fd)
    results.append(os.read(report_r, 64).decode().strip())
    os.waitpid(child, 0)
    return results


def main():
    what, path = sys.argv[1], sys.argv[2]
    fd = os.open(path, os.O_RDWR)
    if what == "hold":
        fcntl.lockf(fd, fcntl.LOCK_EX)
        print("locked", flush=True)
        time.sleep(float(sys.argv[3]))
    elif what == "try":
        kind = fcntl.LOCK_SH if len(sys.argv) > 3 and sys.argv[3] == "sh" else fcntl.LOCK_EX
        try:
            fcntl.lockf(fd, kind | fcntl.LOCK_NB)
            print("ok", flush=True)
        except OSError as e:
            print(name(e), flush=True)
    elif what == "poll":
        end = time.monotonic() + float(sys.argv[3])
        while True:
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                print("got", flush=True)
                break
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES) or time.monotonic() > end:
                    print(name(e), flush=True)
                    break
            time.sleep(0.5)
    elif what == "wait":
        fcntl.lockf(fd, fcntl.LOCK_EX)
        print("got", flush=True)
    elif what == "deadlock":
        print(" ".join(sorted(deadlock(path, sys.argv[3]))), flush=True)
    else:
        sys.exit("unknown command " + what)


main()
