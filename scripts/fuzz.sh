#!/usr/bin/env bash
# Runs every cargo-fuzz target of fuzz/ for a bounded time, starting from the committed
# seed corpus (fuzz/seeds/TARGET) plus whatever earlier runs left in fuzz/corpus/TARGET.
# Exits non-zero if any target finds a crash (its input is left in fuzz/artifacts/).
#
#   scripts/fuzz.sh                    # every target, FUZZ_SECONDS (default 30) each
#   FUZZ_SECONDS=600 scripts/fuzz.sh rpc_call   # one target, longer
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
seconds=${FUZZ_SECONDS:-30}

if ! rustup run nightly rustc --version >/dev/null 2>&1; then
    echo "fuzz: installing the nightly toolchain (libFuzzer needs it)"
    rustup toolchain install nightly --profile minimal
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz: installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(cargo +nightly fuzz list)
fi
cargo +nightly fuzz build -O
for t in "${targets[@]}"; do
    mkdir -p "corpus/$t" "seeds/$t"
    echo "fuzz: $t for ${seconds}s"
    cargo +nightly fuzz run -O "$t" "corpus/$t" "seeds/$t" -- \
        -max_total_time="$seconds" -rss_limit_mb=2048 -print_final_stats=1 2>&1 |
        grep -E "^(stat::number_of_executed_units|Done|==[0-9]+== ERROR|SUMMARY)" || true
    if compgen -G "artifacts/$t/crash-*" >/dev/null || compgen -G "artifacts/$t/oom-*" >/dev/null; then
        echo "fuzz: $t FOUND A CRASH: see fuzz/artifacts/$t/" >&2
        exit 1
    fi
done
echo "fuzz: ${#targets[@]} targets, no crash"
