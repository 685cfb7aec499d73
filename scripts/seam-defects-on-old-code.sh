#!/usr/bin/env bash
# Proof for issue 11: the seam's defect tests, written against the Backend API from before
# the atomic seam (docs/proofs/seam-defects-old-api.rs.txt), fail on that code. Builds the
# old revision in a throwaway worktree, runs the tests there, and checks that each of the
# five fails for the defect it names. Today's code passes the same checks in
# nfsd/tests/seam.rs (run by `cargo test`).
#
#   scripts/seam-defects-on-old-code.sh        # ~1 min on 2 cores after the first build
set -euo pipefail
cd "$(dirname "$0")/.."
old=08958b8            # main just before e228f65 ("vfs: one atomic Backend seam")
dir=$(mktemp -d /tmp/granary-old-seam.XXXXXX)
trap 'git worktree remove --force "$dir" >/dev/null 2>&1 || true' EXIT
git worktree add -q --detach "$dir" "$old"
mkdir -p "$dir/nfsd/tests"
cp docs/proofs/seam-defects-old-api.rs.txt "$dir/nfsd/tests/seam_old.rs"
target=${OLD_SEAM_TARGET:-$PWD/target/old-seam}
out=$(cd "$dir" && CARGO_TARGET_DIR="$target" RUST_BACKTRACE=0 \
    cargo test -q -p granary-nfsd --test seam_old 2>&1 || true)
expect=(
    "common_procedures_make_one_backend_call|CREATE"
    "racing_creates_each_bracket_their_own_change|reply results"
    "racing_create_never_truncates_without_write_permission|the racing file kept its data"
    "racing_remove_in_a_sticky_directory_checks_the_file_it_removes|NoEnt"
    "a_small_read_reserves_a_small_reply|a 4 KiB READ reserved"
)
bad=0
for e in "${expect[@]}"; do
    test=${e%%|*} why=${e#*|}
    block=$(printf '%s\n' "$out" | awk -v t="---- $test stdout ----" '$0==t{p=1;next} /^---- /{p=0} p')
    if printf '%s\n' "$block" | grep -qF "$why"; then
        printf 'old code fails %-62s (%s)\n' "$test" "$(printf '%s\n' "$block" | grep -m1 -F "$why" | cut -c1-90)"
    else
        printf 'old code did NOT fail %s as expected\n' "$test"; bad=1
    fi
done
printf '%s\n' "$out" | grep -E '^test result' || true
exit $bad
