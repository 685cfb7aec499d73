# Sourced INSIDE the vm.sh guest by suite.sh and perf.sh: start and mount the NFS
# servers under test. Expects KT_STAGE (the shared staging directory, which holds the
# granary binary and a copy of ../shared/vm/guest-lib.sh next to these scripts).

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
# (default: the mem export with the suite's cap); waits until it listens.
granary_start() {
    local port=$1 squash=$2 log=$3 i
    shift 3
    local what=("$@")
    [ ${#what[@]} -gt 0 ] || what=(--mem-capacity-bytes "$GRANARY_CAP_BYTES")
    "$GRANARY" ${KT_GRANARY_LOG:+--log "$KT_GRANARY_LOG"} serve --listen "127.0.0.1:$port" --no-portmap --squash "$squash" \
        "${what[@]}" >"$log" 2>&1 &
    KT_PIDS+=($!)
    echo "granary (squash $squash) pid $! on 127.0.0.1:$port"
    for i in $(seq 100); do
        ss -Htln "sport = :$port" | grep -q . && return 0
        kill -0 "${KT_PIDS[-1]}" 2>/dev/null || break
        sleep 0.1
    done
    echo "granary on port $port did not start:"; cat "$log"; return 1
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
# each with its own state directory.
host_start_both() {
    mkdir -p /export-host /export-host-sq || return 1
    mount -t tmpfs -o size=3G tmpfs /export-host || return 1
    mount -t tmpfs -o size=512M,mode=0777 tmpfs /export-host-sq || return 1
    granary_start "$HOST_PORT" none /tmp/granary-host.log /export-host --state-dir /var/lib/granary-kt &&
        granary_start "$HOST_SQ_PORT" root /tmp/granary-host-sq.log /export-host-sq --state-dir /var/lib/granary-kt-sq
}

# Mount commands, one per target; suite.sh's reload runs them again after umount.
# retry=0: a server that is down fails the mount at once instead of retrying for 2 min.
granary_mount_cmd() { # PORT MNT
    echo "mount -t nfs -o vers=3,proto=tcp,port=$1,mountport=$1,mountproto=tcp,nolock,retry=0 127.0.0.1:/ $2"
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
