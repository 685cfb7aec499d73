#!/usr/bin/env bash
# nfs-ganesha peer (Debian's package): NFSv3 and v4 on 127.0.0.1, NFS port 12049, MOUNT
# port 12050, NLM port 12051 (its NLM needs an rpc.statd: start runs one, with its own
# state directory, when none is registered).
#   ganesha.sh install          apt-get install nfs-ganesha (+ FSALs VFS, MEM), rpcbind,
#                               nfs-common (rpc.statd)
#   ganesha.sh start [mem]      FSAL MEM export /mem (keeps only each file's first 2 MiB)
#   ganesha.sh start dir DIR    FSAL VFS export of DIR (a tmpfs directory for real data)
#   ganesha.sh stop             stop it (and the rpc.statd it started, and the rpcbind it
#                               started if nothing else uses it)
#   ganesha.sh url              the libnfs URL of the running export
# ganesha registers with rpcbind and will not start without it: start runs one when
# nothing listens on port 111. GANESHA_LOG_LEVEL=NIV_DEBUG for a verbose log.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

RUN=$PEERS_RUN/ganesha
NFS_PORT=12049
MNT_PORT=12050
NLM_PORT=12051
PACKAGES=(nfs-ganesha nfs-ganesha-vfs nfs-ganesha-mem rpcbind nfs-common)

# config PATH FSAL: the ganesha.conf of one export. Path and Pseudo are both the URL's
# path: an NFSv3 MOUNT is matched against Path, and one that matches no export falls to
# ganesha's v4 pseudo root and is refused.
config() {
    cat <<CONF
NFS_CORE_PARAM {
    Bind_addr = 127.0.0.1;
    NFS_Port = $NFS_PORT; MNT_Port = $MNT_PORT; NLM_Port = $NLM_PORT;
    Protocols = 3, 4; Enable_UDP = false; Enable_NLM = true; Enable_RQUOTA = false;
    Dbus_Name_Prefix = granarypeer;
}
NFS_KRB5 { Active_krb5 = false; }
NFSV4 { Graceless = true; Only_Numeric_Owners = true; RecoveryRoot = $RUN/recovery; }
EXPORT {
    Export_Id = 1; Path = $1; Pseudo = $1;
    Protocols = 3, 4; Transports = TCP; SecType = sys;
    # libnfs as a user binds ports above 1023.
    PrivilegedPort = false;
    Access_Type = None;
    CLIENT { Clients = 127.0.0.1; Access_Type = RW; Squash = No_Root_Squash; }
    # 1 MiB I/O sizes, as the other peers and granary offer (libnfs caps at 1 MiB).
    MaxRead = 1048576; MaxWrite = 1048576; PrefRead = 1048576; PrefWrite = 1048576;
    FSAL { Name = $2; }
}
# FSAL MEM keeps at most Inode_Size bytes of a file (2 MiB is its largest); it is a sink
# for small-file and metadata workloads, not a store.
MEM { Inode_Size = 2097152; }
CONF
}

install() {
    local missing=() p
    for p in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        [ "$(id -u)" = 0 ] || die "installing ${missing[*]} needs root (apt-get)"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
    fi
    ganesha.nfsd -v | grep -m1 Release || true
}

start() {
    local path fsal
    path=$(export_path "$@")
    [ "${1:-mem}" = mem ] && fsal=MEM || fsal=VFS
    command -v ganesha.nfsd >/dev/null || install >/dev/null
    ! ours "$RUN/server.pid" ganesha.nfsd || die "already running; stop it first"
    if listens $NFS_PORT || listens $MNT_PORT || listens $NLM_PORT; then
        die "port $NFS_PORT, $MNT_PORT or $NLM_PORT is in use"
    fi
    mkdir -p "$RUN/recovery"
    config "$path" "$fsal" >"$RUN/ganesha.conf"
    if ! listens 111; then
        launch "$RUN/rpcbind.pid" "$RUN/rpcbind.log" rpcbind -f
        await 5 "$RUN/rpcbind.pid" listens 111 || die "rpcbind did not start ($RUN/rpcbind.log)"
    fi
    # ganesha's NLM asks the host's statd to monitor each client before it grants a lock.
    if ! rpcinfo -p 127.0.0.1 2>/dev/null | awk '$1 == 100024' | grep -q .; then
        mkdir -p "$RUN/statd/sm" "$RUN/statd/sm.bak"
        launch "$RUN/statd.pid" "$RUN/statd.log" rpc.statd -F --no-notify -P "$RUN/statd"
        await 5 "$RUN/statd.pid" sh -c "rpcinfo -p 127.0.0.1 | awk '\$1 == 100024' | grep -q ." ||
            die "rpc.statd did not register ($RUN/statd.log)"
    fi
    : >"$RUN/ganesha.log"
    launch "$RUN/server.pid" "$RUN/stdout.log" ganesha.nfsd -F -f "$RUN/ganesha.conf" \
        -L "$RUN/ganesha.log" -N "${GANESHA_LOG_LEVEL:-NIV_EVENT}" -p "$RUN/ganesha.pid"
    echo "$path" >"$RUN/export"
    if ! await 30 "$RUN/server.pid" grep -q 'NFS SERVER INITIALIZED' "$RUN/ganesha.log"; then
        grep -E ':(CRIT|MAJ|FATAL) ' "$RUN/ganesha.log" | tail -5 >&2 || true
        stop >&2
        die "ganesha did not start; its log: $RUN/ganesha.log"
    fi
    echo "ganesha FSAL $fsal, pid $(cat "$RUN/server.pid"), log $RUN/ganesha.log"
    echo "$(nfs_url "$path" $NFS_PORT $MNT_PORT)&nlmport=$NLM_PORT"
}

stop() {
    halt "$RUN/server.pid" ganesha.nfsd $NFS_PORT $MNT_PORT $NLM_PORT
    [ -f "$RUN/statd.pid" ] && halt "$RUN/statd.pid" rpc.statd
    [ -f "$RUN/rpcbind.pid" ] || return 0
    # Programs other than rpcbind's own (100000) still registered: someone uses it.
    if rpcinfo -p 127.0.0.1 2>/dev/null | awk 'NR > 1 && $1 != 100000' | grep -q .; then
        echo "rpcbind left running: other RPC programs are registered"
    else
        halt "$RUN/rpcbind.pid" rpcbind
    fi
}

mkdir -p "$RUN"
case ${1:-} in
install) install ;;
start) shift; start "$@" ;;
stop) stop ;;
url) ours "$RUN/server.pid" ganesha.nfsd || die "not running"
    echo "$(nfs_url "$(cat "$RUN/export")" $NFS_PORT $MNT_PORT)&nlmport=$NLM_PORT" ;;
*) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 2 ;;
esac
