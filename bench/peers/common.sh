# shellcheck shell=bash disable=SC2034 # the variables are for the scripts that source this
# Sourced by the peer scripts beside it. A peer runs detached (setsid), keeps its
# runtime files in $PEER_RUN and is stopped only through the PID its start saved.

PEERS_HOME=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# Built binaries (go-nfs, nfsserve), kept across runs; runtime files, one boot's worth.
PEERS_CACHE=${GRANARY_PEERS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/granary/peers}
PEERS_RUN=${GRANARY_PEERS_RUN:-/tmp/granary-peers}

die() {
    echo "$(basename "$0"): $*" >&2
    exit 1
}

# listens PORT: a TCP socket listens on PORT.
listens() { ss -Hltn "sport = :$1" | grep -q .; }

# alive PIDFILE: the saved process exists and has not exited.
alive() {
    local pid state
    pid=$(cat "$1" 2>/dev/null) || return 1
    state=$(ps -o stat= -p "$pid" 2>/dev/null) || return 1
    [ "${state:0:1}" != Z ]
}

# ours PIDFILE WORD: the saved process is alive and its command line contains WORD
# (so that a reused PID is never signalled).
ours() {
    alive "$1" && tr '\0' ' ' <"/proc/$(cat "$1")/cmdline" | grep -qF -- "$2"
}

# launch PIDFILE LOG COMMAND...: start COMMAND detached, its output in LOG.
launch() {
    local pidfile=$1 log=$2
    shift 2
    setsid "$@" >"$log" 2>&1 </dev/null &
    echo $! >"$pidfile"
}

# await SECONDS PIDFILE TEST...: run TEST every 0.1 s until it succeeds (0), the process
# exits (1) or SECONDS pass (1).
await() {
    local tries=$(($1 * 10)) pidfile=$2
    shift 2
    while [ $tries -gt 0 ]; do
        alive "$pidfile" || return 1
        "$@" && return 0
        sleep 0.1
        tries=$((tries - 1))
    done
    return 1
}

# halt PIDFILE WORD [PORT...]: SIGTERM the saved process (SIGKILL after 15 s), then wait
# up to 10 s for each PORT to be closed.
halt() {
    local pidfile=$1 word=$2 pid _ port
    shift 2
    if ! ours "$pidfile" "$word"; then
        rm -f "$pidfile"
        return 0
    fi
    pid=$(cat "$pidfile")
    kill -TERM "$pid"
    for _ in $(seq 150); do alive "$pidfile" || break; sleep 0.1; done
    ! alive "$pidfile" || kill -KILL "$pid"
    for port in "$@"; do
        for _ in $(seq 100); do listens "$port" || break; sleep 0.1; done
    done
    rm -f "$pidfile"
    echo "stopped $word (pid $pid)"
}

# nfs_url PATH NFSPORT MOUNTPORT: the libnfs URL granary bench and libnfs-utils take.
# auto-traverse-mounts=0: go-nfs has no MOUNT EXPORT, which libnfs calls after MNT
# otherwise; every peer's URL carries it so that the client behaves alike.
nfs_url() {
    echo "nfs://127.0.0.1$1?version=3&nfsport=$2&mountport=$3&auto-traverse-mounts=0"
}

# export_path MODE [DIR]: the export a `start` asks for: /mem, or DIR made absolute.
export_path() {
    case ${1:-mem} in
    mem) echo /mem ;;
    dir) [ -n "${2:-}" ] || die "usage: $(basename "$0") start dir DIR"
        mkdir -p "$2" && realpath "$2" ;;
    *) die "usage: $(basename "$0") start [mem|dir DIR]" ;;
    esac
}
