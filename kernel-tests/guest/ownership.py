#!/usr/bin/env python3
"""Ownership rules (issue 17) through the kernel client, as unprivileged users.

    ownership.py DIR [ganesha]

One table of cases, the same as backend-mem/tests/ownership_linux.rs on the host: caller
(root, the owner, the owner while outside the file's group, a member of the other group,
a stranger) x change (chown with uid and gid each -1, the current value or another; chmod
to modes with and without set-id bits) x object (regular file, directory, symlink) x
starting mode (with and without set-id bits). root makes each object in DIR (owned by
1000:1000), a forked child takes the caller's ids (setgroups, setresgid, setresuid) and
makes the call; the parent prints the result and the object's mode and owner.

Checks (compared with the guest's tmpfs by suite.sh):
  ownership-table          result, mode, owner right after each call (what the client saw)
  ownership-after-remount  mode and owner of every object read back after umount + mount
chown(-1, -1) is left out of both: the client sends it as a SETATTR that sets nothing
(sattr3 cannot say "clear the set-id bits"), so what Linux does locally (clear them, or
EPERM for a stranger when there are bits to clear) cannot reach any NFSv3 server. Every
case, with those, is written to the detail file ownership-cases; on an NFS mount a note
counts the cases that differ from the reference's. With "ganesha" (reference context
only, KT_OWNERSHIP_GANESHA=1), the table also runs on nfs-ganesha (FSAL VFS on a tmpfs)
and a note gives its count.
"""

import errno
import os
import subprocess
import sys

OWNER, OTHER_GROUP = 1000, 2000
CALLERS = [
    ("root", 0, 0, [0]),
    ("owner", OWNER, OWNER, [OWNER, OTHER_GROUP]),
    ("owner-outside-group", OWNER, 3000, [3000, OTHER_GROUP]),
    ("member", 1001, 1001, [1001, OTHER_GROUP]),
    ("stranger", 1002, 1002, [1002]),
]
MODES = {"file": [0o6755, 0o2745, 0o755], "dir": [0o6755, 0o2745, 0o755], "symlink": [0o777]}


def ops(kind):
    out = [("chown", u, g) for u in (-1, OWNER, 1001) for g in (-1, OWNER, OTHER_GROUP)]
    if kind != "symlink":
        out += [("chmod", m, None) for m in (0o6755, 0o2755, 0o755)]
    return out


def op_name(op):
    if op[0] == "chmod":
        return f"chmod {op[1]:04o}"
    return f"chown {op[1]}:{op[2]}"


def uncarried(op):
    return op == ("chown", -1, -1)


def make(path, kind, mode):
    if kind == "file":
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    elif kind == "dir":
        os.mkdir(path, 0o700)
    else:
        os.symlink("target", path)
    os.chown(path, OWNER, OWNER, follow_symlinks=False)
    if kind != "symlink":
        os.chmod(path, mode)


def call(path, op):
    try:
        if op[0] == "chmod":
            os.chmod(path, op[1])
        else:
            os.chown(path, op[1], op[2], follow_symlinks=False)
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))


def run_as(caller, calls):
    """Results of calls [(path, op)] made in order by one forked child with the caller's
    ids (one fork per caller: a fork per call costs minutes under TCG)."""
    _, uid, gid, groups = caller
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            os.setgroups(groups)
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
            res = [call(path, op) for path, op in calls]
        except OSError as e:
            res = [f"cannot take the ids: {e}"] * len(calls)
        os.write(w, "\n".join(res).encode())
        os._exit(0)
    os.close(w)
    chunks = []
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(r)
    os.waitpid(pid, 0)
    res = b"".join(chunks).decode().split("\n")
    return res if len(res) == len(calls) else ["child died"] * len(calls)


def state(path):
    st = os.lstat(path)
    return f"{st.st_mode & 0o7777:04o} {st.st_uid}:{st.st_gid}"


def cases():
    n = 0
    for kind, modes in MODES.items():
        for mode in modes:
            for caller in CALLERS:
                for op in ops(kind):
                    n += 1
                    yield n, kind, mode, caller, op


def run_table(d):
    """Runs every case in d; returns [(case number, name, uncarried, result line)]."""
    os.makedirs(d, exist_ok=True)
    os.chmod(d, 0o777)
    all_cases = list(cases())
    for n, kind, mode, _, _ in all_cases:
        make(f"{d}/c{n}", kind, mode)
    results = {}
    for caller in CALLERS:
        mine = [(n, op) for n, _, _, c, op in all_cases if c is caller]
        got = run_as(caller, [(f"{d}/c{n}", op) for n, op in mine])
        results.update({n: res for (n, _), res in zip(mine, got)})
    rows = []
    for n, kind, mode, caller, op in all_cases:
        name = f"{kind} {mode:04o} by {caller[0]}: {op_name(op)}"
        line = f"{name}: {results[n]} -> {state(f'{d}/c{n}')}"
        rows.append((n, name, uncarried(op), line))
    return rows


def reload(cmd):
    os.chdir("/")
    r = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True)
    if r.returncode != 0:
        print("reload failed:", r.returncode, r.stdout.strip(), r.stderr.strip(), flush=True)
        sys.exit(1)


def after(d, rows):
    return [f"{name}: {state(f'{d}/c{n}')}" for n, name, _, _ in rows]


def differences(rows, reference_lines):
    """(all, uncarried) cases whose line differs from the reference's (same order)."""
    bad = [u for (_, _, u, line), ref in zip(rows, reference_lines) if line != ref]
    bad += [False] * abs(len(rows) - len(reference_lines))
    return len(bad), sum(1 for u in bad if u)


# nfs-ganesha registered its NFS and MOUNT programs with rpcbind over knfsd's; once it
# stops, drop those and let knfsd's mountd (if it runs) register again, or later mounts of
# knfsd (which find mountd through rpcbind) fail.
RESTORE_RPCBIND = """
kill "$(cat /tmp/ganesha/ganesha.pid)"; sleep 1
for v in 3 4; do rpcinfo -d 100003 $v 2>/dev/null; done
for v in 1 2 3; do rpcinfo -d 100005 $v 2>/dev/null; done
if pid=$(pidof rpc.mountd); then kill $pid; sleep 1; rpc.mountd; fi
"""


def ganesha(total):
    """The table on nfs-ganesha (FSAL VFS on a tmpfs), compared with the rows of tmpfs."""
    lib = os.environ["KT_GUEST"]
    mnt = "/mnt/ganesha-own"
    mount = (f". {lib}/common.sh && ganesha_start /ganesha-own >/dev/null && mkdir -p {mnt} && "
             f"$(ganesha_mount_cmd {mnt} | sed 's#/ganesha-export#/ganesha-own#')")
    r = subprocess.run(["bash", "-c", mount], capture_output=True, text=True)
    if r.returncode != 0:
        print("note: nfs-ganesha could not be started:", r.stdout[-300:], r.stderr[-300:])
        return
    try:
        rows = run_table(f"{mnt}/ownership")
        bad, bad_uncarried = differences(rows, total)
        print(f"note: nfs-ganesha 4.3 (FSAL VFS on tmpfs): {bad} of {len(rows)} cases differ "
              f"from the guest tmpfs, {bad_uncarried} of them chown -1:-1", flush=True)
        for _, _, _, line in rows:
            if line not in total:
                print("note:   ganesha", line)
    finally:
        os.chdir("/")
        subprocess.run(["umount", mnt])
        subprocess.run(["bash", "-c", RESTORE_RPCBIND])


def main():
    d = sys.argv[1]
    rows = run_table(d)
    print("== ownership-table", flush=True)
    for _, _, u, line in rows:
        if not u:
            print(line)
    all_lines = [line for _, _, _, line in rows]
    detail = os.environ["KT_DETAIL"]
    with open(f"{detail}/ownership-cases", "w") as f:
        f.write("\n".join(all_lines) + "\n")
    if os.environ.get("KT_KIND") == "nfs":
        out_dir = os.path.dirname(os.path.dirname(detail))
        with open(f"{out_dir}/ref/ownership.detail/ownership-cases") as f:
            reference = f.read().splitlines()
        bad, bad_uncarried = differences(rows, reference)
        print(f"note: {bad} of {len(rows)} cases differ from the guest tmpfs, "
              f"{bad_uncarried} of them chown -1:-1 (NFSv3 cannot carry it)", flush=True)
    elif len(sys.argv) > 2 and sys.argv[2] == "ganesha":
        ganesha(all_lines)
    reload(os.environ["KT_RELOAD"])
    print("== ownership-after-remount", flush=True)
    for (_, _, u, _), line in zip(rows, after(d, rows)):
        if not u:
            print(line)


main()
