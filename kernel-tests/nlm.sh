#!/usr/bin/env bash
# NLM/NSM with the Linux kernel client: boots the guest once and runs guest/nlm.sh
# (v3 mounts without nolock against granary in a network namespace with its own rpcbind;
# fcntl exclusion between two v3 mounts, across NFSv3 and NFSv4.2, a blocked waiter
# granted, a killed holder's lock released). KT_GRANARY_BIN=PATH tests that binary.
# Exit 0 only if every check passed.
set -euo pipefail
# shellcheck source=host-lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/host-lib.sh"
export KT_CHECKS='^nlm$' # no erofs images to make
kt_prepare
trap 'rm -rf "$KT_STAGE"' EXIT
kt_boot "${KT_TIMEOUT:-900}" nlm.sh
