#!/usr/bin/env bash
# One group of checks, run INSIDE the guest by suite.sh:  check.sh GROUP
# Works under $KT_ROOT (a tmpfs directory for the reference, an NFS mount otherwise)
# and prints what it observed: results, sizes, modes, owners, checksums; never times,
# inode numbers or the root's path. Each check of the group starts with a line
# "== NAME"; suite.sh runs the group on the guest's own tmpfs and on each NFS mount and
# compares the outputs check by check. Lines starting with "note:" are shown on
# failure but not compared.
# Environment (set by suite.sh):
#   KT_KIND   ref (tmpfs) | nfs
#   KT_ROOT   directory to work in
#   KT_MNT, KT_MOUNT   nfs only: the mount point and the command that mounts it
#   KT_SRC    source files made once per boot (f.SIZE: SIZE random bytes)
#   KT_GUEST  this directory
#   KT_DETAIL a directory for detail files (long outputs; see detail below)
#   KT_BACKING the directory behind KT_ROOT on the server (the reference: KT_ROOT itself)
#   KT_ROOT_B heads group: a second view of KT_ROOT (the object target: head B's mount of
#             the export head A's KT_ROOT mount serves; the reference: KT_ROOT itself)
#   KT_ROOT_B4 heads group: a third view (the object target: head B's NFSv4.2 mount, for
#             the byte-range lock check across heads; the reference: KT_ROOT itself)
#   KT_RESTART, KT_PORT  restart group: "$KT_RESTART stop|term|start $KT_PORT" kills -9
#             (or stops with SIGTERM) and starts again the server (restart.sh; the
#             reference: true, nothing to restart)
set -u
export LC_ALL=C

# rpc_calls: this context's NFSv3 calls so far, one "procedure count" line each: those of
# its mount (/proc/self/mountstats counts per mount) plus those of the mounts reload
# replaced, saved in $KT_RPC_SAVED before each umount. suite.sh runs a group's contexts
# at the same time, each on its own mount, so the client-wide /proc/net/rpc/nfs would mix
# them. The reference (no mount) has none.
KT_RPC_SAVED=/tmp/kt-rpc-saved${KT_MNT//\//-}
mount_calls() {
    [ -n "${KT_MNT:-}" ] || return 0
    awk -v m="$KT_MNT" '$1 == "device" { on = ($5 == m) }
        on && $1 ~ /^[A-Z]+:$/ && $2 ~ /^[0-9]+$/ { print tolower(substr($1, 1, length($1) - 1)), $2 }' /proc/self/mountstats
}
rpc_calls() {
    { cat "$KT_RPC_SAVED" 2>/dev/null; mount_calls; } |
        awk '!($1 in n) { order[++k] = $1 } { n[$1] += $2 } END { for (i = 1; i <= k; i++) print order[i], n[order[i]] }'
}

# reload: make what follows read from the server, not from the client's caches. On
# NFS that is umount + mount (which also writes back dirty data), so no file on the
# mount may be open and no process may have its cwd there. On the reference tmpfs
# there is nothing to reload.
reload() {
    cd / || return 1
    [ "$KT_KIND" = nfs ] || return 0
    local calls
    calls=$(mount_calls)
    umount "$KT_MNT" || { echo "reload: umount $KT_MNT failed"; fuser -vm "$KT_MNT" 2>&1; return 1; }
    echo "$calls" >>"$KT_RPC_SAVED"
    $KT_MOUNT || { echo "reload: mount failed: $KT_MOUNT"; return 1; }
}
export -f reload mount_calls
export KT_RELOAD=reload KT_KIND KT_MNT KT_MOUNT KT_RPC_SAVED

sha() { sha256sum | cut -c1-16; }

# step NAME: a note with the time since the previous step (or the start) and this
# context's NFSv3 calls in between, by procedure (rpc_calls above).
KT_STEP_T=${EPOCHREALTIME/./}
KT_STEP_RPC=$(rpc_calls)
step() {
    local now=${EPOCHREALTIME/./} rpc
    rpc=$(rpc_calls)
    echo "note: step $1: $(( (now - KT_STEP_T) / 1000 )) ms; calls: $(awk -v a="$KT_STEP_RPC" -v b="$rpc" 'BEGIN {
        n = split(a, x, "\n"); for (i = 1; i <= n; i++) { split(x[i], f, " "); before[f[1]] = f[2] }
        n = split(b, y, "\n"); s = ""
        for (i = 1; i <= n; i++) { split(y[i], f, " "); d = f[2] - before[f[1]]; if (d) s = s " " f[1] "=" d }
        print s == "" ? " none" : s }')"
    KT_STEP_T=$now KT_STEP_RPC=$rpc
}

# detail NAME: save stdin as a detail file (suite.sh diffs the reference's and the
# server's on failure) and print its line count and checksum.
detail() {
    mkdir -p "$KT_DETAIL"
    sed "s#$KT_ROOT#ROOT#g" >"$KT_DETAIL/$1"
    echo "$1: $(wc -l <"$KT_DETAIL/$1") lines, sha $(sha <"$KT_DETAIL/$1")"
}

# manifest DIR [times]: one sorted line per entry: path, type, mode, owner, link count,
# size (not for directories: tmpfs and NFS servers report different directory sizes),
# symlink target, and with "times" mtime and ctime (ns).
manifest() {
    local fmt='%p\t%y\t%m\t%U:%G\t%n\t%s\t%l'
    [ "${2:-}" = times ] && fmt="$fmt\t%T@\t%C@"
    (cd "$1" && find . -printf "$fmt\n" | awk -F'\t' -v OFS='\t' '$2 == "d" { $6 = "-" } { print }' | sort)
}

# contents DIR: sha256 of every regular file below DIR, sorted by path.
contents() {
    (cd "$1" && find . -type f -print0 | sort -z | xargs -0 -r sha256sum)
}

# ------------------------------------------------------------- copy in and out
# Files of 0 B, 1 B, 4 KiB, 1 MiB + 1 and 64 MiB: cp in, umount + mount, cp out (so
# from the server) and cmp with the source; then overwrite 7 bytes in the middle in
# place (partial pages) and checksum after another umount + mount.
SIZES=(0 1 4096 1048577 67108864)
grp_copy() {
    local d=$KT_ROOT/copy n back=/tmp/kt-back.$$ r=/tmp/kt-copy.$$
    mkdir -p "$d"
    for n in "${SIZES[@]}"; do cp "$KT_SRC/f.$n" "$d/f.$n" >"$r.$n" 2>&1; echo "cp in: $?" >>"$r.$n"; done
    step "cp in"
    reload || return 1
    for n in "${SIZES[@]}"; do
        {
            echo "size on server: $(stat -c %s "$d/f.$n")"
            cp "$d/f.$n" "$back"; echo "cp out: $?"
            cmp "$KT_SRC/f.$n" "$back" && echo "copied out: identical to the source"
            rm -f "$back"
        } >>"$r.$n" 2>&1
        [ "$n" -gt 8192 ] &&
            printf 'granary' | dd of="$d/f.$n" bs=1 seek=$((n / 2 - 3)) conv=notrunc status=none
    done
    step "cp out, overwrite"
    reload || return 1
    for n in "${SIZES[@]}"; do
        echo "== copy-$n"
        cat "$r.$n"; rm -f "$r.$n"
        [ "$n" -gt 8192 ] && echo "after 7 bytes written in the middle: size $(stat -c %s "$d/f.$n"), sha $(sha <"$d/f.$n")"
    done
    rm -rf "$d"
}

# ------------------------------------------------------------- a real tree
# cp -a of a part of the guest's /usr/share/doc ($KT_SRC/doc, made by suite.sh: about
# 290 entries, 8 MB), then after umount + mount diff -r (every byte read back from the
# server) and the attributes cp -a keeps: type, mode, owner, link count, size, symlink
# target and mtime.
grp_doc_tree() {
    local d=$KT_ROOT/doc-tree src=$KT_SRC/doc
    mkdir -p "$d"
    echo "== doc-tree-cp-in"
    cp -a "$src" "$d/doc"; echo "cp -a in: $?"
    step "cp -a in"
    reload || return 1
    diff -r "$src" "$d/doc" && echo "diff -r with the source: identical"
    step "diff -r"
    echo "== doc-tree-attributes"
    manifest "$src" times | cut -f1-8 >/tmp/kt-src-manifest.$$
    manifest "$d/doc" times | cut -f1-8 | detail doc-manifest
    if cmp -s /tmp/kt-src-manifest.$$ "$KT_DETAIL/doc-manifest"; then echo "as the source"
    else echo "differs from the source (< source, > copy):"; diff /tmp/kt-src-manifest.$$ "$KT_DETAIL/doc-manifest" | head -20; fi
    rm -f /tmp/kt-src-manifest.$$
    step "manifest"
    # The tree stays on the mount: persist checks it again across umount + mount.
}

# ------------------------------------------------------------- a big directory
# 1,200 files by default (every 100th with a few bytes), made by 4 processes at once; after
# umount + mount, ls -l, find and du on it, then rm -rf, which reads the directory in
# chunks while it removes entries (the cookies of later chunks must still hold).
# One umount + mount before ls only: find straight after a mount makes the client
# read most of a big directory with plain READDIR and then LOOKUP + GETATTR every
# entry (see kernel-tests/README.md), which under TCG costs minutes, not coverage.
grp_bigdir() {
    local d=$KT_ROOT/bigdir n=${KT_BIGDIR_ENTRIES:-1200}
    echo "== bigdir-create"
    python3 -S - "$d" "$n" <<'EOF'
import os, sys
from multiprocessing import Pool
d, n = sys.argv[1], int(sys.argv[2])
def make(part):
    for i in range(part, n, 4):
        fd = os.open(f"{d}/f{i:05d}", os.O_WRONLY | os.O_CREAT, 0o644)
        if i % 100 == 0:
            os.write(fd, f"entry {i}\n".encode())
        os.close(fd)
os.mkdir(d)
with Pool(4) as p:
    p.map(make, range(4))
print("created", len(os.listdir(d)))
EOF
    step create
    reload || return 1
    echo "== bigdir-ls"
    # Without the "total" line: it counts blocks, which servers report differently.
    ls -ln --time-style=+T "$d" >/tmp/kt-ls.$$; echo "ls -l rc: $?"
    grep -v '^total' /tmp/kt-ls.$$ | detail ls-l
    echo "note: ls -l $(head -1 /tmp/kt-ls.$$)"; rm -f /tmp/kt-ls.$$
    echo "ls -f: $(ls -f "$d" | wc -l) names"
    step "ls -l, ls -f"
    echo "== bigdir-find"
    find "$d" -mindepth 1 -printf '%P %y %m %U:%G %s %n\n' | sort | detail find
    echo "find -size 11c: $(find "$d" -size 11c | wc -l), -empty: $(find "$d" -empty | wc -l)"
    echo "find -name f0999?: $(find "$d" -name 'f0999?' | sort | tr '\n' ' ')"
    step find
    echo "== bigdir-du"
    echo "du --inodes: $(du -s --inodes "$d" | cut -f1)"
    du -ab "$d" | grep -v "$(printf '\t')$d\$" | sort -k2 | detail du-ab
    echo "note: du -sk (blocks, not compared): $(du -sk "$d" | cut -f1) KiB; f00100: $(stat -c 'size %s blocks %b' "$d/f00100")"
    step du
    echo "== bigdir-rm"
    rm -rf "$d"; echo "rm -rf: $?"
    [ -e "$d" ] && echo "still there: $(ls -f "$d" | wc -l) entries" || echo "gone"
    step "rm -rf"
}

# ------------------------------------------------------------- POSIX semantics
grp_posix() { python3 -S "$KT_GUEST/posix.py" "$KT_ROOT/posix"; }
grp_squash() { python3 -S "$KT_GUEST/posix.py" "$KT_ROOT/posix" squash; }

# ------------------------------------------------------------- fio --verify
# Eight jobs at once, each on its own file: random and sequential writes, 4 KiB and
# 1 MiB blocks, iodepth 1 and 16, buffered and O_DIRECT, in the half of the 16
# combinations where direct = 1 - (rand + 4k + qd1) mod 2, so every pair of two factors
# appears in all four combinations. The write pass writes each block once with crc32c
# headers; after umount + mount a --verify_only pass reads back and checks every block
# from the server. tmpfs (6.1) has no O_DIRECT, so the reference runs all buffered.
# KT_FIO_FULL=1 runs all 16.
FIO_JOBS=(
    "randwrite 4k 1 1" "randwrite 4k 16 0" "randwrite 1m 1 0" "randwrite 1m 16 1"
    "write 4k 1 0" "write 4k 16 1" "write 1m 1 1" "write 1m 16 0"
)
[ "${KT_FIO_FULL:-0}" = 1 ] && FIO_JOBS+=(
    "randwrite 4k 1 0" "randwrite 4k 16 1" "randwrite 1m 1 1" "randwrite 1m 16 0"
    "write 4k 1 1" "write 4k 16 0" "write 1m 1 0" "write 1m 16 1"
)
fio_jobfile() { # DIR VERIFY_ONLY
    local j rw bs qd direct eng size
    printf '[global]\nverify=crc32c\nverify_fatal=1\nrandrepeat=1\ndo_verify=0\n'
    [ "$2" = 1 ] && printf 'verify_only=1\ndo_verify=1\n'
    for j in "${FIO_JOBS[@]}"; do
        read -r rw bs qd direct <<<"$j"
        # libaio keeps 16 O_DIRECT requests in flight; for buffered I/O it blocks in
        # io_submit, so buffered QD16 uses io_uring (whose workers run them at once).
        if [ "$qd" = 1 ]; then eng=psync; elif [ "$direct" = 1 ]; then eng=libaio; else eng=io_uring; fi
        if [ "$bs" = 4k ]; then size=2m; else size=16m; fi
        [ "$KT_KIND" = ref ] && direct=0
        printf '[fio-%s-%s-qd%s-d%s]\nfilename=%s\nrw=%s\nbs=%s\niodepth=%s\ndirect=%s\nioengine=%s\nsize=%s\n' \
            "$rw" "$bs" "$qd" "${j##* }" "$1/$rw-$bs-$qd-${j##* }" "$rw" "$bs" "$qd" "$direct" "$eng" "$size"
    done
}
grp_fio() {
    local d=$KT_ROOT/fio
    mkdir -p "$d"
    fio_jobfile "$d" 0 >/tmp/kt-fio-w.$$
    fio_jobfile "$d" 1 >/tmp/kt-fio-v.$$
    fio --output-format=terse --terse-version=3 /tmp/kt-fio-w.$$ >/tmp/kt-fio-w.out.$$ 2>&1
    echo "write pass: rc $?" >/tmp/kt-fio-rc.$$
    step "write pass"
    reload || return 1
    fio --output-format=terse --terse-version=3 /tmp/kt-fio-v.$$ >/tmp/kt-fio-v.out.$$ 2>&1
    echo "verify pass: rc $?" >>/tmp/kt-fio-rc.$$
    step "verify pass"
    # terse v3: field 3 the job name, 5 its error (errno; EILSEQ 84 on a bad block).
    local j name
    for j in $(grep -o '^\[fio-[^]]*' /tmp/kt-fio-w.$$ | tr -d '['); do
        echo "== $j"
        echo "write error: $(awk -F';' -v n="$j" '$3 == n { print $5 }' /tmp/kt-fio-w.out.$$)"
        echo "verify error: $(awk -F';' -v n="$j" '$3 == n { print $5 }' /tmp/kt-fio-v.out.$$)"
        echo "size: $(stat -c %s "$d/$(sed -n "/^\[$j\]/,/^filename/s/^filename=//p" /tmp/kt-fio-w.$$ | xargs basename)")"
        grep -h "$j" /tmp/kt-fio-[wv].out.$$ | grep -v '^3;' | head -5
        awk -F';' -v n="$j" '$3 == n { printf "note: write %s KiB/s %s IOPS\n", $48, $49 }' /tmp/kt-fio-w.out.$$
    done
    echo "== fio-status"
    cat /tmp/kt-fio-rc.$$
    grep -hv '^3;' /tmp/kt-fio-[wv].out.$$ | grep -iE 'verify|crc|bad|error' | head -10
    rm -f /tmp/kt-fio-*.$$; rm -rf "$d"
}

# ------------------------------------------------------------- concurrency
# stress-ng's hdd (verifies what it wrote), dir, rename, dentry and filename stressors
# at once, for KT_STRESS_SECS (default 10). Not its link and symlink stressors: each of their bogo
# operations makes and removes thousands of links, 265 s and 108 s for one under TCG
# (they cannot stop within a time bound); writers.py covers links and symlinks.
grp_stress_ng() {
    local d=$KT_ROOT/stress-ng
    mkdir -p "$d"
    echo "== stress-ng"
    stress-ng --temp-path "$d" --timeout "${KT_STRESS_SECS:-10}s" --hdd 2 --hdd-bytes 8m \
        --hdd-write-size 64k --verify --dir 1 --dir-dirs 64 --rename 1 --dentry 1 --dentries 256 \
        --filename 1 --metrics-brief >/tmp/kt-stress.$$ 2>&1
    echo "stress-ng: rc $?"
    sed -n 's/^stress-ng: [a-z]*: *\[[0-9]*\] //p' /tmp/kt-stress.$$ |
        grep -E '^(passed|failed|skipped|metrics untrustworthy):|fail|error|verif' | grep -v 'failed: 0'
    grep -E ' (hdd|dir|rename|dentry|filename) ' /tmp/kt-stress.$$ | sed 's/^/note: /' | tail -6
    step stress-ng
    echo "left behind: $(find "$d" -mindepth 1 | wc -l)"
    rm -rf "$d" /tmp/kt-stress.$$
}

grp_writers() {
    local d=$KT_ROOT/writers
    mkdir -p "$d"
    echo "== writers"
    python3 -S "$KT_GUEST/writers.py" "$d/tree" 4 "${KT_WRITER_ROUNDS:-40}"; echo "writers: rc $?"
    step writers
    reload || return 1
    manifest "$d/tree" | detail writers-manifest
    # The log's line order depends on timing; its sorted lines do not.
    contents "$d/tree" | grep -v ' ./log.unordered$' | detail writers-contents
    echo "log read back, sorted: $(sort "$d/tree/log.unordered" | sha), $(wc -l <"$d/tree/log.unordered") lines"
    step "manifest, contents"
    # The tree stays on the mount: persist checks it again across umount + mount.
}

# ------------------------------------------------------------- two heads, close-to-open
# The object target: a writer on head A's mount (NFSv4.2) writes and closes, a reader on
# head B's mount (NFSv3) opens next and must read every byte; creates, renames, removes,
# chmod, chown and utimes on one side seen at the other's next open or listing; and the
# other way round; then a fcntl write lock held through head A's mount makes F_SETLK of
# the same bytes through head B's NFSv4.2 mount fail with EAGAIN (heads.py). On the
# reference every view is the same tmpfs directory.
grp_heads() {
    python3 -S "$KT_GUEST/heads.py" "$KT_ROOT" "${KT_ROOT_B:?heads needs KT_ROOT_B}" \
        "${KT_ROOT_B4:?heads needs KT_ROOT_B4}"
    echo "heads: rc $?"
    step heads
}

# ------------------------------------------------------------- NFSv4.2 space and copy
# lseek SEEK_DATA/SEEK_HOLE over a file with 64 KiB holes, fallocate (util-linux) to
# allocate and punch, copy_file_range (12 MiB, at offsets, past the end) and
# cp --reflink=never/always, through the kernel (space.py). Then, on an NFS mount, that
# the client sent the server its SEEK, ALLOCATE, DEALLOCATE and COPY (this mount's
# mountstats) rather than doing the work itself; on the reference the file system
# does it, so it prints the same. On an NFSv3 context (knfsd) the group mounts the same
# export with NFSv4.2 beside it and runs there.
served() { # MNT OP...: each OP reached the server of MNT (NFS), or the reference's own file system
    local mnt=$1 op n
    shift
    for op in "$@"; do
        if [ "$KT_KIND" = nfs ]; then
            n=$(KT_MNT=$mnt mount_calls | awk -v o="$op" '$1 == o { print $2 }')
            [ "${n:-0}" -gt 0 ] && echo "$op: served" || echo "$op: not sent (the client did it alone)"
            echo "note: $op calls: ${n:-0}"
        else
            echo "$op: served"
        fi
    done
}
grp_space() {
    local mnt=${KT_MNT:-} d=$KT_ROOT/space v42=/tmp/kt-space-v42 src port
    if [ "$KT_KIND" = nfs ] && [[ $KT_MOUNT == *vers=3* ]]; then
        # An NFSv3 mount (knfsd's target) has none of these operations: the same export
        # is mounted again with NFSv4.2 beside it, and the group runs there.
        src=${KT_MOUNT% *}; src=${src##* }
        port=$(sed -n 's/.*[,=]port=\([0-9]*\).*/\1/p' <<<"$KT_MOUNT")
        mkdir -p "$v42"
        mount -t nfs -o "vers=4.2,proto=tcp,port=${port:-2049},retry=0" "$src" "$v42" ||
            { echo "space: the NFSv4.2 mount of $src failed"; return 1; }
        mnt=$v42 d=$v42${KT_ROOT#"$KT_MNT"}/space
    fi
    mkdir -p "$d"
    echo "== space-seek"
    python3 -S "$KT_GUEST/space.py" "$d" seek; echo "rc $?"
    served "$mnt" seek
    echo "== space-allocate"
    python3 -S "$KT_GUEST/space.py" "$d" allocate; echo "rc $?"
    served "$mnt" allocate deallocate
    step "seek, allocate"
    echo "== space-copy"
    python3 -S "$KT_GUEST/space.py" "$d" copy "$KT_SRC/f.67108864"; echo "rc $?"
    served "$mnt" copy
    step copy
    if [ "$mnt" = "$v42" ]; then
        if ! { cd / && umount "$v42" && mount -t nfs -o "vers=4.2,proto=tcp,port=${port:-2049},retry=0" "$src" "$v42"; }; then
            echo "space: remounting $v42 failed"; return 1
        fi
    else
        reload || return 1
    fi
    echo "== space-after-reload"
    echo "sparse: size $(stat -c %s "$d/sparse"), sha $(sha <"$d/sparse")"
    echo "space: size $(stat -c %s "$d/space"), sha $(sha <"$d/space")"
    echo "copies: $(sha <"$d/copy-a") $(sha <"$d/copy-c"), copy-b size $(stat -c %s "$d/copy-b")"
    rm -rf "$d"
    [ "$mnt" = "$v42" ] && umount "$v42"
    return 0
}

# ------------------------------------------------------------- byte-range locks
# fcntl and flock locks between two clients of the server (locks.py): on NFS a second
# mount of the same export with NFSv4.1 beside the group's NFSv4.2 one, which the Linux
# client makes a client of its own (its own client id: the minor version is part of the
# client's name), so the locks meet only at the server; on the reference the same
# directory twice (the local kernel's locks between processes).
grp_locks() {
    local d=$KT_ROOT/locks b c mnt_b= src port other=4.1
    mkdir -p "$d"
    if [ "$KT_KIND" = nfs ]; then
        # The second client mounts the same export with the other minor version.
        mnt_b=$KT_MNT-b src=${KT_MOUNT% *}; src=${src##* }
        port=$(sed -n 's/.*[,=]port=\([0-9]*\).*/\1/p' <<<"$KT_MOUNT")
        [[ $KT_MOUNT == *vers=4.1* ]] && other=4.2
        mkdir -p "$mnt_b"
        mount -t nfs -o "vers=$other,proto=tcp,port=$port,retry=0" "$src" "$mnt_b" ||
            { echo "locks: the second (NFSv$other) mount failed"; return 1; }
        b=$mnt_b${d#"$KT_MNT"}
        echo "note: NFSv4 clients of this kernel to port $port: $(awk -v p="$(printf %x "$port")" \
            '$1 == "v4" && tolower($3) == p' /proc/fs/nfsfs/servers | wc -l)"
    else
        b=$d
    fi
    for c in fcntl upgrade split many flock waiter killed sqlite; do
        echo "== locks-$c"
        python3 -S "$KT_GUEST/locks.py" "$d/$c" "$b/$c" "$c"; echo "rc $?"
        step "$c"
    done
    [ -z "$mnt_b" ] || umount "$mnt_b"
    rm -rf "$d"
}

# ------------------------------------------------------------- persistence
grp_persist() {
    local d=$KT_ROOT/persist before=/tmp/kt-persist.$$ after=/tmp/kt-persist2.$$
    mkdir -p "$d/a/b/c" "$d/empty"
    cp "$KT_SRC/f.1048577" "$d/a/mib"
    head -c 4095 "$KT_SRC/f.1048577" >"$d/a/b/4095"
    head -c 4097 "$KT_SRC/f.1048577" >"$d/a/b/c/4097"
    : >"$d/zero"
    truncate -s 10M "$d/sparse"
    printf 'middle' | dd of="$d/sparse" bs=1 seek=$((5 << 20)) conv=notrunc status=none
    ln "$d/a/mib" "$d/hard"; ln -s a/b/4095 "$d/sym"; mkfifo "$d/fifo"
    chmod 0751 "$d/a"; chmod 0600 "$d/zero"; chown 1000:1000 "$d/a/b/4095"
    sync
    step "tree, sync"
    { manifest "$KT_ROOT" times; contents "$KT_ROOT"; } >"$before"
    step "manifest before"
    reload || return 1
    { manifest "$KT_ROOT" times; contents "$KT_ROOT"; } >"$after"
    step "manifest after umount + mount"
    echo "== persist-whole-mount"
    # Everything the earlier checks left (the doc tree, the writers' tree, this tree).
    if cmp -s "$before" "$after"; then
        echo "after sync, umount, mount: every entry, attribute, time and byte intact"
    else
        echo "changed across umount + mount (< before, > after):"; diff "$before" "$after" | head -40
    fi
    echo "note: $(grep -c . "$before") lines of manifest and checksums"
    echo "== persist-tree"
    manifest "$d" | detail persist-manifest; contents "$d" | detail persist-contents
    rm -f "$before" "$after"
}

# ------------------------------------------------------------- ownership (issue 17)
# ownership.py: chown/chmod by root, the owner, a group member and a stranger (forked
# children with setresuid), compared with the guest's tmpfs; on the reference it also
# counts nfs-ganesha's differences with KT_OWNERSHIP_GANESHA=1 (a note; off by default:
# it adds a server start to the suite).
grp_ownership() {
    local extra=
    [ "$KT_KIND" = ref ] && [ "${KT_OWNERSHIP_GANESHA:-0}" = 1 ] && extra=ganesha
    python3 -S "$KT_GUEST/ownership.py" "$KT_ROOT/ownership" $extra
    rm -rf "$KT_ROOT/ownership"
}

# ------------------------------------------------------------- acl (issue 25)
# acl.py: POSIX ACLs that deny what the mode allows and grant what it denies, a default
# ACL inherited by CREATE and MKDIR, group-only access through a supplementary group and
# a set-gid directory, each as unprivileged users (forked children with setresuid); root
# lays the files out with setfacl in the server's directory behind the mount.
grp_acl() {
    python3 -S "$KT_GUEST/acl.py" "$KT_ROOT" "$KT_BACKING"
}

# ------------------------------------------------------------- quota (issue 25)
# A user quota on an ext4 image made with quotas (mkfs.ext4 -O quota, mounted usrquota)
# in each context: uid 1001 has a hard limit of 1 MiB. The reference writes locally;
# host's context serves the image's directory with granary's host backend (--squash
# none, port QUOTA_PORT) and knfsd's exports it; both mounted by the kernel client. uid
# 1001 writing 2 MiB (64 KiB synchronous writes) must stop with EDQUOT at its limit, its
# usage must not pass it, and root's usage must not move (granary acting as root would
# charge root, or let CAP_SYS_RESOURCE past the limit); root then writes 2 MiB, charged
# to root.
QUOTA_PORT=20494
quota_mount() { # DIR: this context's view of a fresh quota image's directory at DIR
    local img=/var/tmp/kt-quota${KT_MNT//\//-}.img fs=/quota${KT_MNT//\//-} i
    modprobe -q loop
    rm -f "$img"; truncate -s 64M "$img"
    mkfs.ext4 -q -F -O quota -E quotatype=usrquota "$img" || return 1
    mkdir -p "$fs" "$1" && mount -o loop,usrquota "$img" "$fs" || return 1
    quotaon -u "$fs" 2>/dev/null
    mkdir "$fs/dir" && chmod 0777 "$fs/dir"
    setquota -u 1001 0 1024 0 0 "$fs" || return 1
    QUOTA_FS=$fs
    case $KT_MNT in
    /mnt/host)
        "$GRANARY" serve "$fs/dir" --state-dir /var/lib/granary-kt-quota --listen "127.0.0.1:$QUOTA_PORT" \
            --no-portmap --squash none >/tmp/granary-quota.log 2>&1 &
        QUOTA_PID=$!
        for i in $(seq 100); do ss -Htln "sport = :$QUOTA_PORT" | grep -q . && break; sleep 0.1; done
        mount -t nfs -o "vers=3,proto=tcp,port=$QUOTA_PORT,mountport=$QUOTA_PORT,mountproto=tcp,nolock,retry=0" \
            127.0.0.1:/ "$1" ;;
    /mnt/knfsd)
        exportfs -o "rw,sync,no_subtree_check,no_root_squash,insecure,fsid=40" "127.0.0.1:$fs/dir" &&
            mount -t nfs -o "vers=3,proto=tcp,port=$KNFSD_PORT,mountproto=tcp,nolock,retry=0" \
                "127.0.0.1:$fs/dir" "$1" ;;
    *) mount --bind "$fs/dir" "$1" ;;
    esac
}
quota_used() { # UID: blocks (KiB) charged to UID on the quota image
    quota -w -u "$1" 2>/dev/null | awk -v fs="$(findmnt -no SOURCE "$QUOTA_FS")" '$1 == fs { print $2 + 0 }'
}
grp_quota() {
    local m=/mnt/quota${KT_MNT//\//-} out root_before QUOTA_PID= QUOTA_FS
    echo "== quota-setup"
    quota_mount "$m" && echo "mounted"
    root_before=$(quota_used 0)
    echo "== quota-user-limit"
    out=$(setpriv --reuid=1001 --regid=1001 --clear-groups \
        dd if=/dev/zero of="$m/alice" bs=64k count=32 oflag=sync 2>&1)
    case $out in
    *"Disk quota exceeded"*) echo "uid 1001, 2 MiB against a 1 MiB limit: EDQUOT" ;;
    *) echo "uid 1001, 2 MiB against a 1 MiB limit: no EDQUOT: $out" ;;
    esac
    used=$(quota_used 1001)
    echo "note: uid 1001 uses $used KiB"
    [ "${used:-0}" -le 1024 ] && [ "${used:-0}" -gt 0 ] && echo "uid 1001's usage is within its limit and not zero"
    [ "$(quota_used 0)" = "$root_before" ] && echo "root's usage did not move"
    echo "== quota-root"
    dd if=/dev/zero of="$m/root" bs=64k count=32 oflag=sync 2>/dev/null && echo "root, 2 MiB: ok"
    [ $(( $(quota_used 0) - root_before )) -ge 2048 ] && echo "root is charged for it"
    cd / && umount "$m"
    [ -n "$QUOTA_PID" ] && kill "$QUOTA_PID" && wait "$QUOTA_PID" 2>/dev/null
    [ "$KT_MNT" = /mnt/knfsd ] && exportfs -u "127.0.0.1:$QUOTA_FS/dir"
    umount "$QUOTA_FS"
    grep -hE 'WARN|ERROR|panic' /tmp/granary-quota.log 2>/dev/null | sed 's/^/note: granary log: /' | head
    return 0
}

# ------------------------------------------------------------- EROFS images (issue 14)
# The images erofs-images.sh made on the host (plain and lz4), read three ways, each
# compared with the reference: the reference loop-mounts each image with the guest's
# erofs driver; granary's context starts `granary serve IMAGE` (a server of its own per
# image) and mounts it; knfsd's context exports the loop mount with kernel nfsd. Checks:
# the manifest of every entry (type, mode, owner, links, size, symlink target, mtime),
# every file's sha256, the 10,000-entry directory, and that every change fails (EROFS).
ERO_PORT=20495
GRANARY=${GRANARY:-/usr/local/bin/granary}
KNFSD_PORT=${KNFSD_PORT:-2049}
erofs_mount() { # IMG MNT: the image at MNT, read the way this context reads it
    local img=/tmp/kt-erofs/$1.erofs loop=/mnt/erofs-loop-$1 port i
    mkdir -p "$2" "$loop"
    case $KT_MNT in
    /mnt/granary)
        port=$((ERO_PORT + ${#ERO_PIDS[@]}))
        "$GRANARY" serve "$img" --listen "127.0.0.1:$port" --no-portmap --squash none \
            >"/tmp/granary-erofs-$1.log" 2>&1 &
        ERO_PIDS+=($!)
        for i in $(seq 100); do ss -Htln "sport = :$port" | grep -q . && break; sleep 0.1; done
        mount -t nfs -o "vers=3,proto=tcp,port=$port,mountport=$port,mountproto=tcp,nolock,retry=0" \
            127.0.0.1:/ "$2" ;;
    /mnt/knfsd)
        mountpoint -q "$loop" || mount -t erofs -o loop,ro "$img" "$loop" || return 1
        exportfs -o "ro,no_subtree_check,no_root_squash,insecure,fsid=$((30 + ${#ERO_PIDS[@]}))" "127.0.0.1:$loop" &&
            ERO_PIDS+=(0) &&
            mount -t nfs -o "vers=3,proto=tcp,port=$KNFSD_PORT,mountproto=tcp,nolock,retry=0" "127.0.0.1:$loop" "$2" ;;
    *) mount -t erofs -o loop,ro "$img" "$2" ;;
    esac
}
erofs_changes() { # DIR: every kind of change; each must fail with EROFS
    python3 -S "$KT_GUEST/erofs_changes.py" "$1"
}
grp_erofs() {
    local img m t ERO_PIDS=()
    # The kernel's erofs and loop drivers, for the reference and knfsd (modules in 6.1).
    modprobe -q erofs; modprobe -q loop
    [ -d /tmp/kt-erofs ] || cp -r "$KT_STAGE/erofs" /tmp/kt-erofs
    for img in plain lz4; do
        m=/mnt/erofs-$img
        echo "== erofs-$img-mount"
        erofs_mount "$img" "$m" && echo "mounted"
        step "$img mount"
        echo "== erofs-$img-tree"
        manifest "$m" times | cut -f1-8 | detail "erofs-$img-manifest"
        # Every file but the big directory's 10,000 (empty but one): opening each through
        # NFS under TCG takes minutes; the manifest has their sizes, bigdir reads one.
        (cd "$m" && find . -path ./big -prune -o -type f -print0 | sort -z | xargs -0 -r sha256sum) |
            detail "erofs-$img-contents"
        step "$img manifest, contents"
        echo "== erofs-$img-bigdir"
        echo "ls -f: $(ls -f "$m/big" | wc -l) names, sorted sha $(ls "$m/big" | sha)"
        echo "entry-00100: $(cat "$m/big/entry-00100")"
        step "$img bigdir"
        echo "== erofs-$img-changes"
        erofs_changes "$m"
        step "$img changes"
        umount "$m"
    done
    for t in "${ERO_PIDS[@]}"; do [ "$t" != 0 ] && kill "$t" && wait "$t"; done
    for img in plain lz4; do
        exportfs -u "127.0.0.1:/mnt/erofs-loop-$img" 2>/dev/null
        mountpoint -q "/mnt/erofs-loop-$img" && umount "/mnt/erofs-loop-$img"
    done
    grep -hE 'WARN|ERROR|panic' /tmp/granary-erofs-*.log 2>/dev/null | sed 's/^/note: granary log: /' | head
    return 0
}

# ------------------------------------------------------------- plain NFSv4.2 mount (issue 27)
# What a user types: `mount -t nfs 127.0.0.1:/ /mnt/plain`, no options, against granary
# on 127.0.0.1:2049 (NFSv3, MOUNT and NFSv4.1/4.2 on one port, no rpcbind), serving in
# turn the mem backend, the host backend (a guest tmpfs directory, /export-plain) and
# the plain EROFS image of the erofs group. The kernel negotiates the version: the
# mount must say vers=4.2 in /proc/mounts. On mem and host: files written, read, listed,
# and read again after umount + the same plain mount (on host also from the directory
# the server serves); on erofs: the tree (but the 10,000 entries of big/) and its
# contents read, and every kind of change refused (EROFS). The reference works on
# tmpfs directories and loop-mounts the image. suite.sh runs this group before any
# server starts, since knfsd listens on 2049 too; if knfsd runs anyway, it is stopped
# for the group and started again after it.
PLAIN_PORT=2049
PLAIN_MNT=/mnt/plain
plain_mount() { # the mount without options; its time is a note
    local t0=${EPOCHREALTIME/./} rc
    timeout 120 mount -t nfs "127.0.0.1:/" "$PLAIN_MNT"; rc=$?
    echo "note: mount took $(( (${EPOCHREALTIME/./} - t0) / 1000 )) ms"
    return $rc
}
plain_umount() { # umount, keeping the mount's call counts for step (as reload does)
    local calls
    calls=$(mount_calls)
    umount "$PLAIN_MNT" && echo "$calls" >>"$KT_RPC_SAVED"
}
plain_vers() { # the file system type and NFS version of the plain mount, from /proc/mounts
    awk -v m="$PLAIN_MNT" '$2 == m { print $3, $4 }' /proc/mounts | sed -n 's/^\([^ ]*\) .*\(vers=[0-9.]*\).*/type \1, \2/p'
}
plain_start() { # mem|host|erofs: granary serving it on 127.0.0.1:2049, mounted plainly
    local what=()
    case $1 in
    host) rm -rf /export-plain /var/lib/granary-kt-plain; mkdir -p /export-plain
          what=(/export-plain --state-dir /var/lib/granary-kt-plain) ;;
    erofs) what=("$KT_STAGE/erofs/plain.erofs") ;;
    esac
    if ss -Htln "sport = :$PLAIN_PORT" | grep -q .; then
        echo "port $PLAIN_PORT is taken, granary cannot listen there:"; ss -Htlnp "sport = :$PLAIN_PORT"
        return 1
    fi
    granary_start "$PLAIN_PORT" none "/tmp/granary-plain-$1.log" "${what[@]}" >/dev/null || return 1
    mkdir -p "$PLAIN_MNT"
    # The first NFSv4 mount of a boot loads the client's modules: timed apart.
    local t0=${EPOCHREALTIME/./}
    modprobe -q nfsv4 && echo "note: modprobe nfsv4 took $(( (${EPOCHREALTIME/./} - t0) / 1000 )) ms"
    plain_mount || { echo "mount -t nfs 127.0.0.1:/ $PLAIN_MNT failed"; return 1; }
    echo "mounted"
    plain_vers
    echo "note: $(awk -v m="$PLAIN_MNT" '$2 == m' /proc/mounts)"
}
plain_stop() { # unmount, then stop granary with SIGTERM (it is this shell's child)
    local pid
    cd / && { ! mountpoint -q "$PLAIN_MNT" || plain_umount || echo "umount $PLAIN_MNT failed"; }
    pid=$(cat "/tmp/granary-$PLAIN_PORT.pid" 2>/dev/null) || return 0
    kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    # suite.sh's liveness checks read every granary pid file: this one is gone on purpose.
    rm -f "/tmp/granary-$PLAIN_PORT.pid" "/tmp/granary-$PLAIN_PORT.args"
}
plain_remount() { # umount + the same plain mount (the reference: what it must show)
    cd / || return 1
    [ "$KT_KIND" = ref ] && { echo "type nfs4, vers=4.2"; return 0; }
    plain_umount && plain_mount && plain_vers
}
plain_rw() { # KIND DIR BACKING: write, read, list, remount, read again (and on the server)
    local kind=$1 d=$2 b=$3
    echo "== plain-$kind-files"
    mkdir "$d/sub" && cp "$KT_SRC/f.1048577" "$d/sub/mib" && printf 'hello\n' >"$d/hello" &&
        ln -s sub/mib "$d/link" && echo "write: ok"
    echo "read: $(cat "$d/hello"), mib sha $(sha <"$d/link")"
    echo "ls: $(ls -p "$d" | tr '\n' ' ')"
    manifest "$d" | awk -F'\t' '$1 != "."'
    step "$kind write, read"
    echo "== plain-$kind-remount"
    plain_remount || return 1
    echo "read: $(cat "$d/hello"), mib sha $(sha <"$d/sub/mib")"
    printf 'again\n' >>"$d/hello" && echo "append: $(tr '\n' ' ' <"$d/hello")"
    manifest "$d" | awk -F'\t' '$1 != "."'
    [ -n "$b" ] && echo "in the served directory: $(tr '\n' ' ' <"$b/hello"), mib sha $(sha <"$b/sub/mib")"
    rm -r "$d/sub" "$d/link" && echo "rm: ok, ls: $(ls -p "$d" | tr '\n' ' ')"
    step "$kind remount, read"
}
grp_plain() {
    local kind knfsd_was=0 m ref_erofs=/mnt/plain-ref-erofs
    if [ "$KT_KIND" = plain ]; then
        # shellcheck source=common.sh
        . "$KT_GUEST/common.sh"
        if [ "$(cat /proc/fs/nfsd/threads 2>/dev/null || echo 0)" -gt 0 ]; then
            knfsd_was=1; rpc.nfsd 0 && echo "note: knfsd stopped for the group (it listens on 2049)"
        fi
    fi
    for kind in mem host erofs; do
        echo "== plain-$kind-mount"
        if [ "$KT_KIND" = ref ]; then
            # The reference: what the plain mount must show, and a directory or the image.
            echo "mounted"; echo "type nfs4, vers=4.2"
            case $kind in
            erofs) mkdir -p "$ref_erofs"; modprobe -q erofs; modprobe -q loop
                   mount -t erofs -o loop,ro "$KT_STAGE/erofs/plain.erofs" "$ref_erofs" || return 1
                   m=$ref_erofs ;;
            *) m=$KT_ROOT/plain-$kind; rm -rf "$m"; mkdir -p "$m" ;;
            esac
        else
            plain_start "$kind" || { plain_stop; continue; }
            m=$PLAIN_MNT
        fi
        step "$kind start, mount"
        case $kind in
        mem) plain_rw mem "$m" "" ;;
        host) plain_rw host "$m" "$([ "$KT_KIND" = ref ] && echo "$m" || echo /export-plain)" ;;
        erofs)
            echo "== plain-erofs-read"
            (cd "$m" && find . -path ./big -prune -o -printf '%p\t%y\t%m\t%U:%G\t%n\t%s\t%l\t%T@\n' | sort) |
                awk -F'\t' -v OFS='\t' '$2 == "d" { $6 = "-" } { print }' | detail plain-erofs-manifest
            (cd "$m" && find . -path ./big -prune -o -type f -print0 | sort -z | xargs -0 -r sha256sum) |
                detail plain-erofs-contents
            echo "big: $(ls -f "$m/big" | wc -l) names"
            step "erofs read"
            echo "== plain-erofs-changes"
            erofs_changes "$m"
            step "erofs changes" ;;
        esac
        if [ "$KT_KIND" = ref ]; then
            cd / && { [ "$kind" != erofs ] || umount "$ref_erofs"; }
            rm -rf "$KT_ROOT/plain-$kind"
        else
            plain_stop
            grep -hE 'WARN|ERROR|panic' "/tmp/granary-plain-$kind.log" | sed 's/^/note: granary log: /' | head -5
        fi
    done
    if [ "$knfsd_was" = 1 ]; then
        rpc.nfsd --grace-time 10 --lease-time 10 4 && echo "note: knfsd started again"
    fi
    return 0
}

# ------------------------------------------------------------- server restart
# The server is stopped and started again (same directory, same state directory) twice
# under the mounted client: first with SIGTERM, then with kill -9. The client keeps an
# open file, a cwd, a file renamed before the restart, a file a local process replaces
# while the server is down, and a writer (appender.py) appending numbered records with
# fsync all along. Everything must work as on the reference, where nothing restarts: the
# open fds read and write, the cwd lists and creates, the writer's file holds every
# record whose fsync returned, in order, and the writer saw no error; the replaced
# file's old handle must never read the new file (NFSv3: ESTALE; NFSv4: the client cannot
# reclaim that open), then the path finds the new file. On NFSv4 the restarted server is
# in its grace period: the client reclaims its opens (CLAIM_PREVIOUS) and new opens wait.
# knfsd-v4's context restarts knfsd (rpc.nfsd 0, then rpc.nfsd again: its grace period
# is 10 s).
acked() { cat "$1" 2>/dev/null | awk '/^[0-9]/ { n++ } END { print n + 0 }'; }
# writer_moves LOG: wait until the writer has acknowledged 3 more records (90 s at most).
writer_moves() {
    local from end=$(( ${EPOCHREALTIME/./} + 90000000 ))
    from=$(acked "$1")
    while [ "${EPOCHREALTIME/./}" -lt "$end" ]; do
        [ "$(acked "$1")" -ge $((from + 3)) ] && { echo yes; return 0; }
        sleep 0.2
    done
    echo "no: $(acked "$1") acknowledged, $from before, after 90 s"
}
# records FILE LOG: the writer's file against what it was told was stable.
records() {
    local last
    last=$(grep '^[0-9]' "$2" | tail -1)
    awk -v last="${last:--1}" '
        $0 != sprintf("record %06d", NR - 1) { bad++; if (bad <= 3) first = first " line " NR ": " $0 }
        END {
            print "records in the file: " (bad ? "out of order, missing or doubled:" first : "in order, none missing or doubled")
            print "every acknowledged record in the file: " (NR > last ? "yes" : "no, " NR " lines, last acknowledged " last)
        }' "$1"
}
# restart_server stop|term|start: $KT_RESTART for this context's server, run from /,
# without OLDPWD and without this check's open files. A new bash stats $PWD and $OLDPWD
# as it starts (bash's OLDPWD_CHECK_DIRECTORY); after `cd /`, OLDPWD is the check's cwd
# on the mount, so once the client's cached attributes had expired that stat waited on
# the very server `start` was to start, for ever (CI, 2026-11-28: the host context's
# start in D state in rpc_wait_bit_killable, the guest's 2400 s limit reached).
restart_server() {
    (cd / && unset OLDPWD && exec $KT_RESTART "$1" "$KT_PORT") 3>&- 4<&- 5<&-
}
grp_restart() {
    local d=$KT_ROOT/restart b=$KT_BACKING/restart w=$KT_ROOT/restart-writer old wpid
    local log=/tmp/kt-appender$$.log stop=/tmp/kt-appender$$.stop moved_term moved_kill dmesg0
    rm -rf "$d" "$w" "$log" "$stop"; mkdir -p "$d/cwd" "$d/sub" "$w"
    dmesg0=$(dmesg | wc -l)
    printf 'open before\n' >"$d/open"
    printf 'renamed before\n' >"$d/sub/old"
    printf 'old content\n' >"$d/replaced"
    printf 'in cwd\n' >"$d/cwd/f"
    cat "$d/replaced" >/dev/null
    (cd / && exec python3 -S "$KT_GUEST/appender.py" "$w/records" "$log" "$stop") &
    wpid=$!
    writer_moves "$log" >/dev/null
    exec 3<>"$d/open" 4<"$d/replaced" 5<"$d/open"
    cd "$d/cwd" || return 1
    mv "$d/sub/old" "$d/sub/new"
    sync
    step "tree, writer, open, cd, rename"
    # SIGTERM (granary; knfsd: rpc.nfsd 0), then start again. Without this check's open
    # files: the new server must not hold the mount busy.
    restart_server term || echo "restart: term failed"
    restart_server start || echo "restart: start failed"
    echo "== restart-term"
    echo "open fd reads: $(cat <&5)"
    exec 5<&-
    moved_term=$(writer_moves "$log")
    echo "ls: $(ls | tr '\n' ' ')"
    step "SIGTERM, start"
    restart_server stop || echo "restart: stop failed"
    # While the server is down, a local process replaces a file behind the client.
    rm "$b/replaced" && printf 'new content\n' >"$b/replaced"
    restart_server start || echo "restart: start failed"
    # Drop the client's clean pages and unused dentries and inodes: what follows must
    # reach the new server with the handles the client got from the old one.
    sync; echo 3 >/proc/sys/vm/drop_caches
    step "kill -9, replace, start"
    echo "== restart-open-fd"
    echo "reads: $(cat <&3)"
    printf 'written after\n' >&3 && echo "write: ok"
    exec 3>&-
    echo "by path: $(tr '\n' ' ' <"$d/open")"
    echo "== restart-cwd"
    echo "ls: $(ls | tr '\n' ' ')"; echo "f: $(cat f)"
    printf 'x\n' >g && echo "create in cwd: ok"; echo "ls: $(ls | tr '\n' ' ')"
    echo "== restart-renamed"
    echo "sub: $(ls "$d/sub" | tr '\n' ' ')"; echo "new: $(cat "$d/sub/new")"
    echo "== restart-replaced"
    echo "by path: $(cat "$d/replaced")"
    old=$(cat <&4 2>&1); exec 4<&-
    echo "note: the old fd read: $old"
    [ "$old" != "new content" ] && echo "old fd never reads the new file: ok"
    echo "== restart-writer"
    moved_kill=$(writer_moves "$log")
    echo "writer acknowledged records after the SIGTERM restart: $moved_term"
    echo "writer acknowledged records after the kill -9 restart: $moved_kill"
    touch "$stop"; wait "$wpid"; echo "writer exit: $?"
    echo "writer errors: $(grep '^error' "$log" | head -5 | tr '\n' ' ' | sed 's/^$/none/')"
    records "$w/records" "$log"
    echo "note: $(acked "$log") records acknowledged, $(wc -l <"$w/records") lines in the file"
    step "after the restarts"
    dmesg | tail -n +$((dmesg0 + 1)) | grep -iE 'nfs|rpc|lockd' | head -8 | sed 's/^/note: kernel: /'
    # What granary said about its grace period (the NFSv4 clients' reclaims).
    local glog
    glog=$(awk '{ print $3 }' "/tmp/granary-$KT_PORT.args" 2>/dev/null)
    [ -n "$glog" ] && grep -h 'grace' "$glog" | tail -4 | sed 's/^/note: granary log: /'
    cd / || return 1
    reload || return 1
    echo "== restart-persisted"
    manifest "$d" | detail restart-manifest; contents "$d" | detail restart-contents
    records "$w/records" "$log"
    rm -f "$log" "$stop"; rm -rf "$w"
}

# ------------------------------------------------------------------ pjdfstest
# pjdfstest (the POSIX file system suite's Rust rewrite, kernel-tests/pjdfstest-install.sh)
# as root in a directory of its own under KT_ROOT, configured by pjdfstest.toml; its whole
# output goes to the detail file pjdfstest.log, which suite.sh's compare_pjdfstest reads
# (each granary target's failures against knfsd-v4's, not against the reference).
# KT_PJDFSTEST_TESTS: the test name patterns to run (pjdfstest's own filter: a test runs
# when its name contains one of them; "all": every test, 398, about 190 s of guest time
# under TCG at load 9). The default, for CI's time, is the calls whose rules the server
# applies (SETATTR's permission and set-id rules, times, sizes, the sticky bit): chmod,
# chown, utimensat, truncate and ftruncate, posix_fallocate, unlink; 143 tests.
PJDFSTEST_DEFAULT="chmod:: chown:: utimensat:: truncate:: posix_fallocate:: unlink::"
grp_pjdfstest() {
    local d=$KT_ROOT/pjdfstest patterns=() rc
    [ "${KT_PJDFSTEST_TESTS:-}" = all ] || read -r -a patterns <<<"${KT_PJDFSTEST_TESTS:-$PJDFSTEST_DEFAULT}"
    mkdir -p "$d" "$KT_DETAIL" || return 1
    NO_COLOR=1 pjdfstest -c "$KT_GUEST/pjdfstest.toml" -p "$d" -- "${patterns[@]}" \
        >"$KT_DETAIL/pjdfstest.log" 2>&1 </dev/null
    rc=$?
    step "pjdfstest"
    echo "pjdfstest exit: $rc"
    grep -a '^Summary:' "$KT_DETAIL/pjdfstest.log"
    rm -rf "$d"
}

group=${1:?usage: check.sh GROUP}
"grp_${group//-/_}"
