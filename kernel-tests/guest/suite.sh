#!/usr/bin/env bash
# The kernel-client suite, run INSIDE the vm.sh guest as root by kernel-tests/run.sh.
# Starts granary (squash none, and a second one with squash root) and kernel nfsd
# (a tmpfs export, and a second one with root_squash), mounts all four with the
# guest's NFSv3 client, and runs every group of check.sh first on the guest's own
# tmpfs (the reference) and on each server, all at the same time (but erofs, quota, and
# restart when knfsd restarts in it, one at a time: see run_group). A check passes on a server when its output
# equals the reference's; otherwise both outputs (or their diff) are printed.
# Env: KT_STAGE    staging directory shared from the host (granary binary, scripts)
#      KT_TARGETS  servers to test (default "plain granary host host-ext4 v4 v4.1 host-v4
#                  knfsd knfsd-v4 object";
#                  "plain" is the plain NFSv4.2 mount of granary on port 2049 (its servers
#                  start in the plain group), "granary" the mem backend, "host" granary's host backend serving a guest tmpfs
#                  directory, "host-ext4" the same on an ext4 file system in the guest,
#                  "v4" the mem backend mounted with NFSv4.2, "v4.1" the same with
#                  NFSv4.1, "host-v4" the host backend (tmpfs) mounted with NFSv4.2,
#                  "knfsd-v4" knfsd mounted with NFSv4.2, "object" two granary heads of
#                  one object export (PostgreSQL and S3 on the host, reached through
#                  vm.sh's --host-net), head A mounted with NFSv4.2, head B with NFSv3)
#      KT_CHECKS   extended regex: run only the groups whose names match
#      KT_HOST_GROUPS, KT_HOST_EXT4_GROUPS, KT_V4_GROUPS, KT_V41_GROUPS,
#      KT_HOST_V4_GROUPS, KT_KNFSD_V4_GROUPS, KT_OBJECT_GROUPS  extended regexes: the groups each of those
#                  targets runs (defaults chosen for the suite's time, see README.md;
#                  '.' for every group that applies)
#      KT_HEADS_BREAK=nocto  head B's mount trusts its caches at open (heads must fail)
#      KT_PJDFSTEST_BREAK=squash  pjdfstest runs on granary's root-squashed mounts (must fail)
#      KT_RESTART_WIPE=1  the restart group wipes granary's state directory between the
#                  stop and the start (restart.sh), to see the group fail
set -u
KT_STAGE=${KT_STAGE:?KT_STAGE must name the staging directory}
# shellcheck source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
read -r -a TARGETS <<<"${KT_TARGETS:-plain granary host host-ext4 v4 v4.1 host-v4 knfsd knfsd-v4 object}"
HOST_GROUPS=${KT_HOST_GROUPS:-^(copy|posix|squash|fio|writers|ownership|acl|quota|restart)$}
HOST_EXT4_GROUPS=${KT_HOST_EXT4_GROUPS:-^(copy|posix|writers|acl|restart)$}
V4_GROUPS=${KT_V4_GROUPS:-^(copy|posix|squash|writers|ownership|space|locks|persist|pjdfstest)$}
# The NFSv4 targets beside v4 run a few groups by default (README.md, "NFSv4 targets").
HOST_V4_GROUPS=${KT_HOST_V4_GROUPS:-^(copy|writers|restart)$}
KNFSD_V4_GROUPS=${KT_KNFSD_V4_GROUPS:-^(copy|posix|pjdfstest)$}
V41_GROUPS=${KT_V41_GROUPS:-^(copy|posix)$}
# The object target: heads (the two-mount close-to-open checker) and pjdfstest (the POSIX
# suite through head A's NFSv4.2 mount, knfsd-v4's failures its reference) by default,
# about 180 s of guest time with its setup at load 10 (README.md); a heads group that
# runs out of time stops the heads (object_stop_heads), so a head that cannot reach its
# S3 store leaves the rest alone; copy, posix, fio, writers and the rest with
# KT_OBJECT_GROUPS.
OBJECT_GROUPS=${KT_OBJECT_GROUPS:-^(heads|pjdfstest)$}
OUT=/tmp/kt-out
T0=${EPOCHREALTIME/./}

# group, time limit in seconds, and "sq" for the group that runs on the root-squashed
# exports (its reference runs as nobody, 65534, which is what root becomes there).
# persist comes (nearly) last: it checks everything the others left on the mount.
# pjdfstest (the POSIX suite, on the NFSv4 targets) comes after it and leaves nothing; it
# is compared with knfsd-v4 in the same boot, not with the reference (compare_pjdfstest).
# restart (host only) kills and restarts the server under the mounted client.
# space (NFSv4.2's SEEK, ALLOCATE, DEALLOCATE, COPY) runs on v4, and on knfsd through
# an NFSv4.2 mount of its export made for the group (the other targets are NFSv3 mounts
# of granary, which v4 stands for). locks (byte-range locks between two
# clients) runs on v4 only: the NFSv3 mounts are nolock.
GROUPS_=(
    "plain 300" "copy 300" "doc-tree 600" "bigdir 900" "posix 300" "squash 120 sq"
    "fio 600" "stress-ng 300" "writers 300" "ownership 300" "acl 120" "quota 120"
    "erofs 300" "space 300" "locks 300" "heads 180" "persist 300" "restart 300"
    "pjdfstest 600"
)

# runs_on TARGET GROUP: whether GROUP runs on TARGET. acl lays its files out in the
# server's own directory (KT_BACKING): host, host-ext4 and knfsd have one, mem does not.
# quota serves an ext4 image of its own with granary's host backend (in host's context)
# and knfsd.
# restart needs a server whose files
# outlive it (host, host-ext4), which run $HOST_GROUPS and $HOST_EXT4_GROUPS; erofs
# starts its own servers (granary serve IMAGE), so it tells nothing about them.
runs_on() {
    # plain (the mount without options on port 2049) is the plain target's only group.
    [ "$1" = plain ] || [ "$2" = plain ] && { [ "$1" = plain ] && [ "$2" = plain ]; return; }
    # pjdfstest runs on the NFSv4 targets only (head A's mount is one: the object target
    # runs it when KT_OBJECT_GROUPS names it), knfsd-v4's failures its reference.
    [ "$2" = pjdfstest ] && [[ ! $1 =~ ^(v4|v4\.1|host-v4|knfsd-v4|object)$ ]] && return 1
    # heads (two mounts of two heads of one export) is the object target's own group.
    [ "$1" = object ] || [ "$2" = heads ] && { [ "$1" = object ] && [[ $2 =~ $OBJECT_GROUPS ]] &&
        [[ ! $2 =~ ^(erofs|restart|acl|quota|squash|space)$ ]]; return; }
    case $1 in
    host) [[ $2 =~ $HOST_GROUPS ]] && [ "$2" != erofs ] ;;
    host-ext4) [[ $2 =~ $HOST_EXT4_GROUPS ]] && [ "$2" != erofs ] && [ "$2" != quota ] ;;
    v4) [[ $2 =~ $V4_GROUPS ]] && [[ ! $2 =~ ^(erofs|restart|acl|quota)$ ]] ;;
    v4.1) [[ $2 =~ $V41_GROUPS ]] && [[ ! $2 =~ ^(erofs|restart|acl|quota|space)$ ]] ;;
    host-v4) [[ $2 =~ $HOST_V4_GROUPS ]] && [[ ! $2 =~ ^(erofs|quota)$ ]] ;;
    knfsd-v4) [[ $2 =~ $KNFSD_V4_GROUPS ]] && [[ ! $2 =~ ^(erofs|quota)$ ]] ;;
    *) [ "$2" != restart ] && [ "$2" != locks ] && { [[ ! $2 =~ ^(acl|quota|space)$ ]] || [ "$1" = knfsd ]; } ;;
    esac
}

declare -A PASS FAIL FAILED_NAMES
# Groups compared only on some targets; on the others they run and their notes are shown
# (a measurement, not a check). knfsd answers a chgrp to one of the caller's supplementary
# groups EPERM in this guest (28 of ownership's 405 cases), which is knfsd's to fix; for
# the same reason its acl-grant (that chgrp) and acl-groups (reads and creates through a
# supplementary group) differ, while acl-deny and acl-default match.
declare -A COMPARED_ON=([ownership]="granary host host-ext4 v4 v4.1 host-v4 object" [acl]="host host-ext4")

secs() { # microseconds since $1 (default: the start) as seconds with one decimal
    local us=$(( ${EPOCHREALTIME/./} - ${1:-$T0} ))
    printf '%d.%d' $((us / 1000000)) $((us % 1000000 / 100000))
}
say() { echo "[$(secs) s] $*"; }

setup() {
    install_granary || return 1
    mkdir -p /ref /ref-sq /tmp/kt-src "$OUT" /mnt/plain /mnt/granary /mnt/granary-sq /mnt/knfsd /mnt/knfsd-sq /mnt/host /mnt/host-sq /mnt/host-ext4 /mnt/host-ext4-sq /mnt/v4 /mnt/v4-sq /mnt/v4.1 /mnt/v4.1-sq /mnt/host-v4 /mnt/host-v4-sq /mnt/knfsd-v4 /mnt/knfsd-v4-sq /mnt/object /mnt/object-b /mnt/object-b4
    mount -t tmpfs -o size=3G tmpfs /ref || return 1
    mount -t tmpfs -o size=512M,mode=0777 tmpfs /ref-sq || return 1
    local n
    for n in 0 1 4096 1048577 67108864; do head -c "$n" /dev/urandom >"/tmp/kt-src/f.$n"; done
    # doc-tree's source: a fixed part of /usr/share/doc (about 290 entries and 8 MB, with
    # symlinks and files up to 3 MB). The whole of it (1,200 entries) cost about 110 s
    # per server under TCG, in doc-tree and again in persist, and found nothing more.
    mkdir -p /tmp/kt-src/doc
    (cd /usr/share/doc && cp -a [a-k]* perl python3.11 libxml2 libgfapi0 strace /tmp/kt-src/doc/) || return 1
    chmod -R a+rX /tmp/kt-src "$KT_STAGE"
    selected pjdfstest || return 0
    # pjdfstest (host-lib.sh kt_stage_pjdfstest staged it) and the user tests:tests it
    # switches to beside nobody (guest/pjdfstest.toml).
    install -m 755 "$KT_STAGE/pjdfstest" /usr/local/bin/pjdfstest ||
        { echo "no pjdfstest in $KT_STAGE (kernel-tests/run.sh stages it)"; return 1; }
    getent passwd tests >/dev/null || useradd --user-group --no-create-home --shell /usr/sbin/nologin tests
}

start_target() {
    local t0=${EPOCHREALTIME/./}
    case $1 in
    plain) say "plain: its servers start in the plain group, on port 2049"; return 0 ;;
    granary)
        granary_start "$GRANARY_PORT" none /tmp/granary.log &&
            granary_start "$GRANARY_SQ_PORT" root /tmp/granary-sq.log &&
            $(granary_mount_cmd "$GRANARY_PORT" /mnt/granary) &&
            $(granary_mount_cmd "$GRANARY_SQ_PORT" /mnt/granary-sq) ;;
    host)
        host_start_both &&
            $(granary_mount_cmd "$HOST_PORT" /mnt/host) &&
            $(granary_mount_cmd "$HOST_SQ_PORT" /mnt/host-sq) ;;
    host-ext4)
        ext4_start_both &&
            $(granary_mount_cmd "$EXT4_PORT" /mnt/host-ext4) &&
            $(granary_mount_cmd "$EXT4_SQ_PORT" /mnt/host-ext4-sq) ;;
    v4)
        granary_start "$V4_PORT" none /tmp/granary-v4.log &&
            granary_start "$V4_SQ_PORT" root /tmp/granary-v4-sq.log &&
            $(granary_v4_mount_cmd "$V4_PORT" /mnt/v4) &&
            $(granary_v4_mount_cmd "$V4_SQ_PORT" /mnt/v4-sq) ;;
    v4.1)
        granary_start "$V41_PORT" none /tmp/granary-v4.1.log &&
            granary_start "$V41_SQ_PORT" root /tmp/granary-v4.1-sq.log &&
            $(granary_v41_mount_cmd "$V41_PORT" /mnt/v4.1) &&
            $(granary_v41_mount_cmd "$V41_SQ_PORT" /mnt/v4.1-sq) ;;
    host-v4)
        host_v4_start_both &&
            $(granary_v4_mount_cmd "$HOST_V4_PORT" /mnt/host-v4) &&
            $(granary_v4_mount_cmd "$HOST_V4_SQ_PORT" /mnt/host-v4-sq) ;;
    knfsd-v4)
        knfsd_v4_start_both &&
            $(knfsd_v4_mount_cmd /export-v4 /mnt/knfsd-v4) &&
            $(knfsd_v4_mount_cmd /export-v4-sq /mnt/knfsd-v4-sq) ;;
    object)
        object_start_both &&
            $(granary_v4_mount_cmd "$OBJECT_PORT" /mnt/object) &&
            $(object_b_mount_cmd) &&
            $(granary_v4_mount_cmd "$OBJECT_B_PORT" /mnt/object-b4) ;;
    knfsd)
        knfsd_start_both &&
            $(knfsd_mount_cmd /export /mnt/knfsd) &&
            $(knfsd_mount_cmd /export-sq /mnt/knfsd-sq) ;;
    *) echo "unknown target $1"; return 1 ;;
    esac || return 1
    say "$1 up and mounted in $(secs "$t0") s"
    grep -E " /mnt/$1(-sq|-b)? " /proc/mounts | sed 's/^/    /'
}

# ctx_env CTX SQ: root, kind, mount point, mount command and user for a context.
ctx_env() {
    local ctx=$1 sq=$2 exp
    kind=nfs user=() backing= restart=true root_b= root_b4=
    case $ctx in
    plain) kind=plain root=/mnt/plain mnt=/mnt/plain mcmd="mount -t nfs 127.0.0.1:/ /mnt/plain" ;;
    ref) kind=ref root=/ref mnt= mcmd= backing=/ref root_b=/ref root_b4=/ref
         [ "$sq" = sq ] && { root=/ref-sq backing=/ref-sq user=(setpriv --reuid=65534 --regid=65534 --clear-groups); } ;;
    granary) mnt=/mnt/granary port=$GRANARY_PORT
             [ "$sq" = sq ] && { mnt=/mnt/granary-sq port=$GRANARY_SQ_PORT; }
             root=$mnt mcmd=$(granary_mount_cmd "$port" "$mnt") ;;
    host) mnt=/mnt/host port=$HOST_PORT backing=/export-host
          [ "$sq" = sq ] && { mnt=/mnt/host-sq port=$HOST_SQ_PORT backing=/export-host-sq; }
          restart="bash $KT_GUEST/restart.sh"
          root=$mnt mcmd=$(granary_mount_cmd "$port" "$mnt") ;;
    host-ext4) mnt=/mnt/host-ext4 port=$EXT4_PORT backing=/export-ext4/rw
          [ "$sq" = sq ] && { mnt=/mnt/host-ext4-sq port=$EXT4_SQ_PORT backing=/export-ext4/sq; }
          restart="bash $KT_GUEST/restart.sh"
          root=$mnt mcmd=$(granary_mount_cmd "$port" "$mnt") ;;
    v4) mnt=/mnt/v4 port=$V4_PORT
        [ "$sq" = sq ] && { mnt=/mnt/v4-sq port=$V4_SQ_PORT; }
        root=$mnt mcmd=$(granary_v4_mount_cmd "$port" "$mnt") ;;
    v4.1) mnt=/mnt/v4.1 port=$V41_PORT
        [ "$sq" = sq ] && { mnt=/mnt/v4.1-sq port=$V41_SQ_PORT; }
        root=$mnt mcmd=$(granary_v41_mount_cmd "$port" "$mnt") ;;
    host-v4) mnt=/mnt/host-v4 port=$HOST_V4_PORT backing=/export-host-v4
          [ "$sq" = sq ] && { mnt=/mnt/host-v4-sq port=$HOST_V4_SQ_PORT backing=/export-host-v4-sq; }
          restart="bash $KT_GUEST/restart.sh"
          root=$mnt mcmd=$(granary_v4_mount_cmd "$port" "$mnt") ;;
    knfsd-v4) mnt=/mnt/knfsd-v4 exp=/export-v4 port=$KNFSD_PORT
           [ "$sq" = sq ] && { mnt=/mnt/knfsd-v4-sq exp=/export-v4-sq; }
           restart="bash $KT_GUEST/restart.sh --knfsd"
           root=$mnt backing=$exp mcmd=$(knfsd_v4_mount_cmd "$exp" "$mnt") ;;
    object) mnt=/mnt/object port=$OBJECT_PORT root_b=/mnt/object-b root_b4=/mnt/object-b4
        root=$mnt mcmd=$(granary_v4_mount_cmd "$port" "$mnt") ;;
    knfsd) mnt=/mnt/knfsd exp=/export
           [ "$sq" = sq ] && { mnt=/mnt/knfsd-sq exp=/export-sq; }
           root=$mnt backing=$exp mcmd=$(knfsd_mount_cmd "$exp" "$mnt") ;;
    esac
}

# alive CTX: the servers still run (every granary but one the restart group is restarting
# on purpose: restart.sh marks it, common.sh granary_restarting) and the mount answers (a
# dead server would hang every check).
alive() {
    local p
    if [[ $1 != knfsd* ]]; then
        for p in $(granary_pids); do
            granary_restarting "$p" && continue
            kill -0 "$p" 2>/dev/null || { echo "granary (pid $p) has exited; log tail:"; tail -20 /tmp/granary*.log; return 1; }
        done
    fi
    timeout 30 mountpoint -q "$mnt" || { echo "$mnt was not mounted; mounting again"; $mcmd || return 1; }
    timeout 30 stat -f "$mnt" >/dev/null || { echo "$mnt does not answer statfs within 30 s"; return 1; }
}

# watchdog CTX LIMIT: 20 s before a group's time limit, print what the guest is doing
# (blocked tasks and their kernel stacks, sockets, the kernel log, the server log),
# for the report of a group that hangs. suite.sh kills it when the group ends in time.
watchdog() {
    sleep $(($2 - 20)) || return
    echo "watchdog: $1 still running 20 s before its limit of $2 s"
    ps -eo pid,stat,wchan:30,etime,args | awk 'NR == 1 || $2 ~ /D/ || /check.sh|fio|python3|cp |rm |ls |find|du |stress-ng|umount|mount/' | grep -v awk | head -40
    local p
    for p in $(ps -eo pid,stat | awk '$2 ~ /D/ { print $1 }' | head -8); do
        echo "--- kernel stack of $p ($(cat /proc/$p/comm)):"; cat "/proc/$p/stack"
    done
    echo "--- sockets:"; ss -tni | head -40
    echo "--- dmesg:"; dmesg | tail -20
    case $1 in
    granary) echo "--- granary log:"; tail -30 /tmp/granary.log ;;
    host) echo "--- granary log:"; tail -30 /tmp/granary-host.log ;;
    host-ext4) echo "--- granary log:"; tail -30 /tmp/granary-ext4.log ;;
    v4) echo "--- granary log:"; tail -30 /tmp/granary-v4.log ;;
    plain) echo "--- granary log:"; tail -30 /tmp/granary-plain-*.log ;;
    v4.1) echo "--- granary log:"; tail -30 /tmp/granary-v4.1.log ;;
    host-v4) echo "--- granary log:"; tail -30 /tmp/granary-host-v4.log ;;
    object) echo "--- granary logs (heads A and B):"; tail -n 20 /tmp/granary-object-a.log /tmp/granary-object-b.log ;;
    esac
}

# run_ctx CTX GROUP LIMIT SQ: run GROUP in context CTX; its checks' outputs in
# $OUT/CTX/CHECK (the last one ends with the group's exit status).
run_ctx() {
    local ctx=$1 group=$2 limit=$3 sq=$4 kind root root_b root_b4 mnt mcmd user backing restart port rc t0
    ctx_env "$ctx" "$sq"
    local dir=$OUT/$ctx raw=$OUT/$ctx/$group.raw
    mkdir -p "$dir"
    if [ "$kind" = nfs ] && ! alive "$ctx" >"$raw" 2>&1; then
        echo "exit: server not available" >>"$raw"
    else
        t0=${EPOCHREALTIME/./}
        watchdog "$ctx" "$limit" >"$dir/$group.diag" 2>&1 &
        local wd=$!
        rm -rf "$dir/$group.detail"; mkdir -p "$dir/$group.detail"; chmod 777 "$dir/$group.detail"
        timeout -k 10 "$limit" "${user[@]}" env KT_KIND=$kind KT_ROOT="$root" KT_MNT="$mnt" \
            KT_MOUNT="$mcmd" KT_SRC=/tmp/kt-src KT_GUEST="$KT_GUEST" KT_DETAIL="$dir/$group.detail" \
            KT_BACKING="$backing" KT_RESTART="$restart" KT_PORT="${port:-}" KT_ROOT_B="$root_b" KT_ROOT_B4="$root_b4" \
            bash "$KT_GUEST/check.sh" "$group" >"$raw" 2>&1 </dev/null
        rc=$?
        kill "$wd" 2>/dev/null; wait "$wd" 2>/dev/null
        if [ $rc = 124 ] || [ $rc = 137 ]; then echo "exit: timed out after ${limit} s"; else echo "exit: $rc"; fi >>"$raw"
        echo "$(secs "$t0")" >"$dir/$group.secs"
        # A group killed on timeout may leave the mount busy or gone; put it back. The
        # object target's heads are stopped instead: the client's writeback would keep
        # them busy with the engines for the rest of the suite.
        if [ "$ctx" = object ] && { [ $rc = 124 ] || [ $rc = 137 ]; }; then
            object_stop_heads >>"$raw" 2>&1
        elif [ "$kind" = nfs ] && ! timeout 30 mountpoint -q "$mnt"; then timeout 60 $mcmd >/dev/null 2>&1; fi
    fi
    split_raw "$dir" "$group" "$root"
}

# split_raw DIR GROUP ROOT: DIR/GROUP.raw into one file per check ("== NAME" lines;
# what comes before the first goes to GROUP.out), with ROOT written as "ROOT".
split_raw() {
    sed "s#$3#ROOT#g" "$1/$2.raw" | awk -v dir="$1" -v g="$2" -v list="$1/$2.list" '
        BEGIN { f = dir "/" g ".out"; printf "" > f; print g > list }
        /^== / { f = dir "/" $2 ".out"; print $2 > list; next }
        { print > f }'
}

show() { # FILE LABEL: a check's output, at most 50 lines, without notes
    echo "    --- $2:"
    grep -v '^note:' "$1" | head -50 | sed 's/^/    | /'
}

# compare T GROUP: every check of GROUP in the reference against target T.
compare() {
    local t=$1 group=$2 c ref res names took
    took=$(cat "$OUT/$t/$group.secs" 2>/dev/null)
    # The reference's checks, then any the target printed that the reference did not.
    names=$(awk '!seen[$0]++' "$OUT/ref/$group.list" "$OUT/$t/$group.list")
    for c in $names; do
        ref=$OUT/ref/$c.out res=$OUT/$t/$c.out
        [ -f "$ref" ] || : >"$ref"
        [ -f "$res" ] || echo "(no output: the group stopped before this check)" >"$res"
        # The group's own file holds only what came before its first check; it is a
        # check of its own only when it has something.
        if [ "$c" = "$group" ] && ! grep -qv '^note:' "$ref" && ! grep -qv '^note:' "$res"; then continue; fi
        if cmp -s <(grep -v '^note:' "$ref") <(grep -v '^note:' "$res"); then
            PASS[$t]=$((${PASS[$t]:-0} + 1))
            echo "PASS $t $c"
        else
            FAIL[$t]=$((${FAIL[$t]:-0} + 1)); FAILED_NAMES[$t]+=" $c"
            echo "FAIL $t $c: differs from the reference (guest tmpfs${sq:+, as nobody})"
            if [ "$(wc -l <"$ref")" -le 30 ] && [ "$(wc -l <"$res")" -le 30 ]; then
                show "$ref" "reference (guest tmpfs)"; show "$res" "$t"
            else
                echo "    --- diff: - reference (guest tmpfs), + $t"
                diff -u <(grep -v '^note:' "$ref") <(grep -v '^note:' "$res") | tail -n +3 | head -50 | sed 's/^/    | /'
            fi
            grep -h '^note:' "$res" | grep -v '^note: step' | head -8 | sed "s/^/    $t /"
            local f
            for f in "$OUT/$t/$group.detail"/*; do
                [ -f "$f" ] && [ -f "$OUT/ref/$group.detail/${f##*/}" ] || continue
                cmp -s "$OUT/ref/$group.detail/${f##*/}" "$f" && continue
                echo "    --- detail ${f##*/}: < reference, > $t (first differences)"
                diff "$OUT/ref/$group.detail/${f##*/}" "$f" | head -12 | sed 's/^/    | /'
            done
            [ -s "$OUT/$t/$group.diag" ] && head -120 "$OUT/$t/$group.diag" | sed "s/^/    $t diag: /"
        fi
    done
    echo "     ($t: group $group took ${took:-?} s)"
    grep -h '^note: step' "$OUT/$t/$group.raw" 2>/dev/null | sed "s/^note: step /       $t step /"
}

# pjdfstest_results LOG: one line per test of pjdfstest's output LOG, "NAME STATUS
# REASON": STATUS ok, FAILED or skipped, REASON (FAILED only) the message pjdfstest printed
# under it, its lines joined with " / ". pjdfstest prints "NAME<padding> STATUS" for each
# test, a failure's message on the lines after it (the first indented by a tab), a skip's
# reasons likewise, and last a line "Summary: ...".
pjdfstest_results() {
    awk 'function flush() { if (name != "") print name, status, reason; name = "" }
        /^[^ \t]+ +(ok|FAILED|skipped)$/ { flush(); name = $1; status = $NF; reason = ""; next }
        /^Summary:/ { flush(); next }
        name != "" && status == "FAILED" { l = $0; gsub(/^[ \t]+|[ \t]+$/, "", l)
            if (l != "") reason = reason (reason == "" ? "" : " / ") l }
        END { flush() }' "$1" 2>/dev/null
}

# check_result T NAME OK [WHY]: count check NAME of target T as passed (OK=0) or failed.
check_result() {
    if [ "$3" = 0 ]; then
        PASS[$1]=$((${PASS[$1]:-0} + 1)); echo "PASS $1 $2"
    else
        FAIL[$1]=$((${FAIL[$1]:-0} + 1)); FAILED_NAMES[$1]+=" $2"; echo "FAIL $1 $2: $4"
    fi
}

# compare_pjdfstest T: pjdfstest's results on target T. Check pjdfstest-ran: it ran to its
# summary and passed something. On a granary target, check pjdfstest-vs-knfsd: every test
# that passed on knfsd-v4 in this boot passed on T too (a test T skipped or did not reach
# counts as failed). Each of T's failures is printed with its message; knfsd-v4's too.
compare_pjdfstest() {
    local t=$1 log=$OUT/$1/pjdfstest.detail/pjdfstest.log res=$OUT/$1/pjdfstest.results
    local klog=$OUT/knfsd-v4/pjdfstest.detail/pjdfstest.log n_ok n_fail n_skip worse
    pjdfstest_results "$log" >"$res"
    read -r n_ok n_fail n_skip < <(awk '{ n[$2]++ } END { print n["ok"] + 0, n["FAILED"] + 0, n["skipped"] + 0 }' "$res")
    echo "     ($t: group pjdfstest took $(cat "$OUT/$t/pjdfstest.secs" 2>/dev/null) s; pjdfstest: $n_ok passed, $n_fail failed, $n_skip skipped)"
    if grep -q '^Summary:' "$log" 2>/dev/null && [ "$n_ok" -gt 0 ]; then
        check_result "$t" pjdfstest-ran 0
    else
        check_result "$t" pjdfstest-ran 1 "pjdfstest did not run to its summary or passed nothing"
        show "$OUT/$t/pjdfstest.out" "$t (the group's output)"
        [ -f "$log" ] && tail -20 "$log" | sed "s/^/    $t log: /"
    fi
    awk '$2 == "FAILED" { n = $1; $1 = $2 = ""; sub(/^ +/, ""); print n ": " $0 }' "$res" | sed "s/^/    $t fails /"
    [ "$t" = knfsd-v4 ] && return 0
    if [[ " ${TARGETS[*]} " != *" knfsd-v4 "* ]] || ! runs_on knfsd-v4 pjdfstest; then
        check_result "$t" pjdfstest-vs-knfsd 1 "knfsd-v4 did not run pjdfstest in this boot: add knfsd-v4 to KT_TARGETS (and pjdfstest to KT_KNFSD_V4_GROUPS)"
        return 0
    fi
    # The tests knfsd-v4 passed that T did not pass, each with T's status.
    worse=$(awk 'NR == FNR { if ($2 == "ok") k[$1] = 1; next } { s[$1] = $2 }
        END { for (n in k) if (s[n] != "ok") print n, (n in s ? s[n] : "not-run") }' \
        <(pjdfstest_results "$klog") "$res" | sort)
    if [ -z "$worse" ] && grep -q '^Summary:' "$klog" 2>/dev/null; then
        check_result "$t" pjdfstest-vs-knfsd 0
    elif [ -z "$worse" ]; then
        check_result "$t" pjdfstest-vs-knfsd 1 "knfsd-v4's pjdfstest did not run to its summary: nothing to compare with"
    else
        check_result "$t" pjdfstest-vs-knfsd 1 "$(wc -l <<<"$worse") tests pass on knfsd-v4 and not on $t:"
        sed "s/^/    /" <<<"$worse"
    fi
}

# Groups whose contexts run one at a time. erofs: the reference and knfsd's context
# loop-mount the same images at the same places. quota: host's and knfsd's contexts serve
# one quota image. restart runs its contexts at once (each restarts its own granary,
# which alive() then does not take for a crash; 66 -> about 25 s of CI's guest), unless a
# knfsd target runs it: knfsd's restart (rpc.nfsd 0) stops every knfsd export at once.
SERIAL_GROUPS='^(erofs|quota)$'

# run_group GROUP LIMIT [sq]: GROUP on the reference and on every target it runs on, then
# each target's checks compared with the reference's. The contexts run at the same time:
# each has its own mount (or tmpfs), server and directories. Under TCG one context at a
# time kept qemu at 110-140% of the host's two cores, since a context mostly waits for
# its server's replies; at once, 190-198%, and the whole suite took 552 s instead of
# 709 s (2026-11-24, the same binary, one boot each; bench/results/*-kernel-tests-contexts).
run_group() {
    local group=$1 limit=$2 sq=${3:-} t targets=() pids=()
    for t in "${TARGETS[@]}"; do runs_on "$t" "$group" && targets+=("$t"); done
    [ ${#targets[@]} -gt 0 ] || return 0
    local serial=$SERIAL_GROUPS
    [[ " ${targets[*]} " == *" knfsd"* ]] && serial='^(erofs|quota|restart)$'
    if [[ $group =~ $serial ]]; then
        say "group $group: reference (guest tmpfs${sq:+, as nobody}), then ${targets[*]}, one at a time"
        run_ctx ref "$group" "$limit" "$sq"
        for t in "${targets[@]}"; do run_target "$t" "$group" "$limit" "$sq"; done
    elif [ "$group" = pjdfstest ]; then
        say "group $group: ${targets[*]} at once (no reference: knfsd-v4 is pjdfstest's)"
        # KT_PJDFSTEST_BREAK=squash: the granary targets run it on their root-squashed
        # mounts, where root's chown and mknod fail (to see the comparison fail).
        for t in "${targets[@]}"; do
            sq=; [ "${KT_PJDFSTEST_BREAK:-}" = squash ] && [ "$t" != knfsd-v4 ] && sq=sq
            run_target "$t" "$group" "$limit" "$sq" & pids+=($!)
        done
        wait "${pids[@]}"
    else
        say "group $group: reference (guest tmpfs${sq:+, as nobody}) and ${targets[*]} at once"
        run_ctx ref "$group" "$limit" "$sq" &
        pids+=($!)
        for t in "${targets[@]}"; do run_target "$t" "$group" "$limit" "$sq" & pids+=($!); done
        wait "${pids[@]}"
    fi
    [ "$group" = pjdfstest ] || echo "     (reference: group $group took $(cat "$OUT/ref/$group.secs" 2>/dev/null) s)"
    for t in "${TARGETS[@]}"; do
        runs_on "$t" "$group" || { echo "     ($t: group $group not run on this target)"; continue; }
        [ -f "$OUT/$t/$group.stuck" ] &&
            say "$t: group $group is stuck past its limit; skipping $t's remaining groups"
        [ "$group" = pjdfstest ] && { compare_pjdfstest "$t"; continue; }
        if [ -n "${COMPARED_ON[$group]:-}" ] && [[ " ${COMPARED_ON[$group]} " != *" $t "* ]]; then
            echo "     ($t: group $group measured, not compared; took $(cat "$OUT/$t/$group.secs" 2>/dev/null) s)"
            grep -h '^note:' "$OUT/$t/$group.raw" 2>/dev/null | grep -v '^note: step' | sed "s/^/    $t /"
            continue
        fi
        compare "$t" "$group"
    done
}

# hung_in T: the group in which target T got stuck, if one did (then it runs no more).
hung_in() { cat "$OUT/$1"/*.stuck 2>/dev/null | head -1; }

# run_target T GROUP LIMIT SQ: GROUP on target T, unless T got stuck in an earlier group.
run_target() {
    local t=$1 group=$2 hung
    hung=$(hung_in "$t")
    if [ -n "$hung" ]; then
        mkdir -p "$OUT/$t"; echo "not run: $t hung in group $hung" >"$OUT/$t/$group.out"
        echo "$group" >"$OUT/$t/$group.list"
    else
        run_ctx_bounded "$@"
    fi
}

# run_ctx_bounded CTX GROUP LIMIT SQ: run_ctx, but a task stuck on a server that stopped
# answering may not even die on SIGKILL (and then neither does timeout(1)): wait until
# the limit plus a margin, then leave it behind and mark the target stuck
# ($OUT/CTX/GROUP.stuck), so that its other groups are skipped. wait -n returns as soon
# as the context or the timer ends (a poll every second cost each context up to 1 s).
run_ctx_bounded() {
    local t=$1 group=$2 limit=$3 sq=$4 pid timer
    run_ctx "$t" "$group" "$limit" "$sq" &
    pid=$!
    sleep $((limit + 60)) &
    timer=$!
    wait -n "$pid" "$timer"
    if kill -0 "$pid" 2>/dev/null; then
        echo "$group" >"$OUT/$t/$group.stuck"
        echo "exit: stuck past the limit of $limit s" >>"$OUT/$t/$group.raw"
        split_raw "$OUT/$t" "$group" "/mnt/$t${sq:+-sq}"
    else
        kill "$timer" 2>/dev/null
        wait "$timer" "$pid" 2>/dev/null
    fi
}

# finish: unmount every target, stop the servers and copy the results out. The unmounts
# run in the background, waited for at most 60 s: a mount whose server stopped answering
# (a target stuck in a group) can keep umount in D state for ever, and the results must
# still reach the host (once, that wait cost CI the guest's whole 2400 s limit).
finish() {
    local t pid timer
    (for t in "${TARGETS[@]}"; do umount "/mnt/$t" "/mnt/$t-sq" "/mnt/$t-b" 2>/dev/null; done) &
    pid=$!
    sleep 60 &
    timer=$!
    wait -n "$pid" "$timer"
    if kill -0 "$pid" 2>/dev/null; then
        say "umount still waiting after 60 s (a server stopped answering); left behind"
    else
        kill "$timer" 2>/dev/null
        wait "$timer" "$pid" 2>/dev/null
    fi
    if [ "${#KT_PIDS[@]}" -gt 0 ]; then
        # A granary the restart group started again is not this shell's child.
        kill -TERM $(granary_pids) 2>/dev/null
        stop_started
        echo "granary logs, warnings and errors:"
        grep -hE 'WARN|ERROR|panic' /tmp/granary*.log | head -20 | sed 's/^/    /'
    fi
    cp -r "$OUT/." "$KT_STAGE/out/" 2>/dev/null
}

selected() { [ -z "${KT_CHECKS:-}" ] || [[ $1 =~ $KT_CHECKS ]]; }
# selected_on T: some selected group runs on target T.
selected_on() {
    local g name
    for g in "${GROUPS_[@]}"; do
        name=${g%% *}
        selected "$name" && runs_on "$1" "$name" && return 0
    done
    return 1
}

main() {
    say "guest $(uname -r), $(nproc) vCPUs, $(awk '/MemTotal/ { print int($2 / 1024) }' /proc/meminfo) MiB; targets: ${TARGETS[*]}"
    setup || { echo "FAIL: guest setup"; exit 1; }
    local t g name limit sq
    # plain's servers listen on 2049, knfsd's port: it runs before any target starts.
    selected plain && run_group plain 300
    for t in "${TARGETS[@]}"; do
        # The object target's engines start on the host only when one of its groups is
        # selected (host-lib.sh kt_object_start); its heads likewise.
        [ "$t" = object ] && ! selected_on object && { say "object: none of its groups selected; not started"; continue; }
        start_target "$t" || { echo "FAIL: $t did not start or could not be mounted"; finish; exit 1; }
    done
    for g in "${GROUPS_[@]}"; do
        read -r name limit sq <<<"$g"
        selected "$name" && [ "$name" != plain ] || continue
        run_group "$name" "$limit" "$sq"
    done
    say "client RPC counts (nfsstat -c, all mounts):"
    nfsstat -c -3 2>/dev/null | sed 's/^/    /'
    finish
    local total=0 bad=0 p f
    echo
    echo "== kernel-client suite summary ($(secs) s in the guest)"
    for t in "${TARGETS[@]}"; do
        p=${PASS[$t]:-0} f=${FAIL[$t]:-0}
        total=$((total + p + f)) bad=$((bad + f))
        echo "$t: $p/$((p + f)) checks passed${FAILED_NAMES[$t]:+; failed:${FAILED_NAMES[$t]}}"
    done
    [ "$total" -gt 0 ] || { echo "FAIL: no check ran"; exit 1; }
    [ "$bad" = 0 ] && { echo "ALL PASSED"; exit 0; }
    echo "FAILED"; exit 1
}

main
