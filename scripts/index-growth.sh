#!/usr/bin/env bash
# What files created and removed through NFS leave behind in a host export's handle index:
# for each granary binary given, serve a fresh tmpfs directory with a fresh state
# directory, run CYCLES CREATE+SETATTR+REMOVE cycles at depth 16 (`granary bench`'s
# meta/cycle-d16, from the first binary), stop, then restart and measure the time until
# the port accepts a connection, the idle RSS 2 s later, and the index file's size.
# Binaries are measured in turn, ROUNDS times (interleaved). Output: one line per run.
#
# The first BIN runs the load, so it needs `granary bench`: build it with
# `cargo build --release --features lab`.
#
# Usage: scripts/index-growth.sh CYCLES ROUNDS BIN [BIN...]
set -euo pipefail
cycles=${1:?cycles}
rounds=${2:?rounds}
shift 2
bench_bin=$1
port=20491

wait_listen() { # pid: seconds until 127.0.0.1:$port accepts, or fails after 60 s
  local start now
  start=$(date +%s.%N)
  for _ in $(seq 1 12000); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      now=$(date +%s.%N)
      echo "$now - $start" | bc
      return 0
    fi
    kill -0 "$1" 2>/dev/null || { echo "server exited" >&2; return 1; }
    sleep 0.005
  done
  echo "server did not listen within 60 s" >&2
  return 1
}

rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }

stop() { kill -TERM "$1"; wait "$1" 2>/dev/null || true; }

for round in $(seq 1 "$rounds"); do
  for bin in "$@"; do
    dir=$(mktemp -d /dev/shm/granary-growth.XXXXXX)
    state=$(mktemp -d /tmp/granary-growth-state.XXXXXX)
    serve=("$bin" serve "$dir" --listen "127.0.0.1:$port" --state-dir "$state" --no-portmap --squash none)
    "${serve[@]}" >"$state/serve.out" 2>"$state/serve.log" &
    pid=$!
    fresh_listen=$(wait_listen "$pid")
    fresh_rss=$(rss_kib "$pid")
    url="nfs://127.0.0.1/?version=3&nfsport=$port&mountport=$port"
    out=$(mktemp -d /tmp/granary-growth-bench.XXXXXX)
    "$bench_bin" bench --target "g=$url" --workloads meta/cycle-d16 --count "$cycles" \
      --warmup 0 --repeats 1 --no-limit --no-plots --allow-busy --out "$out" \
      >"$out/bench.log" 2>&1 || { echo "bench failed: $out/bench.log" >&2; exit 1; }
    loaded_rss=$(rss_kib "$pid")
    stop "$pid"
    index_bytes=$(stat -c %s "$state"/host-*.index)
    left=$(find "$dir" -type f | wc -l)
    "${serve[@]}" >>"$state/serve.out" 2>>"$state/serve.log" &
    pid=$!
    listen=$(wait_listen "$pid")
    sleep 2
    rss=$(rss_kib "$pid")
    stop "$pid"
    echo "round=$round bin=$bin cycles=$cycles files_left=$left index_bytes=$index_bytes" \
      "fresh_listen_s=$fresh_listen fresh_rss_kib=$fresh_rss rss_after_load_kib=$loaded_rss" \
      "restart_listen_s=$listen restart_idle_rss_kib=$rss"
    rm -rf "$dir" "$state" "$out"
  done
done
