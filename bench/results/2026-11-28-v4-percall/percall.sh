#!/usr/bin/env bash
# What one small call costs granary's server process on this host, for binaries measured
# side by side: per call of one `granary bench` v4 phase, taken as the difference of two
# runs of N1 and N2 calls against one server (the bench's setup calls cancel out):
#   cpu     task-clock (user + system) of every server thread, perf stat
#   user    the user-space share of it, from a perf record profile of a third run
#   sys     system calls (strace -c -f)
#   allocs  heap allocations (calls of mimalloc's mi_malloc_aligned, mi_zalloc_aligned
#           and mi_realloc_aligned, counted by perf uprobes; a separate server, since
#           a uprobe costs microseconds)
#
#   percall.sh ROUNDS PHASES BIN...   e.g. percall.sh 3 "read4k-d1-v4 write4k-d1-v4" base new
# Each BIN is a granary built with --features lab (its own bench is the client). Rounds
# alternate the binaries (round r runs them in order, rotated by r). One line per
# binary, phase and round: "RESULT bin phase cpu_us user_pct sys allocs load1".
# Export: mem. N1/N2 from the environment (default 2000 and 12000).
set -euo pipefail
if [ "${1:-}" = --bench-only ]; then # (internal) one bench run: BIN URL PHASE COUNT OUT
    exec "${BENCH_BIN:-$2}" bench --target "$3" --workloads "v4/$4" --count "$5" --warmup 0 --repeats 1 \
        --rand-file-mib 4 --no-limit --no-plots --allow-busy --out "$6/bench" >/dev/null 2>&1
fi
SELF=$(readlink -f "$0")
ROUNDS=$1 PHASES=$2; shift 2
BINS=("$@")
N1=${N1:-2000} N2=${N2:-12000}
OUT=${OUT:-/tmp/percall-qd1}
PORT=${PORT:-20631}
mkdir -p "$OUT"
url="g=nfs://127.0.0.1/?nfsport=$PORT&mountport=$PORT"
d=$((N2 - N1))

bench() { # BIN PHASE COUNT
    "$SELF" --bench-only "$1" "$url" "$2" "$3" "$OUT"
}

wait_port() {
    for _ in $(seq 200); do
        (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && return 0
        sleep 0.1
    done
    echo "server did not listen" >&2; exit 1
}
start() { # BIN -> srv
    "$1" serve --listen "127.0.0.1:$PORT" --no-portmap --squash none >"$OUT/server.log" 2>&1 &
    srv=$!
    wait_port
}
stop() { kill -INT "$srv"; wait "$srv" 2>/dev/null || true; }

probes() { # BIN TAG: uprobes on the allocator's entry points, group qd1TAG
    perf probe -q -d "qd1$2:*" 2>/dev/null || true
    for f in mi_malloc_aligned mi_zalloc_aligned mi_realloc_aligned; do
        perf probe -q -x "$1" -a "qd1$2:${f}_$2=$f"
    done
}

measure() { # BIN TAG PHASE
    local bin=$1 tag=$2 phase=$3
    # CPU: perf stat around N1 and N2 calls.
    start "$bin"; bench "$bin" "$phase" 50
    local t=()
    for n in $N1 $N2; do
        perf stat -x, -e task-clock -p "$srv" -o "$OUT/stat" -- "$SELF" --bench-only "$bin" "$url" "$phase" "$n" "$OUT"
        t+=("$(awk -F, '$3 == "task-clock" { print $1 }' "$OUT/stat")")
    done
    # The user share: a profile of N2 calls.
    perf record -q -e cpu-clock -F 10000 -o "$OUT/perf-$tag-$phase.data" -p "$srv" -- \
        "$SELF" --bench-only "$bin" "$url" "$phase" "$N2" "$OUT" 2>/dev/null || true
    stop
    local user
    user=$(perf report -i "$OUT/perf-$tag-$phase.data" --sort dso --stdio 2>/dev/null |
        awk '$1 ~ /%$/ { p = $1 + 0; if ($2 ~ /kernel/) k += p; else u += p } END { printf "%.0f", 100 * u / (u + k) }')
    # System calls: strace around N1 and N2 calls.
    start "$bin"; bench "$bin" "$phase" 50
    local s=()
    for n in $N1 $N2; do
        strace -c -f -q -p "$srv" -o "$OUT/strace" & local st=$!
        sleep 0.5
        bench "$bin" "$phase" "$n"
        kill -INT "$st"; wait "$st" 2>/dev/null || true
        s+=("$(awk '$NF == "total" { print $4 }' "$OUT/strace")")
    done
    stop
    # Allocations: uprobes around N1 and N2 calls.
    start "$bin"; bench "$bin" "$phase" 50
    local a=()
    for n in $N1 $N2; do
        perf stat -x, -e "qd1$tag:*" -p "$srv" -o "$OUT/astat" -- "$SELF" --bench-only "$bin" "$url" "$phase" "$n" "$OUT"
        a+=("$(awk -F, '$3 ~ /^qd1/ { s += $1 } END { print s }' "$OUT/astat")")
    done
    stop
    local load; load=$(cut -d' ' -f1 /proc/loadavg)
    awk -v b="$tag" -v p="$phase" -v t1="${t[0]}" -v t2="${t[1]}" -v s1="${s[0]}" -v s2="${s[1]}" \
        -v a1="${a[0]}" -v a2="${a[1]}" -v u="$user" -v d=$d -v l="$load" \
        'BEGIN { printf "RESULT %s %s cpu_us=%.2f user_pct=%s syscalls=%.2f allocs=%.2f load1=%s\n", b, p, (t2 - t1) * 1000 / d, u, (s2 - s1) / d, (a2 - a1) / d, l }'
}

n=${#BINS[@]}
for i in "${!BINS[@]}"; do probes "${BINS[$i]}" "$i"; done
for r in $(seq 0 $((ROUNDS - 1))); do
    for phase in $PHASES; do
        for k in $(seq 0 $((n - 1))); do
            i=$(((k + r) % n))
            measure "${BINS[$i]}" "$i" "$phase" | sed "s|^RESULT $i |RESULT $(basename "${BINS[$i]}") r$r |"
        done
    done
done
for i in "${!BINS[@]}"; do perf probe -q -d "qd1$i:*" 2>/dev/null || true; done
