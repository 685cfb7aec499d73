# Sourced INSIDE the vm.sh guest by suite.sh and perf.sh: start and mount the NFS
# servers under test. Expects KT_STAGE (the shared staging directory, which holds the
# granary binary and a copy of kernel-tests/vm/guest-lib.sh next to these scripts).

KT_GUEST=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=/dev/null
. "$KT_GUEST/guest-lib.sh"
export LC_ALL=C

# Local copy: executing the binary from the 9p share works, but a copy on the guest's
# root disk keeps 9p out of granary's page faults.
GRANARY=/usr/local/bin/granary
GRANARY_PORT=20490      # --squash none
GRANARY_SQ_PORT=20491   # --squash root
HOST_PORT=20492         # granary serve /export-host (host backend), --squash none
HOST_SQ_PORT=20493      # granary serve /export-host-sq, --squash root
EXT4_PORT=20497         # granary serve /export-ext4/rw (host backend on ext4), --squash none
EXT4_SQ_PORT=20498      # granary serve /export-ext4/sq, --squash root
V4_PORT=20499           # granary (mem) mounted with NFSv4.2, --squash none
V4_SQ_PORT=20500        # the same with --squash root
HOST_V4_PORT=20501      # granary serve /export-host-v4 (host backend) mounted with NFSv4.2
HOST_V4_SQ_PORT=20502   # granary serve /export-host-v4-sq, --squash root
V41_PORT=20503          # granary (mem) mounted with NFSv4.1, --squash none
V41_SQ_PORT=20504       # the same with --squash root
OBJECT_PORT=20505       # head A of the object export (PostgreSQL and S3 on the host), NFSv4.2
OBJECT_B_PORT=20506     # head B of the same export, mounted with NFSv3
OBJECT_DIR=/var/lib/granary-kt-object   # the heads' config, handle key and S3 keys
# The NFSv4 lease (and so grace period) of host-v4's servers: short, so that a restart
# costs the restart group little; knfsd_start gives knfsd 10 s, its minimum. 15 s, not
# granary's minimum of 10: a guest under TCG on a loaded host can be late to renew.
HOST_V4_LEASE_SECS=15
# 20494-20496: unused, and the erofs group's servers (check.sh, ERO_PORT 20495, 20496).
KNFSD_PORT=2049
# Big enough for the suite's largest moment (64 MiB files, fio files, the doc tree),
# small enough for a 4 GiB guest that also holds two tmpfs copies of the same data.
GRANARY_CAP_BYTES=$((1536 << 20))
KT_PIDS=()

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

install_granary() {
    install -m 755 "$KT_STAGE/granary" "$GRANARY" || return 1
    "$GRANARY" --version 2>/dev/null || true
}

# granary_start PORT SQUASH LOG [ARGS...]: one granary on 127.0.0.1:PORT serving ARGS
# (default: the mem export with the suite's cap); waits until it listens. SQUASH `-`
# gives no --squash (a --config export sets `squash` in its file: serve refuses both). Its PID goes to
# /tmp/granary-PORT.pid and its arguments to /tmp/granary-PORT.args (granary_again).
# setsid: a granary restarted by a check (restart.sh) must outlive that check.
# ulimit: the guest's init leaves RLIMIT_NOFILE at 1024 (hard 4096), and granary refuses
# to start a host export whose open-file cache would get no descriptors beside the 4,096
# it keeps for connections; its message says to raise the limit, as here.
granary_start() {
    local port=$1 squash=$2 log=$3 i
    printf '%q ' "$@" >"/tmp/granary-$port.args"
    shift 3
    local what=("$@")
    [ ${#what[@]} -gt 0 ] || what=(--mem-capacity-bytes "$GRANARY_CAP_BYTES")
    local sq=(--squash "$squash")
    [ "$squash" = - ] && sq=()
    (ulimit -n 65536 && exec setsid "$GRANARY" ${KT_GRANARY_LOG:+--log "$KT_GRANARY_LOG"} serve \
        --listen "127.0.0.1:$port" --no-portmap "${sq[@]}" "${what[@]}" >>"$log" 2>&1 </dev/null) &
    KT_PIDS+=($!)
    echo "$!" >"/tmp/granary-$port.pid"
    echo "granary (squash $squash) pid $! on 127.0.0.1:$port"
    for i in $(seq 100); do
        ss -Htln "sport = :$port" | grep -q . && return 0
        kill -0 "${KT_PIDS[-1]}" 2>/dev/null || break
        sleep 0.1
    done
    echo "granary on port $port did not start:"; cat "$log"; return 1
}

# place_split: every server's threads on vCPU 1, for a run whose client (fio) runs on
# vCPU 0 (`taskset -c 0`), as a client and a server on two machines would be: granary's
# and ganesha's processes with all their threads, and knfsd's nfsd kernel threads. The
# client's own kernel work runs where the scheduler puts it. Used by perf.sh and cost.sh
# (PERF_PLACEMENT / KT_COST_PLACEMENT=split).
place_split() {
    local p n=0
    [ "$(nproc)" -ge 2 ] || { echo "placement split needs 2 vCPUs"; return 1; }
    for p in $(pgrep -x granary) $(pgrep -x granary-base) $(pgrep -x ganesha.nfsd); do
        taskset -a -p -c 1 "$p" >/dev/null || { echo "cannot move process $p to vCPU 1"; return 1; }
        n=$((n + 1))
    done
    for p in $(pgrep -x nfsd); do
        taskset -p -c 1 "$p" >/dev/null || { echo "cannot move nfsd thread $p to vCPU 1"; return 1; }
        n=$((n + 1))
    done
    echo "placement split: the client on vCPU 0, $n server processes and nfsd threads on vCPU 1"
}

# knfsd_start_both: guest-lib's knfsd_start for /export (no_root_squash), plus a second
# tmpfs /export-sq exported with root_squash, root directory 0777 like granary's.
knfsd_start_both() {
    knfsd_start /export || return 1
    mkdir -p /export-sq && mount -t tmpfs -o size=512M,mode=0777 tmpfs /export-sq || return 1
    echo "/export-sq 127.0.0.1(rw,sync,no_subtree_check,root_squash,insecure,fsid=2)" >>/etc/exports
    exportfs -ra
}

# host_start_both: granary's host backend on two guest tmpfs directories (like knfsd's),
# each with its own state directory (the restart group restarts the first). The tmpfs
# pair sends large READs with sendfile (`--sendfile always`); the ext4 pair keeps the
# default, which copies them for a loopback client, so the kernel client reads through
# both paths.
host_start_both() {
    mkdir -p /export-host /export-host-sq || return 1
    mount -t tmpfs -o size=3G tmpfs /export-host || return 1
    mount -t tmpfs -o size=512M,mode=0777 tmpfs /export-host-sq || return 1
    granary_start "$HOST_PORT" none /tmp/granary-host.log /export-host --state-dir /var/lib/granary-kt \
        --sendfile always &&
        granary_start "$HOST_SQ_PORT" root /tmp/granary-host-sq.log /export-host-sq \
            --state-dir /var/lib/granary-kt-sq --sendfile always
}

# host_v4_start_both: like host_start_both, for the target that mounts granary's host
# backend with NFSv4.2, with a short lease (HOST_V4_LEASE_SECS) for the restart group.
host_v4_start_both() {
    mkdir -p /export-host-v4 /export-host-v4-sq || return 1
    mount -t tmpfs -o size=3G tmpfs /export-host-v4 || return 1
    mount -t tmpfs -o size=512M,mode=0777 tmpfs /export-host-v4-sq || return 1
    granary_start "$HOST_V4_PORT" none /tmp/granary-host-v4.log /export-host-v4 \
        --state-dir /var/lib/granary-kt-v4 --lease-secs "$HOST_V4_LEASE_SECS" &&
        granary_start "$HOST_V4_SQ_PORT" root /tmp/granary-host-v4-sq.log /export-host-v4-sq \
            --state-dir /var/lib/granary-kt-v4-sq --lease-secs "$HOST_V4_LEASE_SECS"
}

# knfsd_v4_start_both: knfsd (started here unless it runs) exporting two more tmpfs
# directories for its NFSv4.2 target, /export-v4 (no_root_squash) and /export-v4-sq
# (root_squash, mode 0777), beside the NFSv3 target's /export and /export-sq.
knfsd_v4_start_both() {
    if [ "$(cat /proc/fs/nfsd/threads 2>/dev/null || echo 0)" -eq 0 ]; then knfsd_start_both || return 1; fi
    mkdir -p /export-v4 /export-v4-sq || return 1
    mount -t tmpfs -o size=2G tmpfs /export-v4 || return 1
    mount -t tmpfs -o size=512M,mode=0777 tmpfs /export-v4-sq || return 1
    echo "/export-v4 127.0.0.1(rw,sync,no_subtree_check,no_root_squash,insecure,fsid=3)" >>/etc/exports
    echo "/export-v4-sq 127.0.0.1(rw,sync,no_subtree_check,root_squash,insecure,fsid=4)" >>/etc/exports
    exportfs -ra
}

# ext4_start_both: granary's host backend on two directories of an ext4 file system made
# in the guest (a sparse image on the guest's root disk, loop-mounted), like the tmpfs
# pair of host_start_both: rw (squash none) and sq (mode 0777, squash root).
EXT4_IMG=/var/tmp/kt-export-ext4.img
ext4_start_both() {
    modprobe -q loop
    truncate -s 768M "$EXT4_IMG" && mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$EXT4_IMG" ||
        { echo "mkfs.ext4 $EXT4_IMG failed"; return 1; }
    mkdir -p /export-ext4 && mount -t ext4 -o loop "$EXT4_IMG" /export-ext4 || return 1
    mkdir -p /export-ext4/rw /export-ext4/sq && chmod 0777 /export-ext4/sq || return 1
    granary_start "$EXT4_PORT" none /tmp/granary-ext4.log /export-ext4/rw --state-dir /var/lib/granary-kt-ext4 &&
        granary_start "$EXT4_SQ_PORT" root /tmp/granary-ext4-sq.log /export-ext4/sq --state-dir /var/lib/granary-kt-ext4-sq
}

# object_start_both: two granary heads of one object export, on OBJECT_PORT and
# OBJECT_B_PORT. Its engines run on the HOST, bound to 127.0.0.1 (kernel-tests/run.sh
# starts scripts/object-env.sh while the guest boots and writes $KT_STAGE/object/env,
# or object/failed); the guest reaches them at 10.0.2.2 through vm.sh's --host-net.
# Both heads read one config (the same handle key, database and bucket); `granary
# format` makes the schema and the root first, so the heads do not race to.
object_start_both() {
    object_config || return 1
    # The file says squash = "none" (serve refuses --squash beside --config).
    granary_start "$OBJECT_PORT" - /tmp/granary-object-a.log --config "$OBJECT_DIR/head.toml" &&
        granary_start "$OBJECT_B_PORT" - /tmp/granary-object-b.log --config "$OBJECT_DIR/head.toml"
}

# object_config: waits for the host's engines (object/env, or object/failed), brings up
# the NIC that reaches them, writes $OBJECT_DIR/head.toml (the handle key, database and
# bucket every head shares) and makes the schema and the root with `granary format`.
object_config() {
    local env=$KT_STAGE/object i
    for i in $(seq 1800); do
        [ -e "$env/env" ] || [ -e "$env/failed" ] && break
        sleep 0.1
    done
    [ -e "$env/failed" ] && { echo "object: the engines did not start on the host:"; cat "$env/failed"; return 1; }
    [ -e "$env/env" ] || { echo "object: no engines after 180 s ($env/env never came)"; return 1; }
    # shellcheck source=/dev/null
    . "$env/env" # OBJECT_POSTGRES, OBJECT_STORE
    host_net_up || return 1
    mkdir -p "$OBJECT_DIR" && chmod 700 "$OBJECT_DIR" || return 1
    (umask 077 && head -c 16 /dev/urandom >"$OBJECT_DIR/handle.key" &&
        cp "$env/s3.keys" "$OBJECT_DIR/s3.keys") || return 1
    cat >"$OBJECT_DIR/head.toml" <<EOF
handle_key = "$OBJECT_DIR/handle.key"
[[export]]
path = "/"
backend = "object"
squash = "none"
postgres = "$OBJECT_POSTGRES"
store = "$OBJECT_STORE"
credentials = "$OBJECT_DIR/s3.keys"
EOF
    "$GRANARY" format --config "$OBJECT_DIR/head.toml" >/tmp/granary-object-format.log 2>&1 ||
        { echo "granary format failed:"; cat /tmp/granary-object-format.log; return 1; }
}

# object_stop_heads: after a group on the object target ran out of time, kill both heads
# (SIGKILL: a head waiting on its engines may not answer SIGTERM soon) and detach their
# mounts, so that the kernel client's writeback stops keeping them busy with S3 and the
# database for the rest of the suite (in CI on 006cb02 they uploaded for 17 minutes).
object_stop_heads() {
    local port p
    echo "object: the group ran out of time; heads A and B stopped, their mounts detached"
    for port in "$OBJECT_PORT" "$OBJECT_B_PORT"; do
        p=$(cat "/tmp/granary-$port.pid" 2>/dev/null) && kill -KILL "$p" 2>/dev/null
        rm -f "/tmp/granary-$port.pid"
    done
    umount -f -l /mnt/object /mnt/object-b /mnt/object-b4 2>/dev/null
    return 0
}

# object_b_mount_cmd: head B's NFSv3 mount (nolock: the guest's own lockd holds the one
# portmapper's NLM registration the client would ask; server/tests/nlm.rs tests NLM on
# object exports). KT_HEADS_BREAK=nocto adds nocto,actimeo=3600: B's client then trusts
# its caches at open instead of asking the server, and the heads group must fail (to see
# it can).
object_b_mount_cmd() {
    local opts=vers=3,proto=tcp,port=$OBJECT_B_PORT,mountport=$OBJECT_B_PORT,mountproto=tcp,nolock,retry=0
    [ "${KT_HEADS_BREAK:-}" = nocto ] && opts+=,nocto,actimeo=3600
    echo "mount -t nfs -o $opts 127.0.0.1:/ /mnt/object-b"
}

# granary_kill PORT [SIGNAL]: kill -9 (or send SIGNAL to) the granary on PORT (started by
# granary_start, maybe by another shell) and wait until it is gone (a SIGTERM lets it
# finish the requests in progress, for up to 10 s).
granary_kill() {
    local pid i sig=${2:-KILL}
    pid=$(cat "/tmp/granary-$1.pid") || return 1
    kill -"$sig" "$pid" || return 1
    # Gone, or a zombie its parent (maybe the guest's init) has not reaped yet.
    for i in $(seq 300); do
        kill -0 "$pid" 2>/dev/null && [ "$(awk '{ print $3 }' "/proc/$pid/stat" 2>/dev/null)" != Z ] || return 0
        sleep 0.1
    done
    echo "granary pid $pid on port $1 survived SIG$sig for 30 s"; return 1
}

# granary_again PORT: start the granary of PORT again with the arguments it had.
granary_again() {
    local args
    args=$(cat "/tmp/granary-$1.args") || return 1
    eval "granary_start $args"
}

# granary_pids: every granary granary_start started, also those restarted by a check.
granary_pids() { cat /tmp/granary-*.pid 2>/dev/null; }

# granary_restarting PID: PID is the granary of a port that restart.sh is stopping and
# starting again (/tmp/granary-PORT.restarting, from its stop or term to its start), so
# another context's liveness check (suite.sh alive) must not take its exit for a crash.
granary_restarting() {
    local f
    for f in /tmp/granary-*.restarting; do
        [ -e "$f" ] && [ "$(cat "${f%.restarting}.pid" 2>/dev/null)" = "$1" ] && return 0
    done
    return 1
}

# Mount commands, one per target; suite.sh's reload runs them again after umount.
# retry=0: a server that is down fails the mount at once instead of retrying for 2 min.
granary_mount_cmd() { # PORT MNT
    echo "mount -t nfs -o vers=3,proto=tcp,port=$1,mountport=$1,mountproto=tcp,nolock,retry=0 127.0.0.1:/ $2"
}
# NFSv4.2: no MOUNT protocol, one port, and fcntl/flock locks go to the server (LOCK,
# LOCKT, LOCKU; the locks group).
granary_v4_mount_cmd() { # PORT MNT
    echo "mount -t nfs -o vers=4.2,proto=tcp,port=$1,retry=0 127.0.0.1:/ $2"
}
granary_v41_mount_cmd() { # PORT MNT
    echo "mount -t nfs -o vers=4.1,proto=tcp,port=$1,retry=0 127.0.0.1:/ $2"
}
knfsd_v4_mount_cmd() { # EXPORT MNT
    echo "mount -t nfs -o vers=4.2,proto=tcp,port=$KNFSD_PORT,retry=0 127.0.0.1:$1 $2"
}
knfsd_mount_cmd() { # EXPORT MNT
    echo "mount -t nfs -o vers=3,proto=tcp,port=$KNFSD_PORT,mountproto=tcp,nolock,retry=0 127.0.0.1:$1 $2"
}
ganesha_mount_cmd() { # MNT
    echo "mount -t nfs -o vers=3,proto=tcp,port=12049,mountport=12050,mountproto=tcp,nolock,retry=0 127.0.0.1:/ganesha-export $1"
}

# stop_started: SIGTERM each server this script started (by PID), then wait for it.
stop_started() {
    local p
    for p in "${KT_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for p in "${KT_PIDS[@]}"; do wait "$p" 2>/dev/null; done
    KT_PIDS=()
}
