# Sourced on the HOST by run.sh and perf.sh: build granary and the guest, stage what the
# guest needs, boot it. Every failure here is fatal: the suite never skips.

KT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(git -C "$KT_DIR" rev-parse --show-toplevel 2>/dev/null || (cd "$KT_DIR/.." && pwd))
# The repository's guest (kernel-tests/vm/vm.sh). VM_SH=PATH uses other tooling with the
# same `build` and `run [--mem --cpus --timeout --share] -- CMD` interface.
VM_SH=${VM_SH:-$KT_DIR/vm/vm.sh}

kt_die() {
    echo "kernel-tests: FAIL: $*" >&2
    exit 1
}

kt_log() { printf '\n== %s\n' "$*" >&2; }

# kt_prepare: build granary (release; KT_GRANARY_BIN=PATH uses that binary instead)
# and the guest image (cached by vm.sh), then copy
# the binary, the guest scripts and vm/guest-lib.sh into a fresh staging directory,
# $KT_STAGE, that the guest sees at the same path.
kt_prepare() {
    [ -x "$VM_SH" ] || kt_die "no guest tooling: $VM_SH is not an executable (unset VM_SH for kernel-tests/vm/vm.sh)"
    local tool
    for tool in qemu-system-x86_64 mmdebstrap cpio mke2fs; do
        command -v "$tool" >/dev/null ||
            kt_die "$tool not found: apt-get install qemu-system-x86 mmdebstrap cpio e2fsprogs (scripts/test-all.sh installs them)"
    done
    local bin=${KT_GRANARY_BIN:-}
    if [ -z "$bin" ]; then
        kt_log "cargo build --release -p granary"
        (cd "$REPO" && cargo build --release -p granary --quiet) || kt_die "cargo build --release -p granary failed"
        bin=${CARGO_TARGET_DIR:-$REPO/target}/release/granary
    fi
    [ -x "$bin" ] || kt_die "no granary binary at $bin"
    kt_log "vm.sh build (cached after the first time)"
    "$VM_SH" build || kt_die "vm.sh build failed: the Debian guest image could not be made (see above)"
    KT_STAGE=$(mktemp -d /tmp/granary-kt.XXXXXX)
    chmod 755 "$KT_STAGE"
    cp "$bin" "$KT_STAGE/granary"
    cp -r "$KT_DIR/guest" "$KT_STAGE/guest"
    cp "$KT_DIR/vm/guest-lib.sh" "$KT_STAGE/guest/guest-lib.sh"
    mkdir -p "$KT_STAGE/out"
    # The erofs and plain groups' images (mkfs.erofs runs here: the guest has no erofs-utils).
    if [ -z "${KT_CHECKS:-}" ] || [[ erofs =~ $KT_CHECKS ]] || [[ plain =~ $KT_CHECKS ]]; then
        kt_log "erofs-images.sh (two EROFS images for the erofs group)"
        "$KT_DIR/erofs-images.sh" "$KT_STAGE/erofs" || kt_die "erofs-images.sh failed (needs erofs-utils and root)"
    fi
}

# kt_stage_pjdfstest: when the pjdfstest group may run (KT_CHECKS unset or matching
# it), install pjdfstest if it is not in its cache yet (pjdfstest-install.sh: cargo
# install from crates.io, once; scripts/test-all.sh does it earlier) and copy it to
# $KT_STAGE/pjdfstest. KT_PJDFSTEST_BIN=PATH stages that binary instead.
kt_stage_pjdfstest() {
    [ -z "${KT_CHECKS:-}" ] || [[ pjdfstest =~ $KT_CHECKS ]] || return 0
    local bin=${KT_PJDFSTEST_BIN:-}
    if [ -z "$bin" ]; then
        kt_log "pjdfstest-install.sh (cargo install pjdfstest from crates.io, once; cached)"
        bin=$("$KT_DIR/pjdfstest-install.sh") || kt_die "pjdfstest could not be installed (see above)"
    fi
    [ -x "$bin" ] || kt_die "no pjdfstest binary at $bin"
    cp "$bin" "$KT_STAGE/pjdfstest"
}

# kt_object_start: when the targets include `object` (KT_TARGETS unset: the default
# list does) and one of its groups may be selected (KT_CHECKS unset or matching one of its default groups, heads and pjdfstest, or KT_OBJECT_GROUPS
# given), start its engines, PostgreSQL and `weed mini` (scripts/object-env.sh: throwaway,
# bound to the host's 127.0.0.1), in the background while the guest boots.
# The guest (common.sh object_start_both) waits for $KT_STAGE/object/env, which names
# them as the guest reaches them through vm.sh's --host-net (10.0.2.2 is the host's
# 127.0.0.1), and object/s3.keys; or finds object/failed with the start's log. Sets
# KT_OBJECT_DIR, which makes kt_boot give the guest its NIC; kt_object_stop stops both.
kt_object_start() {
    [[ " ${KT_TARGETS:-object} " == *" object "* ]] || return 0
    [ -z "${KT_CHECKS:-}" ] || [ -n "${KT_OBJECT_GROUPS:-}" ] || [[ heads =~ $KT_CHECKS || pjdfstest =~ $KT_CHECKS ]] || return 0
    KT_OBJECT_DIR=$(mktemp -d /tmp/granary-kt-object.XXXXXX)
    mkdir -p "$KT_STAGE/object"
    kt_log "object-env.sh start (PostgreSQL and S3 on the host's loopback for the object target)"
    (
        out=$KT_STAGE/object
        if ! "$REPO/scripts/object-env.sh" start "$KT_OBJECT_DIR" >"$KT_OBJECT_DIR/start.log" 2>&1; then
            tail -30 "$KT_OBJECT_DIR/start.log" >"$out/failed"
            exit 1
        fi
        # shellcheck source=/dev/null
        . "$KT_OBJECT_DIR/env"
        (umask 077 && printf 'access_key_id = %s\nsecret_access_key = %s\n' \
            "$AWS_ACCESS_KEY_ID" "$AWS_SECRET_ACCESS_KEY" >"$out/s3.keys")
        printf 'OBJECT_POSTGRES=%q\nOBJECT_STORE=%q\n' "${GRANARY_TEST_POSTGRES/127.0.0.1/10.0.2.2}" \
            "${GRANARY_TEST_S3/127.0.0.1/10.0.2.2}" >"$out/env.new"
        mv "$out/env.new" "$out/env"
    ) &
    KT_OBJECT_JOB=$!
}

kt_object_stop() {
    [ -n "${KT_OBJECT_DIR:-}" ] || return 0
    wait "$KT_OBJECT_JOB" 2>/dev/null
    "$REPO/scripts/object-env.sh" stop "$KT_OBJECT_DIR" >/dev/null 2>&1
    rm -rf "$KT_OBJECT_DIR"
    KT_OBJECT_DIR=
}

# kt_boot TIMEOUT SCRIPT [ARGS...]: boot the guest once and run guest/SCRIPT as root in
# it; its output goes to stdout and to $KT_STAGE/log. Returns the script's status and
# explains vm.sh's own failures (124: timeout, 255: the guest died or never booted).
kt_boot() {
    local timeout=$1 script=$2 rc
    shift 2
    kt_log "vm.sh run (TCG here: boot about 10 s; guest timeout ${timeout} s)"
    # The guest gets no environment from here: pass every exported KT_* and PERF_*.
    local v vars=(KT_STAGE="$KT_STAGE")
    for v in $(compgen -e | grep -E '^(KT_|PERF_)' | grep -v '^KT_STAGE$'); do vars+=("$v=${!v}"); done
    set +e
    local net=()
    [ -z "${KT_OBJECT_DIR:-}" ] || net=(--host-net)
    VM_TIMING=1 "$VM_SH" run "${net[@]}" --mem "${KT_MEM:-4G}" --cpus "${KT_CPUS:-2}" --timeout "$timeout" \
        --share "$KT_STAGE" -- env "${vars[@]}" bash "$KT_STAGE/guest/$script" "$@" 2>&1 | tee "$KT_STAGE/log"
    rc=${PIPESTATUS[0]}
    set -e
    case $rc in
    124) echo "kernel-tests: FAIL: the guest did not finish within ${timeout} s (vm.sh timeout)" >&2 ;;
    255) echo "kernel-tests: FAIL: the guest did not boot or died without a status (vm.sh exit 255; see the console tail above)" >&2 ;;
    2) grep -q '^vm.sh: ' "$KT_STAGE/log" && echo "kernel-tests: FAIL: vm.sh refused to run (see above)" >&2 ;;
    esac
    return "$rc"
}
