#!/usr/bin/env bash
# Kernel-client performance run, INSIDE the vm.sh guest as root (kernel-tests/perf.sh
# boots it): granary (mem backend and host backend on a tmpfs), kernel nfsd (tmpfs) and
# nfs-ganesha (FSAL VFS on tmpfs), all
# NFSv3 over the guest's loopback, and granary (mem, host) and knfsd again through
# NFSv4.2 mounts (granary-v4, host-v4, knfsd-v4: each its own server and directory),
# mounted by the guest's kernel client, measured
# with the same fio jobs in the same boot, in interleaved rounds (round 1: every
# workload on every server, then round 2, ...), so that the host's load drifts over
# all of them alike.
# Env: KT_STAGE (staging dir; results go to $KT_STAGE/out), PERF_SECS (seconds per
#      job, default 8), PERF_ROUNDS (default 3), PERF_SIZE (file size, default 128m),
#      KT_ACCEL (the accelerator vm.sh used, for the report), KT_META (JSON object
#      with host facts for the report).
set -u
KT_STAGE=${KT_STAGE:?KT_STAGE must name the staging directory}
# shellcheck source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
SECS=${PERF_SECS:-8}
ROUNDS=${PERF_ROUNDS:-3}
SIZE=${PERF_SIZE:-128m}
RAW=/tmp/perf-raw
# granary (mem backend), host (granary's host backend on a guest tmpfs), knfsd and
# ganesha (both on a tmpfs), through NFSv3; granary-v4, host-v4 and knfsd-v4 the same
# through NFSv4.2; PERF_SERVERS picks some of them.
read -r -a SERVERS <<<"${PERF_SERVERS:-granary host knfsd ganesha granary-v4 host-v4 knfsd-v4}"
# The NFSv4.2 targets' granary servers (ports of their own, beside common.sh's).
GRANARY_V4_PERF_PORT=20511
HOST_V4_PERF_PORT=20512
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
            granary_start "$GRANARY_PORT" none /tmp/granary.log || fail "granary did not start"
            $(granary_mount_cmd "$GRANARY_PORT" /mnt/granary) || fail "cannot mount granary" ;;
        host)
            mkdir -p /export-host && mount -t tmpfs -o size=3G tmpfs /export-host ||
                fail "cannot make the host export's tmpfs"
            granary_start "$HOST_PORT" none /tmp/granary-host.log /export-host \
                --state-dir /var/lib/granary-perf || fail "granary (host backend) did not start"
            $(granary_mount_cmd "$HOST_PORT" /mnt/host) || fail "cannot mount granary's host export" ;;
        knfsd)
            knfsd_up
            $(knfsd_mount_cmd /export /mnt/knfsd) || fail "cannot mount knfsd" ;;
        ganesha)
            ganesha_start /ganesha-export || fail "nfs-ganesha did not start"
            $(ganesha_mount_cmd /mnt/ganesha) || fail "cannot mount nfs-ganesha" ;;
        granary-v4)
            granary_start "$GRANARY_V4_PERF_PORT" none /tmp/granary-v4.log || fail "granary (v4) did not start"
            $(granary_v4_mount_cmd "$GRANARY_V4_PERF_PORT" /mnt/granary-v4) || fail "cannot mount granary with NFSv4.2" ;;
        host-v4)
            mkdir -p /export-host-v4 && mount -t tmpfs -o size=3G tmpfs /export-host-v4 ||
                fail "cannot make the host-v4 export's tmpfs"
            granary_start "$HOST_V4_PERF_PORT" none /tmp/granary-host-v4.log /export-host-v4 \
                --state-dir /var/lib/granary-perf-v4 || fail "granary (host backend, v4) did not start"
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

run_job() { # SERVER ROUND NAME RW BS QD
    local eng=libaio out=$RAW/$1-$3-r$2.json
    [ "$6" = 1 ] && eng=psync
    fio --name="$3" --filename="$(perf_file "$1")" --size="$SIZE" --rw="$4" --bs="$5" \
        --iodepth="$6" --ioengine=$eng --direct=1 --time_based --runtime="$SECS" \
        --ramp_time=1 --randrepeat=0 --output-format=json >"$out" 2>"$out.err" ||
        { echo "fio $1 $3 round $2 failed:"; cat "$out.err"; return 1; }
    python3 -S "$KT_GUEST/perf_report.py" --line "$out" "$1" "$3" "$2"
}

main() {
    local t0=${EPOCHREALTIME/./} s r w name rw bs qd
    echo "perf: guest $(uname -r), $(nproc) vCPUs, accel ${KT_ACCEL:-?}, $SECS s per job, $ROUNDS rounds, file $SIZE"
    start_all
    for s in "${SERVERS[@]}"; do lay_out "$s"; done
    for r in $(seq "$ROUNDS"); do
        for w in "${WORKLOADS[@]}"; do
            read -r name rw bs qd <<<"$w"
            for s in "${SERVERS[@]}"; do run_job "$s" "$r" "$name" "$rw" "$bs" "$qd" || fail "fio $s $name"; done
        done
    done
    local w_names=()
    for w in "${WORKLOADS[@]}"; do w_names+=("${w%% *}"); done
    python3 "$KT_GUEST/perf_report.py" "$RAW" "$KT_STAGE/out" "${KT_ACCEL:-unknown}" "$SECS" "$ROUNDS" "$SIZE" \
        "${KT_META:-"{}"}" "${SERVERS[*]}" "${w_names[*]}" || fail "report"
    for s in "${SERVERS[@]}"; do umount "/mnt/$s"; done
    stop_started
    [ -f /tmp/ganesha/ganesha.pid ] && kill "$(cat /tmp/ganesha/ganesha.pid)" 2>/dev/null
    echo "perf: done in $(( (${EPOCHREALTIME/./} - t0) / 1000000 )) s"
}

main
