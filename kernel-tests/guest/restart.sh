#!/usr/bin/env bash
# restart.sh [--knfsd] stop|term|start PORT: for the restart group of check.sh (as
# KT_RESTART). granary: kill -9 (stop) or SIGTERM (term) the granary serving PORT, and
# wait until it is gone; or start it again with the same arguments and state directory.
# --knfsd: stop (either way) and start the kernel's nfsd, whose v4 clients then reclaim
# during its grace period (10 s, as knfsd_start sets it); PORT is ignored.
set -u
# Not in the check's cwd (on the mount): the new server must not hold the mount busy.
# The caller (check.sh's restart_server) also unsets OLDPWD: bash stats it as it starts,
# before this line could help.
cd / || exit 1
unset OLDPWD
# shellcheck source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
if [ "${1:-}" = --knfsd ]; then
    case ${2:-} in
    stop | term) rpc.nfsd 0 ;;
    start) rpc.nfsd --grace-time 10 --lease-time 10 4 ;;
    *) echo "usage: restart.sh --knfsd stop|term|start PORT"; exit 2 ;;
    esac
    exit
fi
# From the stop (or term) to the end of the start, /tmp/granary-PORT.restarting tells the
# other contexts' liveness checks (suite.sh alive) that this granary is down on purpose:
# the restart group runs its contexts at once.
case ${1:-} in
stop) touch "/tmp/granary-$2.restarting" && granary_kill "$2" ;;
term) touch "/tmp/granary-$2.restarting" && granary_kill "$2" TERM ;;
start)
    # KT_RESTART_WIPE=1 proves that the group can fail: the state directory (handle key,
    # handle indexes, NFSv4 client records) is wiped before the start, so the client's
    # handles and state mean nothing to the new server.
    if [ "${KT_RESTART_WIPE:-0}" = 1 ]; then
        state=$(sed -n 's/.*--state-dir \([^ ]*\).*/\1/p' "/tmp/granary-$2.args")
        [ -n "$state" ] && rm -rf "$state" && echo "note: restart.sh wiped $state (KT_RESTART_WIPE=1)"
    fi
    granary_again "$2" >/dev/null
    rc=$?
    rm -f "/tmp/granary-$2.restarting"
    exit "$rc" ;;
*) echo "usage: restart.sh [--knfsd] stop|term|start PORT"; exit 2 ;;
esac
