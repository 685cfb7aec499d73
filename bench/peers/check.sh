#!/usr/bin/env bash
# Proves a running peer answers a real client (libnfs-utils):
#   check.sh URL [MIB]    nfs-ls the export, copy MIB MiB (default 1) of random bytes in
#                         with nfs-cp and back out, compare them, list the file
# (ganesha's FSAL MEM keeps only 2 MiB of a file: more fails there, as it should.)
# URL is what `PEER.sh start` printed. Exit 0 only when every step worked.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

url=${1:?usage: check.sh URL [MIB]}
mib=${2:-1}
for t in nfs-ls nfs-cp; do command -v $t >/dev/null || die "no $t: apt-get install libnfs-utils"; done
base=${url%%\?*}
query=${url#"$base"}
base=${base%/}
file=check-$$.bin
tmp=$(mktemp -d /tmp/granary-peer-check.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

head -c $((mib << 20)) /dev/urandom >"$tmp/in"
nfs-ls "$url" >/dev/null || die "nfs-ls $url failed"
nfs-cp "$tmp/in" "$base/$file$query" || die "nfs-cp into the export failed"
nfs-cp "$base/$file$query" "$tmp/out" || die "nfs-cp out of the export failed"
cmp -s "$tmp/in" "$tmp/out" || die "the $mib MiB read back differ from those written"
nfs-ls "$url" | grep -qF "$file" || die "nfs-ls does not list $file"
echo "ok: nfs-ls lists $file; $mib MiB written and read back equal ($file left in the export)"
