#!/usr/bin/env bash
# erofs-images.sh DIR: on the HOST (as root), a small tree of every kind and two EROFS
# images of it for the guest's erofs group (guest/check.sh grp_erofs): DIR/plain.erofs
# (uncompressed, mkfs.erofs defaults) and DIR/lz4.erofs (-zlz4hc, big pclusters, tail
# packing). The tree: files of 0 B to 1 MiB + 1 compressible and not, a sparse file, modes
# with set-id and sticky bits, several owners, hard links, relative, absolute, dangling and
# 3,000-byte symlinks, a FIFO and device nodes, and a 10,000-entry directory.
# Needs erofs-utils (mkfs.erofs); a failure is fatal for the suite.
set -euo pipefail
out=${1:?usage: erofs-images.sh DIR}
command -v mkfs.erofs >/dev/null || { echo "mkfs.erofs not found: apt-get install erofs-utils" >&2; exit 1; }
src=$out/tree
rm -rf "$out"
mkdir -p "$src/sub/deeper" "$src/big" "$src/sticky"
noise() { head -c "$1" /dev/urandom; }
text() { yes "granary erofs kernel client $2" | head -c "$1" || true; }
for n in 0 1 4095 4096 4097 65537 1048577; do
    text "$n" "$n" >"$src/text-$n"
    noise "$n" >"$src/noise-$n"
done
{ text 300000 a; noise 200000; head -c 150000 /dev/zero; text 123457 b; } >"$src/sub/mixed"
truncate -s 3M "$src/sparse"
printf 'middle' | dd of="$src/sparse" bs=1 seek=$((1 << 20)) conv=notrunc status=none
chmod 0600 "$src/text-1"; chmod 4755 "$src/text-4095"; chmod 2755 "$src/text-4096"
chmod 2745 "$src/noise-4097"; chmod 0444 "$src/sub/mixed"; chmod 1777 "$src/sticky"
chmod 0700 "$src/sub/deeper"
chown 1000:1000 "$src/text-4097"; chown 65534:65534 "$src/noise-1"; chown 1234:5678 "$src/sub"
ln "$src/text-65537" "$src/sub/hardlink"
ln -s text-4095 "$src/link"
ln -s /etc/hostname "$src/absolute"
ln -s does-not-exist "$src/dangling"
ln -s "$(printf 'x%.0s' $(seq 3000))" "$src/sub/longlink"
ln -s ../../text-1 "$src/sub/deeper/up"
mkfifo "$src/fifo"
mknod "$src/chr" c 1 3
mknod "$src/blk" b 7 200
echo deep >"$src/sub/deeper/file"
(cd "$src/big" && seq -f 'entry-%05g' 0 9999 | xargs touch && echo 100 >entry-00100)
mkfs.erofs --quiet "$out/plain.erofs" "$src"
mkfs.erofs --quiet -zlz4hc -C65536 -Eztailpacking "$out/lz4.erofs" "$src"
rm -rf "$src"
ls -l "$out"
