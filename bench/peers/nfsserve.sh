#!/usr/bin/env bash
# nfsserve peer (the nfsserve crate, pinned in nfsserve/Cargo.lock): NFSv3 + MOUNT on
# 127.0.0.1:12249, built from nfsserve/ (an in-memory file system of our own).
#   nfsserve.sh install         cargo build into ~/.cache/granary/peers/nfsserve
#   nfsserve.sh start [mem]     the in-memory file system, URL path /mem
#   nfsserve.sh stop            stop it
#   nfsserve.sh url             the libnfs URL of the running server
# `start dir DIR` is refused: this peer serves memory only (granary bench uses it so).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

RUN=$PEERS_RUN/nfsserve
BIN=$PEERS_CACHE/nfsserve/nfsserve-peer
PORT=12249

install() {
    command -v cargo >/dev/null || PATH=$PATH:$HOME/.cargo/bin
    command -v cargo >/dev/null || die "no cargo: install Rust (https://rustup.rs)"
    mkdir -p "$(dirname "$BIN")"
    # --locked: the versions are Cargo.lock's. Its own target directory: the peer is not
    # part of granary's workspace and must not touch granary's builds.
    cargo build --quiet --release --locked --manifest-path "$PEERS_HOME/nfsserve/Cargo.toml" \
        --target-dir "$PEERS_CACHE/nfsserve/target"
    cp "$PEERS_CACHE/nfsserve/target/release/nfsserve-peer" "$BIN.new"
    mv -f "$BIN.new" "$BIN"
    echo "built $BIN (nfsserve $(grep -A1 '^name = "nfsserve"$' "$PEERS_HOME/nfsserve/Cargo.lock" | sed -n 's/^version = "\(.*\)"/\1/p'))"
}

start() {
    [ "${1:-mem}" = mem ] || die "start ${1}: this peer serves memory only (start mem)"
    if [ ! -x "$BIN" ] || [ -n "$(find "$PEERS_HOME/nfsserve" -newer "$BIN" -type f)" ]; then
        install >&2
    fi
    ! ours "$RUN/server.pid" "$BIN" || die "already running; stop it first"
    ! listens $PORT || die "port $PORT is in use"
    launch "$RUN/server.pid" "$RUN/server.log" "$BIN" --addr 127.0.0.1:$PORT
    if ! await 10 "$RUN/server.pid" listens $PORT; then
        cat "$RUN/server.log" >&2
        halt "$RUN/server.pid" "$BIN" >&2
        die "nfsserve did not start"
    fi
    echo "nfsserve pid $(cat "$RUN/server.pid"), log $RUN/server.log"
    nfs_url /mem $PORT $PORT
}

mkdir -p "$RUN"
case ${1:-} in
install) install ;;
start) shift; start "$@" ;;
stop) halt "$RUN/server.pid" "$BIN" $PORT ;;
url) ours "$RUN/server.pid" "$BIN" || die "not running"
    nfs_url /mem $PORT $PORT ;;
*) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 2 ;;
esac
