#!/usr/bin/env bash
# What one NFSv4.2 call of the Linux client costs granary (mem, host) and knfsd in the
# vm.sh guest: per call, the guest's busy CPU time, the server's own CPU time and
# context switches, and granary's system calls by name (guest/cost.sh). Counts do not
# depend on the host's load; times do (TCG), so compare servers of one run only.
#
#   kernel-tests/cost.sh                          # prints the table; the log in $KT_STAGE
#   KT_GRANARY_BIN=path kernel-tests/cost.sh      # a prebuilt binary
#   KT_COST_BASE_BIN=old KT_COST_SERVERS="base-v4 granary-v4 base-host-v4 host-v4 knfsd-v4" \
#     kernel-tests/cost.sh                        # the build against another, paired
#   KT_COST_SECS=5 KT_COST_SERVERS="granary-v4 host-v4 knfsd-v4" \
#     KT_COST_JOBS="randread:1 randwrite:1 randread:16" KT_COST_STRACE=1 kernel-tests/cost.sh
#   KT_COST_PLACEMENT=split kernel-tests/cost.sh  # fio on vCPU 0, the servers on vCPU 1
#
# Not part of scripts/test-all.sh. 10-20 minutes under TCG at load 8-11 (five servers,
# four jobs, two passes and the strace pass); KT_TIMEOUT bounds the guest (default 2400 s).
set -euo pipefail
# shellcheck source=host-lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/host-lib.sh"

# No group of the suite runs: kt_prepare then skips the erofs and pjdfstest staging.
export KT_CHECKS=cost
kt_prepare
trap 'rm -rf "$KT_STAGE"' EXIT
if [ -n "${KT_COST_BASE_BIN:-}" ]; then
    # A second binary to compare with, in the same boot (servers base-v4, base-host-v4).
    cp "$KT_COST_BASE_BIN" "$KT_STAGE/granary-base" || kt_die "no binary at $KT_COST_BASE_BIN"
fi
echo "host load before: $(cut -d' ' -f1-3 /proc/loadavg)"
kt_boot "${KT_TIMEOUT:-2400}" cost.sh
echo "host load after: $(cut -d' ' -f1-3 /proc/loadavg)"
