#!/bin/bash
# usage: run.sh BIN LABEL WORKLOAD COUNT
# Starts BIN with a mem export (/mem) beside an object export (/obj), benches WORKLOAD
# on /mem over NFSv4, reports server CPU seconds and context switches per operation.
set -e
BIN=$1; LABEL=$2; WL=$3; COUNT=$4; ROUND=${5:-1}
D=/tmp/v4pool-bench/r$ROUND-$LABEL-$(echo $WL | tr / _)
rm -rf $D; mkdir -p $D
set -a; . /tmp/obj-v4pool/env; set +a
PG=$GRANARY_TEST_POSTGRES
S3=$(echo "$GRANARY_TEST_S3" | sed "s/'//g")
PREFIX=v4pool-$LABEL-$RANDOM
cat > $D/config.toml <<EOT
handle_key = "$D/handle.key"
[[export]]
path = "/mem"
backend = "mem"
squash = "none"
[[export]]
path = "/obj"
backend = "object"
postgres = "$PG"
store = "$S3&prefix=$PREFIX"
squash = "none"
EOT
MPORT=$((20000 + RANDOM % 10000))
$BIN serve --config $D/config.toml --listen 127.0.0.1:0 --no-portmap --metrics 127.0.0.1:$MPORT > $D/server.log 2>&1 &
PID=$!
for i in $(seq 1 100); do grep -q "nfs://" $D/server.log && break; sleep 0.2; done
PORT=$(grep -o "127.0.0.1:[0-9]*" $D/server.log | grep -v ":$MPORT" | head -1 | cut -d: -f2)
cpu() { awk '{print $14+$15}' /proc/$PID/stat; }
ctx() { cat /proc/$PID/task/*/status | awk '/ctxt_switches/ {s+=$2} END {print s}'; }
ops() { curl -s http://127.0.0.1:$MPORT/metrics | awk -v op="$1" '$1 ~ "granary_nfs4_operations_total\\{op=\""op"\"\\}" {print $2}'; }
pool() { curl -s http://127.0.0.1:$MPORT/metrics | awk '$1=="granary_blocking_pool_calls_total" {print $2}'; }
C0=$(cpu); X0=$(ctx); S0=$(ops sequence); P0=$(pool)
L0=$(cut -d' ' -f1-3 /proc/loadavg)
/tmp/granary-before bench --target "g=nfs://127.0.0.1/mem?nfsport=$PORT&mountport=$PORT" --workloads "$WL" --count $COUNT --warmup 1 --repeats 3 --no-limit --no-plots --allow-busy --out $D/out > $D/bench.log 2>&1 || { echo bench failed; tail $D/bench.log; }
C1=$(cpu); X1=$(ctx); S1=$(ops sequence); P1=$(pool)
L1=$(cut -d' ' -f1-3 /proc/loadavg)
kill $PID; wait $PID 2>/dev/null || true
TCK=$(getconf CLK_TCK)
python3 - <<PY
c=($C1-$C0)/$TCK; x=$X1-$X0; s=(${S1:-0})-(${S0:-0}); p=(${P1:-0})-(${P0:-0})
print(f"$LABEL $WL: compounds(SEQUENCE)={s:.0f} pool_calls={p:.0f} cpu={c:.2f}s cpu/compound={c/s*1e6:.1f}us ctxsw/compound={x/s:.2f} load before: $L0 after: $L1")
PY
grep -E "ops/s|median" $D/bench.log | head -5 || true
