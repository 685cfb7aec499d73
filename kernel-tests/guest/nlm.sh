#!/usr/bin/env bash
# Runs INSIDE the vm.sh guest (kernel-tests/nlm.sh boots it): NLM/NSM against the Linux
# kernel client. granary and an rpcbind of its own run in a network namespace (`srv`,
# 10.99.0.1) so that the client's kernel lockd and rpc.statd keep the guest's own rpcbind
# (10.99.0.2 and loopback): on one host both would claim program 100021 in one rpcbind.
# The client mounts granary over NFSv3 WITHOUT nolock (twice, nosharecache, so the two
# mounts' locks meet only at the server) and over NFSv4.2, and checks fcntl exclusion
# between the v3 mounts, across protocols, a blocked waiter granted (NLM GRANTED) when
# the holder exits, a killed holder's lock released, and SQLite hammered by writers on
# the v3 and the v4.2 mount; then a restart (kill -9) under a held v3 lock, reclaimed
# by the client while others stay excluded. Prints PASS/FAIL per
# check; exits non-zero on any failure. KT_NLM_BREAK=state (the state directory wiped
# at the restart) or nolock (the v3 mount of the SQLite check without NLM) breaks what
# the checks rely on, to see them fail.
set -u
KT_GUEST=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=/dev/null
. "$KT_GUEST/common.sh"
PROBE_PY=$KT_GUEST/lockprobe.py
probe() { python3 "$PROBE_PY" "$@"; }
PORT=20600
SRV=10.99.0.1
CLI=10.99.0.2
FAILS=0
LOG=/tmp/granary-locks.log

check() { # check NAME WANT GOT
    if [ "$2" = "$3" ]; then echo "PASS $1: $3"; else echo "FAIL $1: want '$2', got '$3'"; FAILS=$((FAILS + 1)); fi
}

install_granary >/dev/null || { echo "FAIL: cannot install granary"; exit 1; }
modprobe veth || { echo "FAIL: no veth module"; exit 1; }
ip netns add srv
ip link add kt-cli type veth peer name kt-srv
ip link set kt-srv netns srv
ip addr add "$CLI/24" dev kt-cli && ip link set kt-cli up && ip link set lo up
ip netns exec srv sh -c "ip addr add $SRV/24 dev kt-srv && ip link set kt-srv up && ip link set lo up"

# The client's side: the guest's rpcbind and rpc.statd (the kernel asks statd to
# monitor the server before its first lock; without statd, locks fail with ENOLCK).
pgrep -x rpcbind >/dev/null || rpcbind -w
rpc.statd --no-notify || { echo "FAIL: rpc.statd did not start"; exit 1; }

# The server's side: its own /run (rpcbind's socket and lock files), rpcbind, granary.
ip netns exec srv unshare -m sh -c "mount -t tmpfs tmpfs /run && rpcbind -w && \
    ulimit -n 65536 && exec $GRANARY ${KT_GRANARY_LOG:+--log $KT_GRANARY_LOG} serve \
    --listen $SRV:$PORT --clients 10.99.0.0/24 --squash none --mem-capacity-bytes 268435456" \
    >"$LOG" 2>&1 </dev/null &
SERVER=$!
for _ in $(seq 100); do
    ip netns exec srv ss -Htln "sport = :$PORT" | grep -q . && break
    sleep 0.2
done
echo "server's portmapper:"; rpcinfo -p "$SRV" | grep -E '1000(03|05|21|24)' | sort
check registered "100021 4 100024 1" "$(rpcinfo -p "$SRV" | awk '$1 == 100021 || $1 == 100024 { print $1, $2 }' | sort -u | tr '\n' ' ' | sed 's/ $//')"

mkdir -p /mnt/l1 /mnt/l2 /mnt/l3 /mnt/l4
opts="vers=3,proto=tcp,port=$PORT,mountport=$PORT,mountproto=tcp,retry=0,nosharecache"
mount -t nfs -o "$opts" "$SRV:/" /mnt/l1 || { echo "FAIL: v3 mount 1"; cat "$LOG"; exit 1; }
mount -t nfs -o "$opts" "$SRV:/" /mnt/l2 || { echo "FAIL: v3 mount 2"; exit 1; }
mount -t nfs -o "vers=4.2,port=$PORT" "$SRV:/" /mnt/l4 || { echo "FAIL: v4.2 mount"; exit 1; }
grep -E ' /mnt/l[124] ' /proc/mounts | sed 's/,addr=[^, ]*//'
echo data >/mnt/l1/f
sync

# hold_bg PATH SECS: a holder of PATH in the background (its PID in HOLDER); waits until
# it has the lock.
hold_bg() {
    local out
    out=$(mktemp /tmp/hold.XXXXXX)
    python3 "$PROBE_PY" hold "$1" "$2" >"$out" 2>&1 &
    HOLDER=$!
    for _ in $(seq 150); do grep -q locked "$out" && return 0; sleep 0.2; done
    echo "holder of $1 never got the lock: $(cat "$out")"; return 1
}

# 1. Exclusion between the two v3 mounts (the server's NLM decides: nosharecache).
hold_bg /mnt/l1/f 6 && check "v3 holder blocks v3 try" EAGAIN "$(probe try /mnt/l2/f)"
check "v3 holder blocks a shared v3 try" EAGAIN "$(probe try /mnt/l2/f sh)"
# 2. A blocked waiter is granted when the holder exits (NLM4_BLOCKED, then GRANTED).
start=$(date +%s)
got=$(timeout 60 python3 "$PROBE_PY" wait /mnt/l2/f)
waited=$(( $(date +%s) - start ))
wait "$HOLDER"
check "v3 waiter granted after the holder exits" got "$got"
# The client asks again by itself only every 30 s: sooner is the server's GRANTED call.
check "granted by NLM GRANTED, not the client's 30 s re-poll" yes "$([ "$waited" -lt 20 ] && echo yes || echo "no, ${waited} s")"
check "free after both" ok "$(probe try /mnt/l1/f)"
# 3. A holder killed with the lock held releases it.
hold_bg /mnt/l1/f 300 && kill -9 "$HOLDER"; wait "$HOLDER" 2>/dev/null
sleep 1
check "killed v3 holder's lock released" ok "$(probe try /mnt/l2/f)"
# 4. Across protocols: v3 holder vs v4 locker and the reverse.
hold_bg /mnt/l1/f 4 && check "v3 holder blocks v4 try" EAGAIN "$(probe try /mnt/l4/f)"
wait "$HOLDER"
hold_bg /mnt/l4/f 4 && check "v4 holder blocks v3 try" EAGAIN "$(probe try /mnt/l1/f)"
wait "$HOLDER"
check "free after the v4 holder" ok "$(probe try /mnt/l1/f)"
# 5. SQLite (rollback journal: fcntl locks) hammered by two writers on the v3 mount and
#    two on the v4.2 mount for KT_SQLITE_SECS (20 s): every COMMIT that returned is in the
#    table, and the database is whole.
hammer_opts=$opts
[ "${KT_NLM_BREAK:-}" = nolock ] && hammer_opts=$opts,nolock
mount -t nfs -o "$hammer_opts" "$SRV:/" /mnt/l3 || { echo "FAIL: v3 mount 3"; exit 1; }
out=$(timeout 300 python3 "$KT_GUEST/locks.py" /mnt/l3/hammer.db /mnt/l4/hammer.db hammer 2>&1)
echo "$out" | grep -E '^(note|writer )'
check "sqlite: the writers (2 on v3, 2 on v4.2) exited" "[0, 0, 0, 0]" "$(echo "$out" | sed -n 's/^writers exited: //p')"
check "sqlite: integrity_check" ok "$(echo "$out" | sed -n 's/^integrity_check: //p')"
check "sqlite: rows equal the committed inserts" yes "$(echo "$out" | sed -n 's/^rows equal the committed inserts: //p')"

umount /mnt/l1 /mnt/l2 /mnt/l3 /mnt/l4
kill "$SERVER" 2>/dev/null; wait "$SERVER" 2>/dev/null

# 6. A restart by kill -9 under a held v3 lock: granary (a host export, so handles
#    survive, and a state directory) tells the client's statd with SM_NOTIFY and its
#    lockd reclaims the lock; during the grace period a new lock waits, and after it the
#    reclaimed lock still excludes. (An NFSv4 mount is left out here: see
#    kernel-tests/README.md, a Linux NFSv4 client does not yet come back cleanly.)
mkdir -p /export-locks /var/lib/granary-locks
GRACE=20
serve_host() {
    ip netns exec srv sh -c "ulimit -n 65536 && exec $GRANARY --log info serve /export-locks \
        --state-dir /var/lib/granary-locks --listen $SRV:$PORT --clients 10.99.0.0/24 \
        --squash none --grace-secs $GRACE" >>"$LOG" 2>&1 </dev/null &
    SERVER=$!
    for _ in $(seq 100); do
        ip netns exec srv ss -Htln "sport = :$PORT" | grep -q . && return 0
        sleep 0.2
    done
    echo "FAIL: granary (host export) did not start"; cat "$LOG"; exit 1
}
: >"$LOG"
serve_host
if ! mount -t nfs -o "$opts" "$SRV:/" /mnt/l1 || ! mount -t nfs -o "$opts" "$SRV:/" /mnt/l2; then
    echo "FAIL: mounts of the host export"; exit 1
fi
echo data >/mnt/l1/f3
hold_bg /mnt/l1/f3 400 && HOLD3=$HOLDER
check "host export: v3 holder blocks a v3 try" EAGAIN "$(probe try /mnt/l2/f3)"
kill -9 "$SERVER"; wait "$SERVER" 2>/dev/null
[ "${KT_NLM_BREAK:-}" = state ] && rm -rf /var/lib/granary-locks/*
serve_host
restarted=$(date +%s)
for _ in $(seq 100); do grep -q "SM_NOTIFY delivered" "$LOG" && break; sleep 0.3; done
check "SM_NOTIFY delivered to the client's statd after the restart" yes \
    "$(grep -q 'SM_NOTIFY delivered' "$LOG" && echo yes || echo no)"
# During grace a new lock waits (the client retries NLM4_DENIED_GRACE_PERIOD); after
# it, the reclaimed lock is in the way.
got=$(timeout 120 python3 "$PROBE_PY" try /mnt/l2/f3)
after=$(( $(date +%s) - restarted ))
check "after the restart: the reclaimed lock still excludes" EAGAIN "$got"
check "the new lock waited for the grace period" yes "$([ "$after" -ge $((GRACE - 5)) ] && echo yes || echo "no, ${after} s")"
echo "granary's log (restart):"; grep -E 'NSM|SM_NOTIFY|grace|NLM|NFSv4|LOCK|reclaim|WARN|ERROR' "$LOG" | tail -40
kill "$HOLD3"; wait "$HOLD3" 2>/dev/null
sleep 1
check "free once the holder is gone" ok "$(probe try /mnt/l2/f3)"
umount /mnt/l1 /mnt/l2
kill -9 "$SERVER" 2>/dev/null; wait "$SERVER" 2>/dev/null
echo "locks: $FAILS failed"
[ "$FAILS" = 0 ]
