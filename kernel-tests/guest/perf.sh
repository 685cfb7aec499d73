#!/usr/bin/env bash
# Kernel-client performance run, INSIDE the vm.sh guest as root (kernel-tests/perf.sh
# boots it): granary (mem backend and host backend on a tmpfs), kernel nfsd (tmpfs) and
# nfs-ganesha (FSAL VFS on tmpfs), all
# NFSv3 over the guest's loopback, and granary (mem, host) and knfsd again through
# NFSv4.2 mounts (granary-v4, host-v4, knfsd-v4: each its own server and directory),
# mounted by the guest's kernel client, measured with the same fio jobs in the same boot.
#
# Method (the spread of one server over rounds is larger than the differences between
# servers, so only servers measured back to back are compared):
# - a warm-up round (PERF_WARMUP_SECS per job, default 2; 0: none) runs every job on
#   every server first and is discarded (first connections, page cache, slab growth);
# - then PERF_ROUNDS rounds; in each, every workload runs on every server back to back,
#   and the servers' order rotates by one each round (round r starts with the server
#   r-1 places down the list), so no server is always first or last after a workload
#   change;
# - perf_report.py divides granary's figure by each peer's in the same round and
#   workload (a paired ratio: the two jobs ran within seconds of each other) and reports
#   the median of these paired ratios with their min..max, beside each server's median.
# Env: KT_STAGE (staging dir; results go to $KT_STAGE/out), PERF_SECS (seconds per
#      job, default 4), PERF_ROUNDS (default 7), PERF_WARMUP_SECS (default 2),
#      PERF_SIZE (file size, default 128m), KT_ACCEL (the accelerator vm.sh used, for
#      the report), KT_META (JSON object with host facts for the report),
#      PERF_PLACEMENT (shared, the default: the scheduler places fio and the servers on
#      any vCPU; split: fio on vCPU 0 and every server's threads, knfsd's nfsd threads
#      included, on vCPU 1, as a client and a server on two machines would be).
set -u
KT_STAGE=${KT_STAGE:?KT_STAGE must name the staging directory}
# shellcheck source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
SECS=${PERF_SECS:-4}
ROUNDS=${PERF_ROUNDS:-7}
WARMUP_SECS=${PERF_WARMUP_SECS:-2}
SIZE=${PERF_SIZE:-128m}
PLACEMENT=${PERF_PLACEMENT:-shared}
RAW=/tmp/perf-raw
# granary (mem backend), host (granary's host backend on a guest tmpfs), knfsd and
# ganesha (both on a tmpfs), through NFSv3; granary-v4, host-v4 and knfsd-v4 the same
# through NFSv4.2; PERF_SERVERS picks some of them.
read -r -a SERVERS <<<"${PERF_SERVERS:-granary host knfsd ganesha granary-v4 host-v4 knfsd-v4}"
# The NFSv4.2 targets' granary servers (ports of their own, beside common.sh's).
GRANARY_V4_PERF_PORT=20511
HOST_V4_PERF_PORT=20512
# Each granary's metrics page (--metrics) listens on its port plus this.
METRICS_OFFSET=1000
# name rw bs iodepth: 4 KiB random at QD1 (psync) and QD16 (libaio), 1 MiB
# sequential at QD4 (libaio); all O_DIRECT, so that every I/O is an RPC.
WORKLOADS=(
    "randread-4k-qd1 randread 4k 1" "randread-4k-qd16 randread 4k 16"
    "randwrite-4k-qd1 randwrite 4k 1" "randwrite-4k-qd16 randwrite 4k 16"
    "seqread-1m-qd4 read 1m 4" "seqwrite-1m-qd4 write 1m 4"
)

fail() { echo "perf: FAIL: $*"; exit 1; }

# knfsd serves both knfsd (NFSv3) and knfsd-v4: started once.
KNFSD_UP=
knfsd_up() {
    [ -n "$KNFSD_UP" ] && return 0
    knfsd_start /export || fail "knfsd did not start"
    KNFSD_UP=1
}

start_one() { # SERVER
    case $1 in
        granary)
            granary_start "$GRANARY_PORT" none /tmp/granary.log --mem-capacity-bytes "$GRANARY_CAP_BYTES" \
                --metrics "127.0.0.1:$((GRANARY_PORT + METRICS_OFFSET))" || fail "granary did not start"
            $(granary_mount_cmd "$GRANARY_PORT" /mnt/granary) || fail "cannot mount granary" ;;
        host)
            mkdir -p /export-host && mount -t tmpfs -o size=3G tmpfs /export-host ||
                fail "cannot make the host export's tmpfs"
            granary_start "$HOST_PORT" none /tmp/granary-host.log /export-host \
                --state-dir /var/lib/granary-perf --metrics "127.0.0.1:$((HOST_PORT + METRICS_OFFSET))" || fail "granary (host backend) did not start"
            $(granary_mount_cmd "$HOST_PORT" /mnt/host) || fail "cannot mount granary's host export" ;;
        knfsd)
            knfsd_up
            $(knfsd_mount_cmd /export /mnt/knfsd) || fail "cannot mount knfsd" ;;
        ganesha)
            ganesha_start /ganesha-export || fail "nfs-ganesha did not start"
            $(ganesha_mount_cmd /mnt/ganesha) || fail "cannot mount nfs-ganesha" ;;
        granary-v4)
            granary_start "$GRANARY_V4_PERF_PORT" none /tmp/granary-v4.log --mem-capacity-bytes "$GRANARY_CAP_BYTES" \
                --metrics "127.0.0.1:$((GRANARY_V4_PERF_PORT + METRICS_OFFSET))" || fail "granary (v4) did not start"
            $(granary_v4_mount_cmd "$GRANARY_V4_PERF_PORT" /mnt/granary-v4) || fail "cannot mount granary with NFSv4.2" ;;
        host-v4)
            mkdir -p /export-host-v4 && mount -t tmpfs -o size=3G tmpfs /export-host-v4 ||
                fail "cannot make the host-v4 export's tmpfs"
            granary_start "$HOST_V4_PERF_PORT" none /tmp/granary-host-v4.log /export-host-v4 \
                --state-dir /var/lib/granary-perf-v4 --metrics "127.0.0.1:$((HOST_V4_PERF_PORT + METRICS_OFFSET))" || fail "granary (host backend, v4) did not start"
            $(granary_v4_mount_cmd "$HOST_V4_PERF_PORT" /mnt/host-v4) || fail "cannot mount granary's host export with NFSv4.2" ;;
        knfsd-v4)
            # knfsd's own export, a directory of its own in it, through NFSv4.2.
            knfsd_up
            mount -t nfs -o "vers=4.2,proto=tcp,port=$KNFSD_PORT,retry=0" 127.0.0.1:/export /mnt/knfsd-v4 ||
                fail "cannot mount knfsd with NFSv4.2"
            mkdir -p /mnt/knfsd-v4/v4 ;;
        *) fail "unknown server $1 (PERF_SERVERS: granary host knfsd ganesha granary-v4 host-v4 knfsd-v4)" ;;
    esac
}

start_all() {
    install_granary || fail "cannot install granary"
    mkdir -p "$RAW"
    local s
    for s in "${SERVERS[@]}"; do mkdir -p "/mnt/$s"; start_one "$s"; done
    [ "$PLACEMENT" = split ] && { place_split || fail "cannot place the servers on vCPU 1"; }
    grep -E ' /mnt/(granary|host|knfsd|ganesha)(-v4)? ' /proc/mounts | sed 's/^/    /'
}

# The test file of SERVER (knfsd-v4 shares knfsd's export: a directory of its own).
perf_file() {
    case $1 in
        knfsd-v4) echo /mnt/knfsd-v4/v4/perf.dat ;;
        *) echo "/mnt/$1/perf.dat" ;;
    esac
}

# lay_out SERVER: write the test file once, so that no timed job includes fio's layout
# (every job is O_DIRECT, so no client cache is warm afterwards either).
lay_out() {
    fio --name=layout --filename="$(perf_file "$1")" --size="$SIZE" --bs=1m --rw=write \
        --direct=1 --ioengine=psync --output-format=terse >/dev/null || fail "layout on $1"
}

run_job() { # SERVER ROUND NAME RW BS QD [SECS]
    local eng=libaio out=$RAW/$1-$3-r$2.json
    [ "$6" = 1 ] && eng=psync
    local pin=()
    [ "$PLACEMENT" = split ] && pin=(taskset -c 0)
    "${pin[@]}" fio --name="$3" --filename="$(perf_file "$1")" --size="$SIZE" --rw="$4" --bs="$5" \
        --iodepth="$6" --ioengine=$eng --direct=1 --time_based --runtime="${7:-$SECS}" \
        --ramp_time=1 --randrepeat=0 --output-format=json >"$out" 2>"$out.err" ||
        { echo "fio $1 $3 round $2 failed:"; cat "$out.err"; return 1; }
    python3 -S "$KT_GUEST/perf_report.py" --line "$out" "$1" "$3" "$2"
}

# one_round ROUND [SECS]: every workload on every server, back to back, the servers in
# the order rotated by ROUND-1 places (round 0, the warm-up, in the listed order).
one_round() {
    local r=$1 n=${#SERVERS[@]} w name rw bs qd i s
    local shift=$(( r > 0 ? (r - 1) % n : 0 ))
    for w in "${WORKLOADS[@]}"; do
        read -r name rw bs qd <<<"$w"
        for i in $(seq 0 $((n - 1))); do
            s=${SERVERS[$(( (i + shift) % n ))]}
            run_job "$s" "$r" "$name" "$rw" "$bs" "$qd" "${2:-}" || fail "fio $s $name"
        done
    done
}

# server_counters: for the log, the client's calls on each server's mount by operation
# (/proc/self/mountstats), and each granary's counters of where its calls ran, from its
# metrics page (NFSv4 READ and WRITE/COMMIT COMPOUNDs tried on a network worker:
# answered there or sent to the blocking pool; calls run on the blocking pools).
server_counters() {
    local s port
    for s in "${SERVERS[@]}"; do
        # The client's calls on this server's mount over the whole run, by operation
        # (a server whose replies make the client ask more shows here).
        awk -v m="/mnt/$s" '$1 == "device" { on = ($5 == m) }
            on && $1 ~ /^[A-Z_]+:$/ && $2 ~ /^[0-9]+$/ && $2 > 0 { printf " %s %s", tolower(substr($1, 1, length($1) - 1)), $2 }
            END { print "" }' /proc/self/mountstats | sed "s/^/    counters $s: client calls:/"
        case $s in
            granary) port=$GRANARY_PORT ;;
            host) port=$HOST_PORT ;;
            granary-v4) port=$GRANARY_V4_PERF_PORT ;;
            host-v4) port=$HOST_V4_PERF_PORT ;;
            *) continue ;;
        esac
        python3 -c 'import sys, urllib.request
print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())' \
            "http://127.0.0.1:$((port + METRICS_OFFSET))/metrics" 2>&1 |
            grep -E '^granary_(nfs4_worker_[a-z]+_total|blocking_pool_calls_total)' |
            sed "s/^/    counters $s: /"
    done
}

main() {
    local t0=${EPOCHREALTIME/./} s r w
    echo "perf: guest $(uname -r), $(nproc) vCPUs, accel ${KT_ACCEL:-?}, placement $PLACEMENT, $SECS s per job, $ROUNDS rounds (servers rotated), warm-up ${WARMUP_SECS} s per job, file $SIZE"
    start_all
    for s in "${SERVERS[@]}"; do lay_out "$s"; done
    if [ "$WARMUP_SECS" -gt 0 ]; then
        echo "perf: warm-up round (discarded)"
        one_round 0 "$WARMUP_SECS"
    fi
    for r in $(seq "$ROUNDS"); do one_round "$r"; done
    echo "perf: where granary's calls ran (metrics)"
    server_counters
    local w_names=()
    for w in "${WORKLOADS[@]}"; do w_names+=("${w%% *}"); done
    python3 "$KT_GUEST/perf_report.py" "$RAW" "$KT_STAGE/out" "${KT_ACCEL:-unknown}" "$SECS" "$ROUNDS" "$SIZE" \
        "${KT_META:-"{}"}" "${SERVERS[*]}" "${w_names[*]}" "$WARMUP_SECS" || fail "report"
    for s in "${SERVERS[@]}"; do umount "/mnt/$s"; done
    stop_started
    [ -f /tmp/ganesha/ganesha.pid ] && kill "$(cat /tmp/ganesha/ganesha.pid)" 2>/dev/null
    echo "perf: done in $(( (${EPOCHREALTIME/./} - t0) / 1000000 )) s"
}

main
