#!/usr/bin/env bash
# Runs every cargo-fuzz target of fuzz/ for a bounded time, starting from the committed
# seed corpus (fuzz/seeds/TARGET) plus whatever earlier runs left in fuzz/corpus/TARGET.
# Exits non-zero if any target finds a crash (its input is left in fuzz/artifacts/).
# FUZZ_JOBS targets run at once (default: the number of cores).
#
#   scripts/fuzz.sh                    # every target, FUZZ_SECONDS (default 30) each
#   FUZZ_SECONDS=600 scripts/fuzz.sh rpc_call   # one target, longer
#   scripts/fuzz.sh --build            # build the targets only (test-all.sh, in the background)
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
seconds=${FUZZ_SECONDS:-30}

if ! rustup run nightly rustc --version >/dev/null 2>&1; then
    echo "fuzz: installing the nightly toolchain (libFuzzer's sanitizer flags need it)"
    rustup toolchain install nightly --profile minimal
fi

# The flags cargo-fuzz 0.13 passes for `cargo fuzz build -O` (libFuzzer's coverage
# instrumentation and AddressSanitizer), built with cargo directly: installing cargo-fuzz
# on a fresh machine compiles it from source, minutes of every CI run. This keeps cargo's
# default codegen units (cargo-fuzz forces 1, which serialises each crate's code
# generation); alone on this 2-core machine the build took 145 s, and the targets run as
# fast (rpc_call: 64k executions in 5 s either way). `cargo +nightly fuzz run TARGET`
# still works for anyone who has cargo-fuzz.
triple=$(rustc +nightly -vV | sed -n 's/^host: //p')
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Zsanitizer=address"
# --target keeps RUSTFLAGS off build scripts and proc macros, as cargo-fuzz does.
cargo +nightly build --release --target "$triple" --bins
bin=target/$triple/release
[ "${1:-}" != --build ] || exit 0

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    for f in fuzz_targets/*.rs; do targets+=("$(basename "$f" .rs)"); done
fi
# Each libFuzzer process keeps one core busy for its time, so FUZZ_JOBS targets (default:
# one per core) run at once, each for the full FUZZ_SECONDS; their outputs are printed in
# the targets' order when all are done. 7 targets x 15 s one at a time took 112 s of CI.
jobs=${FUZZ_JOBS:-$(nproc)}
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
for t in "${targets[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
    mkdir -p "corpus/$t" "seeds/$t" "artifacts/$t"
    "$bin/$t" "corpus/$t" "seeds/$t" -artifact_prefix="artifacts/$t/" \
        -max_total_time="$seconds" -rss_limit_mb=2048 -print_final_stats=1 >"$logs/$t" 2>&1 &
done
wait
crashed=0
for t in "${targets[@]}"; do
    echo "fuzz: $t for ${seconds}s"
    grep -E "^(stat::number_of_executed_units|Done|==[0-9]+== ERROR|SUMMARY)" "$logs/$t" || true
    if compgen -G "artifacts/$t/crash-*" >/dev/null || compgen -G "artifacts/$t/oom-*" >/dev/null; then
        echo "fuzz: $t FOUND A CRASH: see fuzz/artifacts/$t/" >&2
        crashed=1
    fi
done
[ "$crashed" = 0 ] || exit 1
echo "fuzz: ${#targets[@]} targets, no crash"
