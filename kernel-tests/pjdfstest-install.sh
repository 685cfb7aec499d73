#!/usr/bin/env bash
# pjdfstest for the kernel-client suite's pjdfstest group: the POSIX file system test
# suite's Rust rewrite (crates.io `pjdfstest` 0.2.2, BSD-2-Clause, repository
# saidsay-so/pjdfstest), which Debian does not package. Installed once with
# `cargo install --locked` from crates.io into a cache directory and reused; nothing of
# it is in this repository. The guest runs the host's build: both are Debian 12
# (glibc 2.36), as for the granary binary itself. Its build links with `-lacl` (the exacl
# crate), so the host needs libacl1-dev; the binary needs only libc and libgcc_s.
#
#   kernel-tests/pjdfstest-install.sh [DIR]   # install if missing; print the binary's path
#
# DIR defaults to $KT_PJDFSTEST_DIR or ~/.cache/granary/pjdfstest (the binary is
# DIR/bin/pjdfstest). scripts/test-all.sh runs it with the other test dependencies, and
# kernel-tests/run.sh again (a no-op once installed) before it stages the binary.
set -euo pipefail

VERSION=0.2.2
dir=${1:-${KT_PJDFSTEST_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/granary/pjdfstest}}
bin=$dir/bin/pjdfstest

die() {
    echo "pjdfstest-install: $*" >&2
    exit 1
}

if [ -x "$bin" ] && [ "$("$bin" --version 2>/dev/null)" = "pjdfstest $VERSION" ]; then
    echo "$bin"
    exit 0
fi
command -v cargo >/dev/null || die "cargo not found: install Rust (https://rustup.rs)"
# The linker needs libacl.so (the unversioned name comes with the -dev package).
[ "$(cc -print-file-name=libacl.so 2>/dev/null)" != libacl.so ] ||
    die "libacl.so not found, which pjdfstest links: apt-get install libacl1-dev"
mkdir -p "$dir"
echo "pjdfstest-install: cargo install pjdfstest --version $VERSION --locked --root $dir" >&2
# Without CARGO_TARGET_DIR cargo builds in a temporary directory and removes it after, so
# the build neither lands in granary's target directory nor stays on the disk.
env -u CARGO_TARGET_DIR cargo install pjdfstest --version "$VERSION" --locked --root "$dir" \
    --quiet >&2 || die "cargo install pjdfstest $VERSION failed (see above)"
[ -x "$bin" ] || die "cargo install succeeded but $bin is missing"
echo "$bin"
