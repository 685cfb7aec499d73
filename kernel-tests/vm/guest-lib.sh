# shellcheck shell=bash
# Sourced INSIDE the vm.sh guest: start the reference NFS servers by hand (the guest has
# no systemd). Each function returns non-zero, having printed why, when its server did
# not come up.

# knfsd_start DIR: the kernel's nfsd exporting a fresh tmpfs at DIR to 127.0.0.1 (rw,
# no_root_squash, fsid=1), NFSv3 and v4 on port 2049 with rpcbind, mountd and statd.
# Grace and lease times are nfsd's minimum, 10 s, so a v4 OPEN soon after the start
# waits for at most that long.
knfsd_start() {
    local dir=$1
    mkdir -p "$dir" /var/lib/nfs/v4recovery || return 1
    mount -t tmpfs -o size=2G tmpfs "$dir" || { echo "knfsd_start: cannot mount a tmpfs at $dir"; return 1; }
    mountpoint -q /run/rpc_pipefs || mount -t rpc_pipefs rpc_pipefs /run/rpc_pipefs || return 1
    if ! mountpoint -q /proc/fs/nfsd; then
        modprobe nfsd && mount -t nfsd nfsd /proc/fs/nfsd ||
            { echo "knfsd_start: cannot load nfsd or mount /proc/fs/nfsd"; return 1; }
    fi
    pgrep -x rpcbind >/dev/null || rpcbind -w || { echo "knfsd_start: rpcbind did not start"; return 1; }
    echo "$dir 127.0.0.1(rw,sync,no_subtree_check,no_root_squash,insecure,fsid=1)" >/etc/exports
    exportfs -ra || { echo "knfsd_start: exportfs -ra failed"; return 1; }
    rpc.mountd || { echo "knfsd_start: rpc.mountd did not start"; return 1; }
    rpc.statd --no-notify 2>/dev/null || true
    rpc.nfsd --grace-time 10 --lease-time 10 4 || { echo "knfsd_start: rpc.nfsd failed"; return 1; }
}

# ganesha_start DIR: nfs-ganesha (Debian's 4.3) exporting a fresh tmpfs at DIR through
# FSAL VFS, NFSv3 and v4 on port 12049, MOUNT on 12050, registered with rpcbind (which
# ganesha requires). Its files are in /tmp/ganesha; waits until it is initialized.
ganesha_start() {
    local dir=$1 _
    mkdir -p "$dir" /tmp/ganesha/recovery /var/run/ganesha || return 1
    mount -t tmpfs -o size=2G tmpfs "$dir" || { echo "ganesha_start: cannot mount a tmpfs at $dir"; return 1; }
    pgrep -x rpcbind >/dev/null || rpcbind -w || { echo "ganesha_start: rpcbind did not start"; return 1; }
    # No Bind_addr: with only the loopback interface up, ganesha's lookup of 127.0.0.1
    # (getaddrinfo with AI_ADDRCONFIG) finds no address and it refuses to start.
    cat >/tmp/ganesha/ganesha.conf <<EOF
NFS_CORE_PARAM {
    NFS_Port = 12049; MNT_Port = 12050; NLM_Port = 12051; Rquota_Port = 12052;
    Enable_NLM = false; Enable_RQUOTA = false; Enable_UDP = false; Protocols = 3, 4;
}
NFSV4 { Graceless = true; Only_Numeric_Owners = true; RecoveryRoot = /tmp/ganesha/recovery; }
NFS_KRB5 { Active_krb5 = false; }
EXPORT {
    Export_Id = 1; Path = $dir; Pseudo = $dir; Protocols = 3, 4; Transports = TCP;
    SecType = sys; Access_Type = RW; Squash = No_Root_Squash;
    FSAL { Name = VFS; }
}
EOF
    ganesha.nfsd -f /tmp/ganesha/ganesha.conf -L /tmp/ganesha/ganesha.log -N NIV_EVENT \
        -p /tmp/ganesha/ganesha.pid || { echo "ganesha_start: ganesha.nfsd did not start"; return 1; }
    for _ in $(seq 150); do
        grep -q 'NFS SERVER INITIALIZED' /tmp/ganesha/ganesha.log 2>/dev/null && return 0
        sleep 0.2
    done
    echo "ganesha_start: not initialized after 30 s; its log ends:"
    tail -20 /tmp/ganesha/ganesha.log
    return 1
}

# host_net_up: bring up the NIC of `vm.sh run --host-net` (qemu's user network) with its
# fixed addresses: the guest is 10.0.2.15 and reaches the host's 127.0.0.1 at 10.0.2.2.
# No DHCP client runs: the addresses of qemu's user network do not change.
host_net_up() {
    modprobe -q virtio_net || { echo "host_net_up: modprobe virtio_net failed"; return 1; }
    for _ in $(seq 50); do [ -e /sys/class/net/eth0 ] && break; sleep 0.1; done
    [ -e /sys/class/net/eth0 ] || { echo "host_net_up: no eth0 (was the guest started with vm.sh run --host-net?)"; return 1; }
    ip link set eth0 up && ip addr add 10.0.2.15/24 dev eth0 || return 1
}
