#!/usr/bin/env bash
# go-nfs peer (github.com/willscott/go-nfs, pinned in gonfs/go.mod): NFSv3 + MOUNT on
# 127.0.0.1:12149, built from gonfs/main.go.
#   gonfs.sh install            go build into ~/.cache/granary/peers/gonfs (needs Go)
#   gonfs.sh start [mem]        go-nfs's in-memory file system, URL path /mem
#   gonfs.sh start dir DIR      serve DIR (go-billy osfs), URL path DIR
#   gonfs.sh stop               stop it
#   gonfs.sh url                the libnfs URL of the running server
# go-nfs maps every mount path to its root. GONFS_HANDLES sets its handle cache
# (default 65536).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

RUN=$PEERS_RUN/gonfs
BIN=$PEERS_CACHE/gonfs/gonfs
PORT=12149

install() {
    command -v go >/dev/null || PATH=$PATH:/usr/local/go/bin
    command -v go >/dev/null || die "no Go toolchain: install Go 1.20 or newer (https://go.dev/dl; Debian 12 has it in bookworm-backports, golang-1.21)"
    mkdir -p "$(dirname "$BIN")"
    # -mod=readonly: the versions are go.mod's and go.sum's, never resolved anew.
    (cd "$PEERS_HOME/gonfs" && go build -mod=readonly -trimpath -o "$BIN.new" .)
    mv -f "$BIN.new" "$BIN"
    echo "built $BIN (go-nfs $(awk '$1 == "github.com/willscott/go-nfs" { print $2 }' "$PEERS_HOME/gonfs/go.mod"))"
}

start() {
    local path args=()
    path=$(export_path "$@")
    [ "${1:-mem}" = mem ] || args=(-dir "$path")
    # Rebuilt when main.go or the pinned versions are newer than the binary.
    if [ ! -x "$BIN" ] || [ -n "$(find "$PEERS_HOME/gonfs" -newer "$BIN" -type f)" ]; then
        install >&2
    fi
    ! ours "$RUN/server.pid" "$BIN" || die "already running; stop it first"
    ! listens $PORT || die "port $PORT is in use"
    launch "$RUN/server.pid" "$RUN/server.log" "$BIN" -addr 127.0.0.1:$PORT \
        -handles "${GONFS_HANDLES:-65536}" "${args[@]}"
    echo "$path" >"$RUN/export"
    if ! await 10 "$RUN/server.pid" listens $PORT; then
        cat "$RUN/server.log" >&2
        halt "$RUN/server.pid" "$BIN" >&2
        die "go-nfs did not start"
    fi
    echo "go-nfs pid $(cat "$RUN/server.pid"), log $RUN/server.log"
    nfs_url "$path" $PORT $PORT
}

mkdir -p "$RUN"
case ${1:-} in
install) install ;;
start) shift; start "$@" ;;
stop) halt "$RUN/server.pid" "$BIN" $PORT ;;
url) ours "$RUN/server.pid" "$BIN" || die "not running"
    nfs_url "$(cat "$RUN/export")" $PORT $PORT ;;
*) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 2 ;;
esac
