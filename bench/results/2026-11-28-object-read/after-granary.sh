#!/bin/bash
# Runs the objread build with the bench's "--squash none" dropped (serve refuses it beside
# --config since 0e1b215; the harness in this build still passed it: fixed on main by 7b0174a).
args=()
skip=0
for a in "$@"; do
  if [ $skip = 1 ]; then skip=0; continue; fi
  if [ "$a" = "--squash" ]; then skip=1; continue; fi
  args+=("$a")
done
exec /work/wt/objread/target/release/granary "${args[@]}"
