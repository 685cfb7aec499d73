#!/usr/bin/env bash
# Kernel-client performance: fio 4 KiB random read/write at iodepth 1 and 16 and 1 MiB
# sequential read/write, through the Linux NFS client in the vm.sh guest, against
# granary (mem backend, and host backend on a guest tmpfs), kernel nfsd (tmpfs) and
# nfs-ganesha (FSAL VFS on tmpfs) through NFSv3, and granary (mem, host) and knfsd
# through NFSv4.2 (granary-v4, host-v4, knfsd-v4), in the same boot.
#
#   kernel-tests/perf.sh                  # writes bench/results/<date>-kernel-fio/
#   PERF_SERVERS="host knfsd" kernel-tests/perf.sh   # some of granary host knfsd ganesha granary-v4 host-v4 knfsd-v4
#   PERF_SECS=4 PERF_ROUNDS=7 PERF_WARMUP_SECS=2 PERF_SIZE=128m kernel-tests/perf.sh  # the defaults
#   KT_GRANARY_BIN=path KT_GRANARY_COMMIT=abc1234 kernel-tests/perf.sh   # a prebuilt binary
#   PERF_DEST=bench/results/NAME kernel-tests/perf.sh    # another results directory
#   KT_CPUS=1 kernel-tests/perf.sh        # a guest of one vCPU (default 2)
#   PERF_PLACEMENT=split kernel-tests/perf.sh   # fio on vCPU 0, every server on vCPU 1
#
# Method (guest/perf.sh): a discarded warm-up round, then PERF_ROUNDS short rounds, each
# running every workload on every server back to back with the servers' order rotated by
# one per round; the ratios are paired (granary over a peer in the same round and
# workload), reported as the median of the per-round ratios with their min..max. A
# server's own figures swing by 2-3x between rounds under a loaded host, more than the
# servers differ, so a ratio of medians taken minutes apart says little.
#
# Results: results.json (every round, medians, spreads, paired ratios), README.md (the
# table) and rounds.txt (every job's line, and where granary's calls ran), marked with
# the accelerator vm.sh used. Under TCG (software emulation) only the ratios between
# servers mean anything. Not part of scripts/test-all.sh.
set -euo pipefail
# shellcheck source=host-lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/host-lib.sh"

# The accelerator, decided as vm.sh's --accel auto does (checked against its log below).
accel=${VM_ACCEL:-auto}
if [ "$accel" = auto ]; then
    if [ -w /dev/kvm ] && grep -qw -E 'vmx|svm' /proc/cpuinfo; then accel=kvm; else accel=tcg; fi
fi
dest=${PERF_DEST:-$REPO/bench/results/$(date +%F)-kernel-fio}
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
commit=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)
git -C "$REPO" diff --quiet HEAD -- 2>/dev/null || commit="$commit (with uncommitted changes)"
[ -z "${KT_GRANARY_BIN:-}" ] || commit="${KT_GRANARY_COMMIT:-unknown: prebuilt binary $KT_GRANARY_BIN}"

kt_prepare
trap 'rm -rf "$KT_STAGE"' EXIT
meta=$(printf '{"date": "%s", "granary commit": "%s", "host": "%s, %s cores", "host load (1/5/15 min) before": "%s", "guest": "%s vCPUs, %s memory", "placement": "%s"}' \
    "$(date -u +%FT%TZ)" "$commit" "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')" \
    "$(nproc)" "$load_before" "${KT_CPUS:-2}" "${KT_MEM:-4G}" "${PERF_PLACEMENT:-shared}")
export KT_ACCEL=$accel KT_META=$meta PERF_SECS=${PERF_SECS:-4} PERF_ROUNDS=${PERF_ROUNDS:-7} \
    PERF_WARMUP_SECS=${PERF_WARMUP_SECS:-2} PERF_SIZE=${PERF_SIZE:-128m}
rc=0
kt_boot "${KT_TIMEOUT:-1800}" perf.sh || rc=$?
[ "$rc" = 0 ] || kt_die "the performance run failed (exit $rc)"
grep -q "(accel $accel)" "$KT_STAGE/log" || kt_die "vm.sh did not report accel $accel; results not kept"
mkdir -p "$dest"
cp "$KT_STAGE/out/results.json" "$KT_STAGE/out/README.md" "$dest/"
grep -E '^  (granary|host|knfsd|ganesha)(-v4)? |^    counters ' "$KT_STAGE/log" >"$dest/rounds.txt" || true
printf '\nHost load (1/5/15 min) after: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$dest/README.md"
echo "kernel-tests/perf.sh: results in $dest"
