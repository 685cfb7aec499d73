#!/usr/bin/env bash
# The kernel-client suite: granary mounted by the Linux NFSv3 client in a Debian guest
# (kernel-tests/vm/vm.sh), side by side with kernel nfsd on a tmpfs in the same boot.
#
#   kernel-tests/run.sh                       # build, boot, run every check on both
#   KT_CHECKS='^posix-' kernel-tests/run.sh   # only the checks whose names match
#   KT_TARGETS=granary kernel-tests/run.sh    # only granary (knfsd is the reference)
#   KT_KEEP=1 ...                             # keep the staging dir (outputs per check)
#   KT_GRANARY_BIN=path/to/granary ...        # test that binary instead of building one
#
# Exit 0 when every check passed on every server; 1 when one failed or the guest could
# not be built or booted (it never skips). See kernel-tests/README.md.
set -euo pipefail
# shellcheck source=host-lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/host-lib.sh"

start=$(date +%s)
kt_prepare
cleanup() {
    kt_object_stop
    if [ "${KT_KEEP:-0}" = 1 ]; then echo "kernel-tests: outputs kept in $KT_STAGE" >&2; else rm -rf "$KT_STAGE"; fi
}
trap cleanup EXIT
kt_stage_pjdfstest
kt_object_start
rc=0
kt_boot "${KT_TIMEOUT:-2400}" suite.sh || rc=$?
kt_log "kernel-client suite: exit $rc in $(( $(date +%s) - start )) s"
[ "$rc" = 0 ] || [ "${KT_KEEP:-0}" = 1 ] || echo "kernel-tests: rerun with KT_KEEP=1 to keep every check's output" >&2
exit "$rc"
