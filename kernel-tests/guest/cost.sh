#!/usr/bin/env bash
# What one NFS call costs the guest, INSIDE the vm.sh guest as root (kernel-tests/cost.sh
# boots it): granary (mem), granary's host backend on a tmpfs and knfsd, all mounted with
# NFSv4.2 (granary with --metrics, as perf.sh runs it), each driven by the same fio job;
# per call of the job (from the client's own counts in /proc/self/mountstats): the
# guest's busy CPU time (all vCPUs, /proc/stat: client, server and kernel together, fio's
# start and end included), the server's own CPU time (granary's threads, or knfsd's nfsd
# threads) and its user part, its context switches and wakeups, the guest's rescheduling
# IPIs, and, in a second pass under strace, granary's system calls by name. Times are guest time, which under TCG stretches with the host's
# load; counts (syscalls, switches) do not, and the servers are measured back to back.
# Env: KT_STAGE, KT_COST_SECS (seconds per job, default 5), KT_COST_SERVERS (default
#      "granary-v4 granary-v4u host-v4 knfsd-v4"; granary-v4u is granary-v4 with its
#      threads unpinned after it started; base-v4 and base-host-v4 are granary-v4 and
#      host-v4 of the binary kernel-tests/cost.sh stages from KT_COST_BASE_BIN), KT_COST_JOBS (default "randread:1 randwrite:1
#      randread:16"), KT_COST_PASSES (default 2), KT_COST_STRACE (default 1: the strace
#      pass for granary's servers), KT_COST_PLACEMENT (shared, the default; split: fio on
#      vCPU 0, every server's threads on vCPU 1, as perf.sh's PERF_PLACEMENT=split).
set -u
KT_STAGE=${KT_STAGE:?KT_STAGE must name the staging directory}
# shellcheck source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
SECS=${KT_COST_SECS:-5}
read -r -a SERVERS <<<"${KT_COST_SERVERS:-granary-v4 granary-v4u host-v4 knfsd-v4}"
read -r -a JOBS <<<"${KT_COST_JOBS:-randread:1 randwrite:1 randread:16}"
G_PORT=20511
H_PORT=20512
U_PORT=20513
BG_PORT=20514   # base-v4: granary-v4 of the base binary (kernel-tests/cost.sh KT_COST_BASE_BIN)
BH_PORT=20515   # base-host-v4: host-v4 of the base binary
GRANARY_BASE=/usr/local/bin/granary-base
SIZE=64m
PLACEMENT=${KT_COST_PLACEMENT:-shared}
PIN=()
[ "$PLACEMENT" = split ] && PIN=(taskset -c 0)

fail() { echo "cost: FAIL: $*"; exit 1; }

start_one() {
    case $1 in
        granary-v4)
            granary_start "$G_PORT" none /tmp/granary-v4.log --mem-capacity-bytes "$GRANARY_CAP_BYTES" --metrics "127.0.0.1:$((G_PORT + 1000))" || fail "granary"
            $(granary_v4_mount_cmd "$G_PORT" /mnt/granary-v4) || fail "mount granary-v4" ;;
        host-v4)
            mkdir -p /export-host-v4 && mount -t tmpfs -o size=1G tmpfs /export-host-v4 || fail "tmpfs"
            granary_start "$H_PORT" none /tmp/granary-host-v4.log /export-host-v4 --state-dir /var/lib/granary-cost --metrics "127.0.0.1:$((H_PORT + 1000))" || fail "host"
            $(granary_v4_mount_cmd "$H_PORT" /mnt/host-v4) || fail "mount host-v4" ;;
        granary-v4u)
            # granary (mem) with its threads' CPU affinity reset to every vCPU after it
            # pinned its workers (taskset -a): the scheduler places them.
            granary_start "$U_PORT" none /tmp/granary-v4u.log --mem-capacity-bytes "$GRANARY_CAP_BYTES" --metrics "127.0.0.1:$((U_PORT + 1000))" || fail "granary"
            taskset -a -p "$(( (1 << $(nproc)) - 1 ))" "$(cat /tmp/granary-$U_PORT.pid)" >/dev/null || fail "taskset"
            $(granary_v4_mount_cmd "$U_PORT" /mnt/granary-v4u) || fail "mount granary-v4u" ;;
        base-v4)
            GRANARY=$GRANARY_BASE granary_start "$BG_PORT" none /tmp/base-v4.log --mem-capacity-bytes "$GRANARY_CAP_BYTES" --metrics "127.0.0.1:$((BG_PORT + 1000))" || fail "base granary"
            $(granary_v4_mount_cmd "$BG_PORT" /mnt/base-v4) || fail "mount base-v4" ;;
        base-host-v4)
            mkdir -p /export-base-host-v4 && mount -t tmpfs -o size=1G tmpfs /export-base-host-v4 || fail "tmpfs"
            GRANARY=$GRANARY_BASE granary_start "$BH_PORT" none /tmp/base-host-v4.log /export-base-host-v4 --state-dir /var/lib/granary-cost-base --metrics "127.0.0.1:$((BH_PORT + 1000))" || fail "base host"
            $(granary_v4_mount_cmd "$BH_PORT" /mnt/base-host-v4) || fail "mount base-host-v4" ;;
        knfsd-v4)
            knfsd_start /export || fail "knfsd"
            mount -t nfs -o "vers=4.2,proto=tcp,port=$KNFSD_PORT,retry=0" 127.0.0.1:/export /mnt/knfsd-v4 || fail "mount knfsd-v4" ;;
    esac
}

# The server's threads: granary's by its pid file, knfsd's kernel threads by name.
server_tids() {
    case $1 in
        granary-v4) ls "/proc/$(cat /tmp/granary-$G_PORT.pid)/task" ;;
        host-v4) ls "/proc/$(cat /tmp/granary-$H_PORT.pid)/task" ;;
        granary-v4u) ls "/proc/$(cat /tmp/granary-$U_PORT.pid)/task" ;;
        base-v4) ls "/proc/$(cat /tmp/granary-$BG_PORT.pid)/task" ;;
        base-host-v4) ls "/proc/$(cat /tmp/granary-$BH_PORT.pid)/task" ;;
        knfsd-v4) pgrep -x nfsd ;;
    esac
}
server_pid() {
    case $1 in
        granary-v4) cat /tmp/granary-$G_PORT.pid ;;
        host-v4) cat /tmp/granary-$H_PORT.pid ;;
        granary-v4u) cat /tmp/granary-$U_PORT.pid ;;
        base-v4) cat /tmp/granary-$BG_PORT.pid ;;
        base-host-v4) cat /tmp/granary-$BH_PORT.pid ;;
    esac
}

# the server's threads: "utime+stime voluntary nonvoluntary wakeups-local wakeups-remote
# migrations" (the last three from /proc/.../sched with kernel.sched_schedstats on)
server_usage() {
    local s=$1 pid t dir
    pid=$(server_pid "$s")
    for t in $(server_tids "$s"); do
        dir=/proc/$t
        [ -n "$pid" ] && dir=/proc/$pid/task/$t
        [ -r "$dir/stat" ] || continue
        awk '{ print "cpu", $14 + $15; print "usr", $14 }' "$dir/stat"
        awk '/^voluntary_ctxt_switches/ { print "vol", $2 } /^nonvoluntary_ctxt_switches/ { print "inv", $2 }' "$dir/status"
        awk '/nr_wakeups_local/ { print "wl", $3 } /nr_wakeups_remote/ { print "wr", $3 } /nr_migrations/ { print "mig", $3 }' "$dir/sched" 2>/dev/null
    done | awk '{ t[$1] += $2 } END { printf "%d %d %d %d %d %d %d\n", t["cpu"], t["vol"], t["inv"], t["wl"], t["wr"], t["mig"], t["usr"] }'
}

# busy ticks of the whole guest (user nice system irq softirq steal)
guest_busy() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat; }

# rescheduling IPIs of all vCPUs (a wakeup of a thread on another vCPU)
resched_ipis() { awk '$1 == "RES:" { n = 0; for (i = 2; i <= NF; i++) if ($i ~ /^[0-9]+$/) n += $i; print n }' /proc/interrupts; }

# calls the client made on MNT of operation OP (READ or WRITE)
client_calls() {
    awk -v m="$1" -v op="$2:" '$1 == "device" { on = ($5 == m) } on && $1 == op { print $2; exit }' /proc/self/mountstats
}

file_of() { [ "$1" = knfsd-v4 ] && echo /mnt/knfsd-v4/cost.dat || echo "/mnt/$1/cost.dat"; }

fio_job() { # SERVER RW QD SECS
    local eng=libaio
    [ "$3" = 1 ] && eng=psync
    "${PIN[@]}" fio --name=cost --filename="$(file_of "$1")" --size=$SIZE --rw="$2" --bs=4k --iodepth="$3" \
        --ioengine=$eng --direct=1 --time_based --runtime="$4" --randrepeat=0 \
        --output-format=terse --terse-version=3 2>/dev/null |
        awk -F';' -v rw="$2" '{ print (rw == "randread" ? $8 : $49) }'
}

measure() { # SERVER RW QD
    local s=$1 rw=$2 qd=$3 op=READ hz c0 c1 b0 b1 iops a b i0 i1
    [ "$rw" = randwrite ] && op=WRITE
    hz=$(getconf CLK_TCK)
    c0=$(client_calls "/mnt/$s" $op); b0=$(guest_busy); a=$(server_usage "$s"); i0=$(resched_ipis)
    iops=$(fio_job "$s" "$rw" "$qd" "$SECS")
    c1=$(client_calls "/mnt/$s" $op); b1=$(guest_busy); b=$(server_usage "$s"); i1=$(resched_ipis)
    awk -v s="$s" -v job="$rw-4k-qd$qd" -v calls=$((c1 - c0)) -v busy=$((b1 - b0)) \
        -v a="$a" -v b="$b" -v hz="$hz" -v iops="$iops" -v ipi=$((i1 - i0)) 'BEGIN {
        split(a, x, " "); split(b, y, " ")
        if (calls == 0) calls = 1
        printf "  %-11s %-17s %6d IOPS %7d calls  guest busy %7.1f us/call  server cpu %7.1f us/call (user %6.1f)  per call: switches %.2f vol %.2f invol, wakeups %.2f local %.2f remote, migrations %.2f; guest resched IPIs %.2f\n",
            s, job, iops, calls, busy * 1e6 / hz / calls, (y[1] - x[1]) * 1e6 / hz / calls, (y[7] - x[7]) * 1e6 / hz / calls,
            (y[2] - x[2]) / calls, (y[3] - x[3]) / calls, (y[4] - x[4]) / calls, (y[5] - x[5]) / calls, (y[6] - x[6]) / calls, ipi / calls }'
}

strace_pass() { # SERVER RW QD
    local s=$1 rw=$2 qd=$3 op=READ pid c0 c1 out=/tmp/strace-$1-$2-$3.txt
    [ "$rw" = randwrite ] && op=WRITE
    pid=$(server_pid "$s")
    strace -c -f -q -p "$pid" -o "$out" &
    local st=$!
    sleep 1
    c0=$(client_calls "/mnt/$s" $op)
    fio_job "$s" "$rw" "$qd" "$SECS" >/dev/null
    c1=$(client_calls "/mnt/$s" $op)
    kill -INT "$st"; wait "$st" 2>/dev/null
    echo "  $s $rw-4k-qd$qd under strace: $((c1 - c0)) calls; syscalls per call:"
    awk -v calls=$((c1 - c0)) 'NF >= 5 && $1 ~ /^[0-9.]+$/ {
        printf "    %-22s %6.2f%s\n", $NF, $4 / calls, (NF == 6 ? "  (" $5 " errors)" : "") }' "$out"
}

main() {
    echo "cost: guest $(uname -r), $(nproc) vCPUs, clocksource $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource), placement $PLACEMENT, $SECS s per job"
    install_granary || fail "install"
    if [ -x "$KT_STAGE/granary-base" ]; then
        install -m 755 "$KT_STAGE/granary-base" "$GRANARY_BASE" || fail "install the base binary"
    fi
    sysctl -qw kernel.sched_schedstats=1 || echo "cost: no schedstats (wakeup counts will read 0)"
    local s j rw qd
    for s in "${SERVERS[@]}"; do mkdir -p "/mnt/$s"; start_one "$s"; done
    [ "$PLACEMENT" = split ] && { place_split || fail "cannot place the servers on vCPU 1"; }
    for s in "${SERVERS[@]}"; do
        fio --name=layout --filename="$(file_of "$s")" --size=$SIZE --bs=1m --rw=write --direct=1 \
            --ioengine=psync --output-format=terse >/dev/null || fail "layout $s"
        # warm: first connections, page cache
        fio_job "$s" randread 1 1 >/dev/null
    done
    echo "cost: per call (busy: the whole guest; server: its threads)"
    local pass
    for pass in $(seq "${KT_COST_PASSES:-2}"); do
        echo "cost: pass $pass"
        for j in "${JOBS[@]}"; do
            rw=${j%%:*}; qd=${j##*:}
            for s in "${SERVERS[@]}"; do measure "$s" "$rw" "$qd"; done
        done
    done
    if [ "${KT_COST_STRACE:-1}" = 1 ]; then
        for j in "${JOBS[@]}"; do
            rw=${j%%:*}; qd=${j##*:}
            for s in "${SERVERS[@]}"; do
                [ "$s" = knfsd-v4 ] || strace_pass "$s" "$rw" "$qd"
            done
        done
    fi
    for s in "${SERVERS[@]}"; do umount "/mnt/$s"; done
    stop_started
}

main
