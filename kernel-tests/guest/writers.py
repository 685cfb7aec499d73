#!/usr/bin/env python3
"""Several writers at once, with a final state that does not depend on their timing.

    writers.py DIR [WORKERS] [ROUNDS]

WORKERS processes run ROUNDS rounds each, at the same time, in DIR. Each round k of
worker w: writes w/f<k> (a size and content derived from w and k), overwrites part
of an older file in place, appends a line to the shared log (O_APPEND, all workers),
renames a file into the shared directory, adds a hard link and a symlink, makes a
directory, finds it not empty, empties it and removes it, and replaces shared/cur-w
atomically (write a temporary name, rename over). Each worker records the results
of the calls that must fail; the final tree is printed by suite.sh's manifest.
"""

import errno
import hashlib
import os
import sys
from multiprocessing import Pool


def content(w, k):
    n = (w * 7919 + k * 104729) % 70000
    seed = hashlib.sha256(f"{w}/{k}".encode()).digest()
    return (seed * (n // 32 + 1))[:n]


def write(path, data, flags=os.O_WRONLY | os.O_CREAT | os.O_TRUNC):
    fd = os.open(path, flags, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def worker(args):
    top, w, rounds = args
    mine, shared = f"{top}/w{w}", f"{top}/shared"
    os.mkdir(mine)
    log = []
    for k in range(rounds):
        f = f"{mine}/f{k}"
        write(f, content(w, k))
        j = k - 2  # an older file still under its first name (every third one moved)
        if j >= 0 and j % 3 != 0:
            fd = os.open(f"{mine}/f{j}", os.O_WRONLY)
            os.pwrite(fd, f"overwritten by round {k}".encode(), 100)
            os.close(fd)
        write(f"{shared}/log", f"{w} {k}\n".encode(), os.O_WRONLY | os.O_APPEND)
        if k % 3 == 0:
            os.rename(f, f"{shared}/w{w}-f{k}")
            f = f"{shared}/w{w}-f{k}"
        if k % 5 == 1:
            os.link(f, f"{mine}/l{k}")
        if k % 4 == 2:
            os.symlink(f"f{k}", f"{mine}/s{k}")
        if k % 6 == 0:
            d = f"{mine}/d{k}"
            os.mkdir(d)
            write(f"{d}/x", b"x")
            try:
                os.rmdir(d)
                log.append(f"{w} {k} rmdir non-empty: ok")
            except OSError as e:
                if e.errno != errno.ENOTEMPTY:
                    log.append(f"{w} {k} rmdir non-empty: {errno.errorcode[e.errno]}")
            os.unlink(f"{d}/x")
            os.rmdir(d)
        tmp = f"{shared}/.tmp-{w}"
        write(tmp, f"worker {w} round {k}\n".encode())
        os.rename(tmp, f"{shared}/cur-{w}")
    return log


def main():
    top = sys.argv[1]
    workers = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 60
    os.makedirs(f"{top}/shared")
    write(f"{top}/shared/log", b"")
    with Pool(workers) as pool:
        logs = pool.map(worker, [(top, w, rounds) for w in range(workers)])
    for line in sum(logs, []):
        print(line)
    # The log's line order depends on timing; its set of lines does not.
    with open(f"{top}/shared/log", "rb") as f:
        lines = f.read().splitlines()
    print("log lines:", len(lines), "distinct:", len(set(lines)),
          "sorted sha:", hashlib.sha256(b"\n".join(sorted(lines))).hexdigest()[:16])
    os.rename(f"{top}/shared/log", f"{top}/log.unordered")


if __name__ == "__main__":
    main()
