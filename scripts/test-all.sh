#!/usr/bin/env bash
# Installs everything granary's tests need on a fresh Debian/Ubuntu machine, then runs
# every test. This is the command README gives and .ci/run calls.
#
#   scripts/test-all.sh            # install missing packages, lint, run all tests
#   GRANARY_SKIP_INSTALL=1 ...     # do not touch packages
set -euo pipefail
cd "$(dirname "$0")/.."

# libnfs: the host's real NFS clients; rpcbind: registration test; qemu, mmdebstrap,
# cpio: the Debian guest with the Linux kernel NFS client (kernel-tests/); erofs-utils:
# mkfs.erofs and fsck.erofs for the erofs differential tests.
packages=(libnfs-utils libnfs-dev rpcbind qemu-system-x86 mmdebstrap cpio erofs-utils)

log() { printf '\n== %s\n' "$*"; }

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

install_packages() {
    local missing=()
    for p in "${packages[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    if [ ${#missing[@]} -eq 0 ]; then
        log "test packages present: ${packages[*]}"
        return
    fi
    log "installing ${missing[*]}"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

if [ "${GRANARY_SKIP_INSTALL:-0}" != 1 ]; then
    install_packages
fi

if ! command -v cargo >/dev/null; then
    echo "cargo not found: install Rust (https://rustup.rs) and run this again" >&2
    exit 1
fi

start=$(date +%s)
# Runs one phase and prints how long it took (CI must stay under 40 minutes; this says
# where they go).
phase() {
    local what=$1 began
    shift
    log "$what"
    began=$(date +%s)
    "$@"
    printf '== %s: %d s\n' "$what" $(( $(date +%s) - began ))
}
phase "cargo fmt --check" cargo fmt --all -- --check
phase "cargo clippy (all targets, warnings are errors)" \
    cargo clippy --workspace --all-targets --quiet -- -D warnings
phase "cargo test (unit, property, wire, libnfs-utils and integration tests)" \
    cargo test --workspace --quiet
phase "loom model checks (range lock, open-file cache, timer groups, multigrain clock)" \
    env RUSTFLAGS="--cfg loom --cfg crossbeam_loom" cargo test --quiet --release \
    -p granary-sync -p granary-time --lib --target-dir target/loom-sync loom
# The guest suite runs a release build of granary. It compiles while the fuzzer runs
# (each fuzz target keeps one core busy for its time), and the suite's own build step
# then finds it done.
mkdir -p target
cargo build --release -p granary --quiet >target/release-build.log 2>&1 &
release_build=$!
phase "fuzzing: every cargo-fuzz target for ${FUZZ_SECONDS:-15} s from the committed seeds (scripts/fuzz.sh)" \
    env FUZZ_SECONDS="${FUZZ_SECONDS:-15}" scripts/fuzz.sh
wait_release_build() {
    wait "$release_build" && return 0
    cat target/release-build.log >&2
    return 1
}
phase "release build for the guest suite (started with the fuzzing)" wait_release_build
phase "Linux kernel NFS client in a Debian guest, granary and knfsd side by side (kernel-tests/)" \
    kernel-tests/run.sh
log "all tests passed in $(( $(date +%s) - start )) s"
