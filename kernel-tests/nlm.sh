#!/usr/bin/env bash
# NLM/NSM with the Linux kernel client: boots the guest once and runs guest/nlm.sh
# (v3 mounts without nolock against granary in a network namespace with its own rpcbind;
# fcntl exclusion between two v3 mounts, across NFSv3 and NFSv4.2, a blocked waiter
# granted, a killed holder's lock released; then two heads of an object export, each in
# a namespace of its own, whose locks exclude each other). KT_GRANARY_BIN=PATH tests that
# binary; KT_NLM_HEADS=0 leaves the heads out.
# Exit 0 only if every check passed.
set -euo pipefail
# shellcheck source=host-lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/host-lib.sh"
export KT_CHECKS='^nlm$' # no erofs images to make
kt_prepare
# The two object heads' part (KT_NLM_HEADS=0 leaves it out) needs PostgreSQL and S3 on
# the host, started while the guest boots.
[ "${KT_NLM_HEADS:-1}" = 0 ] || KT_OBJECT_GROUPS=nlm kt_object_start
trap 'kt_object_stop; rm -rf "$KT_STAGE"' EXIT
kt_boot "${KT_TIMEOUT:-900}" nlm.sh
