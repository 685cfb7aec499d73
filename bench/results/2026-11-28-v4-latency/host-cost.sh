#!/usr/bin/env bash
# Per-call cost of granary's NFSv4.1 COMPOUNDs on this host: system calls (strace -c;
# independent of the host's load), CPU time and context switches (perf stat; CPU time
# stretches with the load) of the server process per call of one `granary bench` v4
# phase, as the difference of two runs of N1 and N2 calls (so the bench's own setup
# calls cancel out), and a perf profile of the second run.
#
#   [BENCH_BIN=granary-with-lab] host-cost.sh BIN EXPORT PHASE [N1 N2]
#     BIN     the granary binary (the server; the bench client is the same binary)
#     EXPORT  mem, or a directory (the host backend; a tmpfs such as /dev/shm/X)
#     PHASE   a v4 phase of `granary bench`: read4k-d1-v4, write4k-d1-v4, getattr-d1-v4 ...
# Prints "server cpu/call", "syscalls/call NAME=n ..."; the profile is $OUT/perf.data
# (default OUT /tmp/v4lat-cost; `perf report -i`).
set -euo pipefail
if [ "${1:-}" = --bench-only ]; then # (internal) one bench run: BIN URL PHASE COUNT OUT
    exec "${BENCH_BIN:-$2}" bench --target "$3" --workloads "v4/$4" --count "$5" --warmup 0 --repeats 1 \
        --rand-file-mib 4 --no-limit --no-plots --allow-busy --out "$6/bench" >/dev/null 2>&1
fi
BIN=$1 EXPORT=$2 PHASE=$3 N1=${4:-500} N2=${5:-2500}
OUT=${OUT:-/tmp/v4lat-cost}
PORT=${PORT:-20611}
mkdir -p "$OUT"
args=(serve --listen "127.0.0.1:$PORT" --no-portmap --squash none)
[ "$EXPORT" = mem ] || args+=("$EXPORT" --state-dir "$OUT/state")
url="g=nfs://127.0.0.1/?nfsport=$PORT&mountport=$PORT"

bench() { # COUNT
    "${BENCH_BIN:-$BIN}" bench --target "$url" --workloads "v4/$PHASE" --count "$1" --warmup 0 --repeats 1 \
        --rand-file-mib 4 --no-limit --no-plots --allow-busy --out "$OUT/bench" >/dev/null 2>&1
}

wait_port() {
    for _ in $(seq 200); do
        (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && return 0
        sleep 0.1
    done
    echo "server did not listen" >&2; exit 1
}

# --- CPU time and switches: perf stat (software counters: this VM has no hardware
# ones, and valgrind cannot run granary: rustix's vDSO setup faults under it) around
# each run; the second run is also sampled (perf record -g) for the profile.
rm -rf "$OUT/state" # no client records: no grace period
"$BIN" "${args[@]}" >"$OUT/server-perf.log" 2>&1 &
srv=$!
wait_port
bench 50 # warm: first session, caches
pstat() { # COUNT -> "task-clock-ms switches"
    perf stat -x, -e task-clock,context-switches,page-faults -p "$srv" -o "$OUT/stat-$1.txt" -- \
        "$0" --bench-only "$BIN" "$url" "$PHASE" "$1" "$OUT"
    awk -F, '$3 == "task-clock" { t = $1 } $3 == "context-switches" { c = $1 } $3 == "page-faults" { f = $1 } END { print t, c, f }' "$OUT/stat-$1.txt"
}
read -r t1 c1 f1 < <(pstat "$N1")
read -r t2 c2 f2 < <(pstat "$N2")
perf record -q -g -e cpu-clock -F 4000 -o "$OUT/perf.data" -p "$srv" -- \
    "$0" --bench-only "$BIN" "$url" "$PHASE" "$N2" "$OUT" 2>/dev/null || true
kill -INT "$srv"; wait "$srv" 2>/dev/null || true
awk -v t1="$t1" -v t2="$t2" -v c1="$c1" -v c2="$c2" -v f1="$f1" -v f2="$f2" -v d=$((N2 - N1)) -v p="$PHASE" -v e="$EXPORT" \
    'BEGIN { printf "server cpu/call %.1f us, switches/call %.2f, page faults/call %.2f (%s, %s; perf stat: the time is load-dependent)\n", (t2 - t1) * 1000 / d, (c2 - c1) / d, (f2 - f1) / d, p, e }'

# --- system calls: strace -c -f around each run
rm -rf "$OUT/state"
"$BIN" "${args[@]}" >"$OUT/server-st.log" 2>&1 &
srv=$!
wait_port
bench 50
sc() { # COUNT -> "name calls" lines
    strace -c -f -q -p "$srv" -o "$OUT/strace-$1.txt" &
    local st=$!
    sleep 1
    bench "$1"
    kill -INT "$st"; wait "$st" 2>/dev/null || true
    awk 'NF >= 5 && $1 ~ /^[0-9.]+$/ { print $NF, $4 }' "$OUT/strace-$1.txt"
}
sc "$N1" >"$OUT/sc1"
sc "$N2" >"$OUT/sc2"
kill -INT "$srv"; wait "$srv" 2>/dev/null || true
awk -v d=$((N2 - N1)) 'NR == FNR { a[$1] = $2; next } { n = ($2 - a[$1]) / d; if (n > 0.01 || $1 == "total") printf " %s=%.2f", $1, n } END { print "" }' \
    "$OUT/sc1" "$OUT/sc2" | sed "s|^|syscalls/call ($PHASE, $EXPORT):|"
