#!/usr/bin/env bash
# Runs INSIDE the vm.sh guest (kernel-tests/nlm.sh boots it): NLM/NSM against the Linux
# kernel client. granary and an rpcbind of its own run in a network namespace (`srv`,
# 10.99.0.1) so that the client's kernel lockd and rpc.statd keep the guest's own rpcbind
# (10.99.0.2 and loopback): on one host both would claim program 100021 in one rpcbind.
# The client mounts granary over NFSv3 WITHOUT nolock (twice, nosharecache, so the two
# mounts' locks meet only at the server) and over NFSv4.2, and checks fcntl exclusion
# between the v3 mounts, across protocols, a blocked waiter granted (NLM GRANTED) when
# the holder exits, a killed holder's lock released, and SQLite hammered by writers on
# the v3 and the v4.2 mount; deadlocks refused (EDEADLK) between two v3 mounts and
# across v3 and v4.2; a v3 client's reboot notice (nfs-utils' sm-notify, over UDP)
# freeing its locks; a v4.2 client in a second network namespace whose link is cut losing its
# lock after one lease; then two restarts (SIGTERM, then kill -9) under a held v3 and a
# held v4.2 lock, both reclaimed by their clients while others stay excluded; last, two
# heads of an object export (engines on the host) in namespaces of their own, a v3 lock
# through one excluding v3 and v4.2 locks through the other (KT_NLM_HEADS=0: not). Prints
# PASS/FAIL per check; exits non-zero on any failure. KT_NLM_BREAK=state (the state
# directory wiped at each restart) or nolock (the v3 mount of the SQLite check without
# NLM) breaks what the checks rely on, to see them fail.
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
# The lease of both servers: the lease-expiry check waits about one, and each restart's
# NFSv4 grace period lasts one (as on the host-v4 target).
LEASE=15

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
    --listen $SRV:$PORT --clients 10.99.0.0/16 --squash none --mem-capacity-bytes 268435456 \
    --lease-secs $LEASE" \
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
hold_bg /mnt/l1/f 12 && check "v3 holder blocks v3 try" EAGAIN "$(probe try /mnt/l2/f)"
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
# (Holders that hold until killed: under load a holder of a few seconds was gone
# before the try.)
hold_bg /mnt/l1/f 300 && check "v3 holder blocks v4 try" EAGAIN "$(probe try /mnt/l4/f)"
kill "$HOLDER"; wait "$HOLDER" 2>/dev/null
hold_bg /mnt/l4/f 300 && check "v4 holder blocks v3 try" EAGAIN "$(probe try /mnt/l1/f)"
kill "$HOLDER"; wait "$HOLDER" 2>/dev/null
check "free after the v4 holder" ok "$(probe try /mnt/l1/f)"
# 4a. Deadlock: two processes each hold one byte of the same file (through the two v3
#    mounts, then through a v3 and the v4.2 mount) and each waits for the other's. The
#    client cannot see the cycle (two mounts: two inodes); the server refuses the wait
#    that closes it (NLM4_DEADLCK, NFS4ERR_DEADLOCK), the client returns EDEADLK, that
#    process exits and the other gets its byte.
check "v3/v3 deadlock refused with EDEADLK" "EDEADLK got" \
    "$(timeout 60 python3 "$PROBE_PY" deadlock /mnt/l1/f /mnt/l2/f)"
check "v3/v4.2 deadlock refused with EDEADLK" "EDEADLK got" \
    "$(timeout 60 python3 "$PROBE_PY" deadlock /mnt/l1/f /mnt/l4/f)"
check "free after the deadlocks" ok "$(probe try /mnt/l1/f)"
# 4b. A client's reboot notice frees its NLM locks: the SM_NOTIFY a rebooted client's
#    statd sends ("host NAME rebooted"), with the host's name, which the kernel's lockd
#    sent as each lock's caller_name. The holder's process still runs (its kernel still
#    thinks it holds the lock): only the server can free it. nfs-utils' own sm-notify
#    sends it, as at the client's boot: over UDP, to the port the server's portmapper
#    gives for NSM, for each server statd's records name (the kernel's lockd had statd
#    monitor granary before its first lock). -f: again in this boot; -n: keep the state
#    number. statd keeps its list in memory, so the later checks still work.
hold_bg /mnt/l1/f 300 && HOLD=$HOLDER
check "before the reboot notice: the v3 holder blocks a v3 try" EAGAIN "$(probe try /mnt/l2/f)"
echo "statd's records: $(ls /var/lib/nfs/sm)"
check "sm-notify: SM_NOTIFY over UDP answered" yes \
    "$(timeout 60 sm-notify -d -f -n -m 1 2>&1 | tee /tmp/sm-notify.log | grep -q 'notified successfully' && echo yes || { cat /tmp/sm-notify.log; echo no; })"
check "granary freed the rebooted host's locks" yes \
    "$(grep -q 'SM_NOTIFY: a host rebooted.*hosts=1' "$LOG" && echo yes || echo no)"
check "after the reboot notice: a waiter on the other v3 mount gets the lock" got \
    "$(timeout 20 python3 "$PROBE_PY" wait /mnt/l2/f)"
kill "$HOLD"; wait "$HOLD" 2>/dev/null
# 4c. A client that stops renewing its lease loses its locks: a second NFSv4.2 client
#    (network namespace c2 with its own link to the server's, and its own host name, so
#    its own client owner) takes a lock, then its link goes down. The other client's
#    tries fail while the lease runs and succeed after about one lease (granary releases
#    an expired client's state when its lock is in another's way).
ip netns add c2
ip link add kt-c2 type veth peer name kt-srv2
ip link set kt-c2 netns c2 && ip link set kt-srv2 netns srv
ip -n srv addr add 10.99.1.1/24 dev kt-srv2 && ip -n srv link set kt-srv2 up
ip -n c2 addr add 10.99.1.2/24 dev kt-c2 && ip -n c2 link set kt-c2 up && ip -n c2 link set lo up
ip -n c2 route add default via 10.99.1.1
mkdir -p /mnt/c2
# nsenter --net only (not ip netns exec, which makes a mount namespace): the mount is
# the guest's, its RPC transport lives in c2; unshare --uts: the client's own name.
nsenter --net=/run/netns/c2 unshare --uts sh -c \
    "hostname kt-c2 && mount -t nfs -o vers=4.2,port=$PORT,retry=0 $SRV:/ /mnt/c2" ||
    { echo "FAIL: v4.2 mount from the c2 namespace"; exit 1; }
echo data >/mnt/l4/lease
hold_bg /mnt/c2/lease 300 && HOLD=$HOLDER
check "c2's v4.2 holder blocks a try of the other v4.2 client" EAGAIN "$(probe try /mnt/l4/lease)"
ip -n c2 link set kt-c2 down
cut=$(date +%s)
check "c2's link cut: its lock still holds" EAGAIN "$(probe try /mnt/l4/lease)"
got=$(timeout $((LEASE * 4)) python3 "$PROBE_PY" poll /mnt/l4/lease $((LEASE * 3)))
freed=$(( $(date +%s) - cut ))
echo "note: the lock came free ${freed} s after the link was cut (lease ${LEASE} s)"
check "c2's lease ran out: the other client gets the lock" got "$got"
check "freed within the lease plus a renewal period" yes \
    "$([ "$freed" -le $((LEASE + LEASE)) ] && echo yes || echo "no, ${freed} s")"
# Released either when the waiter's LOCK found it in the way or by the lease-expiry
# timer (every half lease), whichever came first.
check "granary released the expired client's state" yes \
    "$(grep -Eq "lease had run out and its lock was in another's way|stopped renewing its lease: its state is released" "$LOG" && echo yes || { grep -i 'lease' "$LOG" | tail -5; echo no; })"
# c2's client finds its lease gone once its link is back (the holder's unlock at its
# exit needs the link); its mount then goes away.
ip -n c2 link set kt-c2 up && ip -n c2 route add default via 10.99.1.1
kill -9 "$HOLD"
for _ in $(seq 60); do kill -0 "$HOLD" 2>/dev/null || break; sleep 1; done
kill -0 "$HOLD" 2>/dev/null && echo "note: c2's holder still exits 60 s after its kill"
timeout 60 umount /mnt/c2 || umount -l /mnt/c2
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

# 6. Two restarts, SIGTERM and then kill -9, under a held v3 lock and a held v4.2 lock:
#    granary (a host export, so handles survive, and a state directory) tells the
#    client's statd with SM_NOTIFY and its lockd reclaims the v3 lock; the v4.2 client
#    finds its session gone and reclaims its open and lock (CLAIM_PREVIOUS, LOCK with
#    reclaim) in the NFSv4 grace period. During grace a new lock over either protocol
#    waits; after it the reclaimed locks still exclude, and a waiter gets the v4.2 lock
#    when its holder unlocks.
mkdir -p /export-locks /var/lib/granary-locks
GRACE=20
serve_host() {
    ip netns exec srv sh -c "ulimit -n 65536 && exec $GRANARY --log info serve /export-locks \
        --state-dir /var/lib/granary-locks --listen $SRV:$PORT --clients 10.99.0.0/24 \
        --squash none --grace-secs $GRACE --lease-secs $LEASE" >>"$LOG" 2>&1 </dev/null &
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
    echo "FAIL: v3 mounts of the host export"; exit 1
fi
# The v4.2 holder's mount and a v4.1 one for the others: the Linux client keeps one
# client (and client id) per minor version, so their locks meet only at the server.
mkdir -p /mnt/l5 /mnt/l6
if ! mount -t nfs -o "vers=4.2,port=$PORT,retry=0" "$SRV:/" /mnt/l5 ||
    ! mount -t nfs -o "vers=4.1,port=$PORT,retry=0" "$SRV:/" /mnt/l6; then
    echo "FAIL: v4 mounts of the host export"; exit 1
fi
echo data >/mnt/l1/f3
echo data >/mnt/l5/f4
hold_bg /mnt/l1/f3 400 && HOLD3=$HOLDER
hold_bg /mnt/l5/f4 400 && HOLD4=$HOLDER
check "host export: v3 holder blocks a v3 try" EAGAIN "$(probe try /mnt/l2/f3)"
check "host export: v4.2 holder blocks a v4.1 try" EAGAIN "$(probe try /mnt/l6/f4)"

# restart SIGNAL: stop granary with SIGNAL and start it again on the same directory and
# state directory (its log of this run only in $LOG, the earlier ones kept in $LOG.all).
restart() {
    kill -"$1" "$SERVER"; wait "$SERVER" 2>/dev/null
    [ "${KT_NLM_BREAK:-}" = state ] && rm -rf /var/lib/granary-locks/*
    cat "$LOG" >>"$LOG.all"; : >"$LOG"
    serve_host
    restarted=$(date +%s)
}
# reclaimed_v4 NAME: the v4.2 client took its lock back (granary logs each reclaim).
# Its next call after the restart (a GETATTR forced by a new open) finds its session
# gone and starts its recovery.
reclaimed_v4() {
    timeout 60 cat /mnt/l5/f4 >/dev/null
    for _ in $(seq 100); do grep -q "NFSv4 lock reclaimed" "$LOG" && break; sleep 0.3; done
    check "$1: granary logged the v4.2 client's lock reclaim" yes \
        "$(grep -q 'NFSv4 lock reclaimed' "$LOG" && echo yes || echo no)"
}

restart TERM
reclaimed_v4 "SIGTERM"
got=$(timeout 120 python3 "$PROBE_PY" try /mnt/l6/f4)
after=$(( $(date +%s) - restarted ))
check "SIGTERM: a v4.1 try during grace finds the reclaimed v4.2 lock" EAGAIN "$got"
check "SIGTERM: the v4.1 try waited for the grace period" yes \
    "$([ "$after" -ge $((LEASE - 5)) ] && echo yes || echo "no, ${after} s")"
check "SIGTERM: the v3 lock was reclaimed too" EAGAIN "$(timeout 120 python3 "$PROBE_PY" try /mnt/l2/f3)"

restart KILL
for _ in $(seq 100); do grep -q "SM_NOTIFY delivered" "$LOG" && break; sleep 0.3; done
check "SM_NOTIFY delivered to the client's statd after the restart" yes \
    "$(grep -q 'SM_NOTIFY delivered' "$LOG" && echo yes || echo no)"
reclaimed_v4 "kill -9"
# During grace a new lock waits (the client retries NLM4_DENIED_GRACE_PERIOD); after
# it, the reclaimed lock is in the way.
got=$(timeout 120 python3 "$PROBE_PY" try /mnt/l2/f3)
after=$(( $(date +%s) - restarted ))
check "after the restart: the reclaimed lock still excludes" EAGAIN "$got"
check "the new lock waited for the grace period" yes "$([ "$after" -ge $((GRACE - 5)) ] && echo yes || echo "no, ${after} s")"
check "kill -9, after grace: the reclaimed v4.2 lock excludes a v4.1 try" EAGAIN \
    "$(timeout 60 python3 "$PROBE_PY" try /mnt/l6/f4)"
echo "granary's log (restarts):"
cat "$LOG" >>"$LOG.all"
grep -E 'NSM|SM_NOTIFY|grace|NLM|NFSv4|LOCK|reclaim|WARN|ERROR' "$LOG.all" | tail -40
kill "$HOLD3"; wait "$HOLD3" 2>/dev/null
sleep 1
check "free once the holder is gone" ok "$(probe try /mnt/l2/f3)"
# The v4.2 holder unlocks (its process exits): a v4.1 waiter blocked on it gets the lock.
out=$(mktemp /tmp/wait.XXXXXX)
timeout 60 python3 "$PROBE_PY" wait /mnt/l6/f4 >"$out" 2>&1 &
WAITER=$!
sleep 2
check "the v4.1 waiter is still blocked while the v4.2 holder holds" "" "$(cat "$out")"
kill "$HOLD4"; wait "$HOLD4" 2>/dev/null
wait "$WAITER"
check "the v4.1 waiter gets the lock when the v4.2 holder unlocks" got "$(cat "$out")"
check "umount after the restarts" ok "$(timeout 60 umount /mnt/l1 /mnt/l2 /mnt/l5 /mnt/l6 && echo ok)"
# 7. NLM against two heads of one object export (metadata in PostgreSQL, data in S3, both
#    on the host): each head in a network namespace of its own with its own rpcbind, as
#    two machines are to the client's lockd and statd. Their locks meet in the database
#    (docs/LOCKS.md "Across heads"): a v3 lock taken through head A makes the same bytes
#    busy through head B, over NLM and over NFSv4.2, until the holder exits or is killed.
#    KT_NLM_HEADS=0 leaves this part out (kernel-tests/nlm.sh then starts no engines).
heads_nlm() {
    if ! object_config; then
        echo "FAIL heads: the object engines or the heads' config"; FAILS=$((FAILS + 1)); return
    fi
    # Only this namespace reaches the host (10.0.2.2): a relay here, on an address both
    # heads' namespaces route to, passes their connections to PostgreSQL and S3 on.
    local relay=10.99.9.9 ports cfg=$OBJECT_DIR/nlm-head.toml n name log
    ports=$(printf '%s %s\n' "$OBJECT_POSTGRES" "$OBJECT_STORE" | grep -oE '10\.0\.2\.2:[0-9]+' | cut -d: -f2 | tr '\n' ' ')
    ip addr add "$relay/32" dev lo
    python3 "$KT_GUEST/relay.py" "$relay" 10.0.2.2 $ports >/tmp/relay.log 2>&1 &
    RELAY=$!
    for _ in $(seq 50); do grep -q 'relay ready' /tmp/relay.log && break; sleep 0.2; done
    # The shared config with the relay's address, open to the client's side of each link.
    sed -e "s/10\.0\.2\.2/$relay/g" -e 's/^squash = "none"$/squash = "none"\nclients = ["10.99.0.0\/16"]/' \
        "$OBJECT_DIR/head.toml" >"$cfg"
    HEAD_PIDS=()
    for n in 2 3; do
        name=head$n log=/tmp/granary-nlm-head$n.log
        ip netns add "$name"
        ip link add "kt-h$n" type veth peer name "kt-h${n}s"
        ip link set "kt-h${n}s" netns "$name"
        ip addr add "10.99.$n.2/24" dev "kt-h$n" && ip link set "kt-h$n" up
        ip -n "$name" addr add "10.99.$n.1/24" dev "kt-h${n}s" && ip -n "$name" link set "kt-h${n}s" up
        ip -n "$name" link set lo up && ip -n "$name" route add "$relay/32" via "10.99.$n.2"
        ip netns exec "$name" unshare -m sh -c "mount -t tmpfs tmpfs /run && rpcbind -w && \
            ulimit -n 65536 && exec $GRANARY --log info serve --config $cfg \
            --listen 10.99.$n.1:$PORT --lease-secs $LEASE" >"$log" 2>&1 </dev/null &
        HEAD_PIDS+=($!)
        for _ in $(seq 150); do
            ip netns exec "$name" ss -Htln "sport = :$PORT" | grep -q . && break
            sleep 0.2
        done
    done
    mkdir -p /mnt/ha /mnt/hb /mnt/hb4
    local hopts="vers=3,proto=tcp,port=$PORT,mountport=$PORT,mountproto=tcp,retry=0"
    if ! mount -t nfs -o "$hopts" 10.99.2.1:/ /mnt/ha || ! mount -t nfs -o "$hopts" 10.99.3.1:/ /mnt/hb ||
        ! mount -t nfs -o "vers=4.2,port=$PORT,retry=0" 10.99.3.1:/ /mnt/hb4; then
        echo "FAIL heads: mounts of the two heads"; FAILS=$((FAILS + 1))
        tail -20 /tmp/granary-nlm-head2.log /tmp/granary-nlm-head3.log /tmp/relay.log
        return
    fi
    grep -E ' /mnt/h(a|b|b4) ' /proc/mounts | sed 's/,addr=[^, ]*//'
    echo data >/mnt/ha/f
    sync
    hold_bg /mnt/ha/f 300 && HOLD=$HOLDER
    check "heads: a v3 holder through head A blocks a v3 try through head B" EAGAIN "$(probe try /mnt/hb/f)"
    check "heads: ... and a shared v3 try through head B" EAGAIN "$(probe try /mnt/hb/f sh)"
    check "heads: ... and a v4.2 try through head B" EAGAIN "$(probe try /mnt/hb4/f)"
    # A waiter through head B: granted once the holder exits (how soon: docs/LOCKS.md).
    local out start
    out=$(mktemp /tmp/wait.XXXXXX)
    timeout 90 python3 "$PROBE_PY" wait /mnt/hb/f >"$out" 2>&1 &
    WAITER=$!
    sleep 2
    check "heads: the waiter through head B is still blocked while A's holder holds" "" "$(cat "$out")"
    kill "$HOLD"; wait "$HOLD" 2>/dev/null
    start=$(date +%s)
    wait "$WAITER"
    local waited=$(( $(date +%s) - start ))
    echo "note: head B's waiter got the lock ${waited} s after A's holder exited"
    check "heads: the waiter through head B gets the lock once A's holder is gone" got "$(cat "$out")"
    # Head A's unlock reaches head B through PostgreSQL (LISTEN/NOTIFY), and B sends
    # GRANTED; without it the client asks again only every 30 s.
    check "heads: granted by head B's GRANTED, not the client's 30 s re-poll" yes \
        "$([ "$waited" -lt 20 ] && echo yes || echo "no, ${waited} s")"
    # A holder killed with the lock held through head B: free through head A.
    hold_bg /mnt/hb/f 300 && kill -9 "$HOLDER"; wait "$HOLDER" 2>/dev/null
    sleep 1
    check "heads: a killed holder's lock through head B is free through head A" ok "$(probe try /mnt/ha/f)"
    umount /mnt/ha /mnt/hb /mnt/hb4
    kill "${HEAD_PIDS[@]}" 2>/dev/null
    wait "${HEAD_PIDS[@]}" 2>/dev/null
    kill "$RELAY" 2>/dev/null
    grep -hE 'WARN|ERROR' /tmp/granary-nlm-head2.log /tmp/granary-nlm-head3.log | tail -10
}
if [ "${KT_NLM_HEADS:-1}" != 0 ]; then heads_nlm; fi
echo "locks: $FAILS failed"
# Not waited for: the guest halts after this script (a wait here once did not return).
kill -9 "$SERVER" 2>/dev/null
[ "$FAILS" = 0 ]
