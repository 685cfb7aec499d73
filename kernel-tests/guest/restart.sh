#!/usr/bin/env bash
# restart.sh stop|start PORT: for the restart group of check.sh (as KT_RESTART), kill -9
# the granary serving PORT, or start it again with the same arguments and state directory.
set -u
# Not in the check's cwd (on the mount): the new server must not hold the mount busy.
cd / || exit 1
# shellcheck source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
case ${1:-} in
stop) granary_kill "$2" ;;
start) granary_again "$2" >/dev/null ;;
*) echo "usage: restart.sh stop|start PORT"; exit 2 ;;
esac
