#!/usr/bin/env python3
"""appender.py FILE LOG STOP: the lock-free writer of check.sh's restart group.

Appends numbered records ("record 000000\\n", ...) to FILE (on the NFS mount, opened once
with O_APPEND), each followed by fsync; after each fsync that returned, writes the record's
number to LOG (a local file), so LOG lists exactly the records the server acknowledged as
stable. A failed write, fsync or close is written to LOG as "error N ERRNO" and the writer
goes on with the next record. It stops, having finished the record in hand, once the file
STOP exists. Meanwhile the group stops and starts the server under it: every write then
waits in the kernel until the new server answers."""

import errno
import os
import sys
import time

path, log_path, stop = sys.argv[1:4]
log = open(log_path, "w", buffering=1)


def failed(n, e):
    log.write("error %d %s\n" % (n, errno.errorcode.get(e.errno, str(e.errno))))


fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
n = 0
while not os.path.exists(stop):
    try:
        os.write(fd, b"record %06d\n" % n)
        os.fsync(fd)
        log.write("%d\n" % n)
    except OSError as e:
        failed(n, e)
    n += 1
    # About 20 records a second when the server answers at once: enough to be writing
    # when the server goes away, few enough to keep the file small under TCG.
    time.sleep(0.05)
try:
    os.close(fd)
except OSError as e:
    failed(n, e)
log.close()
