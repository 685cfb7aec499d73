#!/usr/bin/env python3
"""NFSv4.2's SEEK, ALLOCATE, DEALLOCATE and COPY through the kernel: what lseek
SEEK_DATA/SEEK_HOLE, fallocate (util-linux) and copy_file_range answer on a file.

    space.py DIR seek|allocate|copy

Prints one line per observation; check.sh's grp_space runs it on the reference tmpfs
and on the NFSv4.2 mount and suite.sh compares the two. Holes are laid out in 64 KiB
units, the granularity of granary's mem backend and a multiple of tmpfs's pages, so a
server that keeps holes answers as tmpfs does.
"""

import errno
import hashlib
import os
import subprocess
import sys

K = 64 * 1024


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:16]


def seek(d):
    p = os.path.join(d, "sparse")
    fd = os.open(p, os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o644)
    os.pwrite(fd, b"a" * K, 0)
    os.pwrite(fd, b"b" * K, 16 * K)
    os.ftruncate(fd, 32 * K)
    os.fsync(fd)
    for what, name in ((os.SEEK_DATA, "data"), (os.SEEK_HOLE, "hole")):
        for at in (0, 1, 15, 16, 17, 31, 32, 40):
            try:
                found = os.lseek(fd, at * K, what)
                print(f"SEEK_{name.upper()} from {at} x 64 KiB: {found / K:g} x 64 KiB")
            except OSError as e:
                print(f"SEEK_{name.upper()} from {at} x 64 KiB: {errno.errorcode[e.errno]}")
    os.close(fd)


def fallocate(*args):
    r = subprocess.run(["fallocate", *args], capture_output=True, text=True)
    return "ok" if r.returncode == 0 else f"failed: {r.stderr.strip().split(': ')[-1]}"


def blocks_bytes(p):
    return os.stat(p).st_blocks * 512


def allocate(d):
    p = os.path.join(d, "space")
    with open(p, "wb") as f:
        f.write(b"x" * 100)
    print(f"fallocate -l 1 MiB: {fallocate('-l', str(16 * K), p)}")
    print(f"size: {os.stat(p).st_size}")
    print(f"1 MiB allocated: {blocks_bytes(p) >= 16 * K}")
    with open(p, "rb") as f:
        data = f.read()
    print(f"first 100 bytes kept: {data[:100] == b'x' * 100}, rest zeros: {data[100:] == bytes(len(data) - 100)}")
    with open(p, "r+b") as f:
        f.seek(4 * K)
        f.write(b"y" * (4 * K))
    print(f"fallocate -p 2 x 64 KiB at 5 x 64 KiB: {fallocate('-p', '-o', str(5 * K), '-l', str(2 * K), p)}")
    print(f"size kept: {os.stat(p).st_size}")
    print(f"128 KiB freed: {blocks_bytes(p) <= 14 * K}")
    with open(p, "rb") as f:
        data = f.read()
    print(f"punched range reads zeros: {data[5 * K:7 * K] == bytes(2 * K)}")
    print(f"around it kept: {data[4 * K:5 * K] == b'y' * K and data[7 * K:8 * K] == b'y' * K}")


def copy(d, src):
    """copy_file_range from $KT_SRC's 64 MiB file's first 12 MiB: more than one COPY
    moves (granary: 4 MiB each), so the kernel's loop over short counts is exercised."""
    a, b, c = (os.path.join(d, n) for n in ("copy-a", "copy-b", "copy-c"))
    with open(src, "rb") as f, open(a, "wb") as g:
        g.write(f.read(12 << 20))
    fa = os.open(a, os.O_RDONLY)
    fb = os.open(b, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    total, calls = 0, 0
    while True:
        n = os.copy_file_range(fa, fb, 1 << 30)
        if n == 0:
            break
        total, calls = total + n, calls + 1
    os.close(fb)
    print(f"copy_file_range: {total} bytes")
    print(f"note: copy_file_range calls: {calls}")
    print(f"copy identical: {sha(a) == sha(b)}")
    # At offsets, within one file (no overlap).
    fb = os.open(b, os.O_RDWR)
    n = os.copy_file_range(fa, fb, 100_000, 12_345, (12 << 20) + 7)
    os.close(fb)
    with open(a, "rb") as f:
        want = f.read()[12_345:112_345]
    with open(b, "rb") as f:
        got = f.read()
    print(f"copy at offsets: {n} bytes, size {len(got)}, identical: {got[(12 << 20) + 7:] == want}")
    # Past the source's end: nothing.
    fb = os.open(b, os.O_WRONLY)
    print(f"copy from the end: {os.copy_file_range(fa, fb, 10, 12 << 20, 0)} bytes")
    os.close(fb)
    os.close(fa)
    r = subprocess.run(["cp", "--reflink=never", a, c], capture_output=True)
    print(f"cp --reflink=never: rc {r.returncode}, identical: {sha(a) == sha(c)}")
    r = subprocess.run(["cp", "--reflink=always", a, c + "-clone"], capture_output=True)
    print(f"cp --reflink=always: {'cloned' if r.returncode == 0 else 'refused'}")


def main():
    d, what = sys.argv[1], sys.argv[2]
    os.makedirs(d, exist_ok=True)
    if what == "seek":
        seek(d)
    elif what == "allocate":
        allocate(d)
    else:
        copy(d, sys.argv[3])


main()
