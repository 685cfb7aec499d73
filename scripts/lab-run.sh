#!/usr/bin/env bash
# Runs `granary lab` experiments (twice, to show run-to-run spread) and, with `timers`,
# the server-level timer comparison, and keeps everything under
# bench/results/<date>-lab-<tag>/ with the machine, the load before and after each run,
# and the git commit.
#
#   scripts/lab-run.sh                   # every experiment, tag "run"
#   scripts/lab-run.sh timers            # one experiment (tag "timers")
#   scripts/lab-run.sh quiet             # every experiment, tag "quiet"
#   scripts/lab-run.sh quiet timers      # tag first, then experiments
#   LAB_RUNS=3 LAB_TAG=quiet scripts/lab-run.sh timers rangelock
#
# Run it alone on the machine: another job on the same cores moves every number. The lab
# and the bench refuse to start while the 1-minute load average is above the core count;
# LAB_ALLOW_BUSY=1 runs anyway and every result is then marked BUSY.
set -euo pipefail
cd "$(dirname "$0")/.."

all="decode multigrain rangelock timers fhcache"
experiments=()
tag=
for arg in "$@"; do
    if [[ " $all " == *" $arg "* ]]; then
        experiments+=("$arg")
    elif [[ -z $tag && ${#experiments[@]} -eq 0 ]]; then
        tag=$arg
    else
        echo "lab-run.sh: unknown experiment $arg (use: $all)" >&2
        exit 2
    fi
done
if [[ ${#experiments[@]} -eq 0 ]]; then
    read -r -a experiments <<<"${LAB_EXPERIMENTS:-$all}"
    tag=${tag:-run}
else
    tag=${tag:-${LAB_TAG:-$(IFS=-; echo "${experiments[*]}")}}
fi
runs=${LAB_RUNS:-2}
busy=()
[[ ${LAB_ALLOW_BUSY:-0} == 1 ]] && busy=(--allow-busy)
out=bench/results/$(date -u +%Y-%m-%d)-lab-$tag
bin=target/release/granary

cargo build --release -q -p granary --features lab
mkdir -p "$out"

{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "nproc: $(nproc)"
    echo "loadavg at start: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "uname -r: $(uname -r)"
    grep -m1 'model name' /proc/cpuinfo
    echo "memory: $(awk '/MemTotal/ { printf "%d MiB", $2 / 1024 }' /proc/meminfo)"
    echo "git HEAD: $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' (plus uncommitted changes)')"
    echo "rustc: $(rustc --version)"
    echo "binary: $bin (cargo build --release --features lab)"
    echo "top processes before:"
    ps -eo user,pid,pcpu,etime,args --sort=-pcpu | head -6 | cut -c1-140
} >"$out/machine.txt"

load() { echo "$1: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/loadavg.txt"; }

# The previous experiment's own threads lift the 1-minute load average (8 threads on 2
# cores reach 2.3): wait, at most 3 minutes, until it is back under the core count, so a
# run is refused only for someone else's load.
settle() {
    local waited=0
    while awk -v n="$(nproc)" '{ exit !($1 >= n) }' /proc/loadavg && ((waited < 180)); do
        sleep 5
        waited=$((waited + 5))
    done
}

for e in "${experiments[@]}"; do
    for r in $(seq 1 "$runs"); do
        settle
        load "$e run $r before"
        echo "== granary lab $e (run $r of $runs)"
        "$bin" lab "$e" "${busy[@]}" --json-file "$out/$e-run$r.json" --plot "$out/$e-run$r.png" | tee "$out/$e-run$r.txt"
        load "$e run $r after"
    done
done

# The timer designs through the server: one granary per --timers mode, measured by one
# bench run (interleaved, same client) on GETATTR and 4 KiB random WRITE.
if [[ " ${experiments[*]} " == *" timers "* ]]; then
    pids=()
    targets=()
    port=22300
    for mode in global push pull; do
        port=$((port + 1))
        "$bin" serve --listen "127.0.0.1:$port" --no-portmap --timers "$mode" \
            >"$out/serve-$mode.log" 2>&1 &
        pids+=($!)
        targets+=(--target "$mode=nfs://127.0.0.1/?nfsport=$port&mountport=$port")
    done
    trap 'kill "${pids[@]}" 2>/dev/null' EXIT
    sleep 1
    settle
    load "timers-server before"
    "$bin" bench "${busy[@]}" "${targets[@]}" --workloads 'getattr,rand4k/write*' --repeats 3 \
        --no-limit --out "$out/timers-server" | tail -20
    load "timers-server after"
    kill "${pids[@]}"
    wait "${pids[@]}" 2>/dev/null || true
    trap - EXIT
fi
echo "results: $out"
