#!/usr/bin/env python3
"""fcntl byte-range locks from one process, for the NLM checks (guest/nlm.sh).

  lockprobe.py hold PATH SECS   lock the whole file exclusively (waiting), print "locked",
                                hold it SECS seconds, exit (the kernel unlocks)
  lockprobe.py try PATH [sh]    try to lock it exclusively (or shared) without waiting;
                                print "ok" or the errno's name
  lockprobe.py wait PATH        lock it exclusively, waiting; print "got"
  lockprobe.py poll PATH SECS   try (without waiting) every 0.5 s for up to SECS seconds;
                                print "got" once it has the lock, else the last errno's name
Prints only results, never times: the caller compares lines.
"""
import errno
import fcntl
import os
import sys
import time


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
            print(errno.errorcode.get(e.errno, str(e.errno)), flush=True)
    elif what == "poll":
        end = time.monotonic() + float(sys.argv[3])
        while True:
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                print("got", flush=True)
                break
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES) or time.monotonic() > end:
                    print(errno.errorcode.get(e.errno, str(e.errno)), flush=True)
                    break
            time.sleep(0.5)
    elif what == "wait":
        fcntl.lockf(fd, fcntl.LOCK_EX)
        print("got", flush=True)
    else:
        sys.exit("unknown command " + what)


main()
