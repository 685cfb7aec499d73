#!/usr/bin/env bash
# granary's Debian 12 guest: the Linux kernel NFS client, knfsd and nfs-ganesha under
# qemu, for the kernel-client suite (kernel-tests/) on hosts that have none of them.
#
#   vm.sh build                 make the guest in $VM_DIR if it is not there or stale
#   vm.sh run [opts] -- CMD...  boot it, run CMD as root in it, power off; exit with
#                               CMD's status (124: timed out, 255: no status came back)
#     --share DIR    mount host DIR (virtio-9p) at the same path in the guest; repeatable
#     --mem SIZE     guest memory (default 4G)       --cpus N   vCPUs (default 2)
#     --timeout S    kill the guest after S s (default 900)
#     --accel A      auto (default), kvm or tcg     --verbose  print the kernel console
#     --host-net     a virtio NIC on qemu's user network: the guest (10.0.2.15 once it
#                    brings eth0 up, guest-lib.sh host_net_up) reaches the host's
#                    127.0.0.1 at 10.0.2.2; nothing reaches the guest from outside
#   vm.sh packages              print the guest's Debian packages
#
# Env: VM_DIR (default ~/.cache/granary/vm), VM_MIRROR (default
# http://deb.debian.org/debian), VM_EXTRA_PKGS (more packages; a new cache key),
# VM_ACCEL, VM_APPEND (kernel parameters), VM_TIMING=1 (boot time on stderr).
# Host: root, and apt-get install qemu-system-x86 mmdebstrap cpio e2fsprogs.
# See kernel-tests/vm/README.md for what the guest is and why it boots this way.
set -euo pipefail

VM_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
VM_DIR=${VM_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/granary/vm}
SUITE=bookworm
MIRROR=${VM_MIRROR:-http://deb.debian.org/debian}

# What the suite runs in the guest (kernel-tests/guest/*.sh and *.py) and what later
# checks need (ACLs, quotas, ext4 tools, SQLite locking, Python).
PACKAGES=(
    linux-image-amd64 kmod busybox-static procps iproute2 psmisc netbase util-linux
    nfs-common nfs-kernel-server rpcbind
    nfs-ganesha nfs-ganesha-vfs nfs-ganesha-mem
    fio stress-ng strace python3 perl
    acl quota e2fsprogs sqlite3
)
read -r -a extra <<<"${VM_EXTRA_PKGS:-}"
PACKAGES+=("${extra[@]}")

# Modules the initramfs loads before it can mount the root disk and the control share;
# their dependencies are added from the kernel's modules.dep.
BOOT_MODULES=(virtio_pci virtio_blk ext4 9pnet_virtio 9p)

fail() {
    echo "vm.sh: $*" >&2
    exit 2
}

usage() {
    sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"
    exit 2
}

need_tools() {
    local t missing=()
    for t in "$@"; do command -v "$t" >/dev/null || missing+=("$t"); done
    [ ${#missing[@]} = 0 ] ||
        fail "missing ${missing[*]}: apt-get install qemu-system-x86 mmdebstrap cpio e2fsprogs"
}

key_of() { sha256sum | cut -c1-20; }

# ------------------------------------------------------------------------------ build

# The root file system as a directory, from Debian's packages. initramfs-tools comes in
# as the kernel package's dependency; its update-initramfs is diverted to /bin/true
# before it is unpacked, because vm.sh makes its own initramfs (make_initramfs) and
# Debian's would cost its build time for nothing.
make_rootfs() {
    local dest=$1
    rm -rf "$dest"
    mmdebstrap --variant=minbase --include="$(IFS=,; echo "${PACKAGES[*]}")" \
        --essential-hook='chroot "$1" dpkg-divert --quiet --local --rename --add /usr/sbin/update-initramfs' \
        --essential-hook='ln -s /bin/true "$1/usr/sbin/update-initramfs"' \
        --customize-hook='echo granary-vm >"$1/etc/hostname"' \
        --customize-hook='printf "127.0.0.1 localhost granary-vm\n::1 localhost\n" >"$1/etc/hosts"' \
        --customize-hook='rm -f "$1/etc/machine-id"; ln -sfn ../proc/self/mounts "$1/etc/mtab"' \
        "$SUITE" "$dest" \
        "deb $MIRROR $SUITE main" "deb $MIRROR $SUITE-updates main" \
        "deb ${MIRROR%/debian}/debian-security $SUITE-security main"
}

# The initramfs: a static busybox, the boot modules and initramfs-init; nothing else.
make_initramfs() {
    local rootfs=$1 kver=$2 out=$3 tree m f
    tree=$(mktemp -d "$VM_DIR/initramfs.XXXXXX")
    mkdir -p "$tree"/{bin,dev,proc,sys,newroot}
    cp "$rootfs/bin/busybox" "$tree/bin/busybox"
    cp "$VM_HERE/initramfs-init" "$tree/init"
    chmod 755 "$tree/init"
    # modprobe --show-depends prints "insmod PATH" lines, dependencies first.
    for m in "${BOOT_MODULES[@]}"; do
        chroot "$rootfs" modprobe --set-version "$kver" --show-depends "$m"
    done | awk '$1 == "insmod" && !seen[$2]++ { print $2 }' >"$tree/modules"
    while read -r f; do
        mkdir -p "$tree/$(dirname "$f")"
        cp "$rootfs/$f" "$tree/$f"
    done <"$tree/modules"
    (cd "$tree" && find . -print0 | cpio --null -o -H newc --quiet) | gzip -1 >"$out"
    rm -rf "$tree"
}

# The bootable guest: kernel, initramfs and an ext4 image of the root file system with
# the guest's init in it.
make_image() {
    local rootfs=$1 kernel kver mib
    install -m 755 "$VM_HERE/guest-init" "$rootfs/usr/local/sbin/granary-vm-init"
    kernel=$(find "$rootfs/boot" -name 'vmlinuz-*' | sort -V | tail -1)
    [ -n "$kernel" ] || fail "no kernel in $rootfs/boot"
    kver=${kernel##*/vmlinuz-}
    cp "$kernel" "$VM_DIR/vmlinuz.new"
    make_initramfs "$rootfs" "$kver" "$VM_DIR/initramfs.new"
    # 1 GiB free beside the files: the suite makes a 768 MiB sparse ext4 image on it.
    mib=$(($(du -sm "$rootfs" | cut -f1) + 1024))
    rm -f "$VM_DIR/root.img.new"
    mke2fs -q -t ext4 -L granary-vm -d "$rootfs" "$VM_DIR/root.img.new" "${mib}M"
    mv "$VM_DIR/vmlinuz.new" "$VM_DIR/vmlinuz"
    mv "$VM_DIR/initramfs.new" "$VM_DIR/initramfs"
    mv "$VM_DIR/root.img.new" "$VM_DIR/root.img"
    echo "vm.sh: image ready: kernel $kver, root ${mib} MiB (sparse)" >&2
}

# Two cache levels: the root file system (the slow part, downloads) is kept until the
# package list changes; the image until the root file system or a guest file changes.
build() {
    need_tools mmdebstrap mke2fs cpio gzip qemu-system-x86_64
    [ "$(id -u)" = 0 ] || fail "build needs root (mmdebstrap into a directory, chroot, file owners)"
    mkdir -p "$VM_DIR"
    # One build at a time per VM_DIR; a second caller waits and then finds it done.
    exec 9>"$VM_DIR/lock"
    flock 9
    local began=$SECONDS rootfs_key image_key
    rootfs_key=$(printf '%s\n' "$SUITE" "$MIRROR" "${PACKAGES[@]}" | key_of)
    image_key=$( (echo "$rootfs_key" "${BOOT_MODULES[*]}"
        cat "$VM_HERE/guest-init" "$VM_HERE/initramfs-init"
        declare -f make_image make_initramfs) | key_of)
    if [ "$(cat "$VM_DIR/rootfs.key" 2>/dev/null)" != "$rootfs_key" ]; then
        rm -f "$VM_DIR/rootfs.key" "$VM_DIR/image.key"
        echo "vm.sh: mmdebstrap $SUITE (${#PACKAGES[@]} packages and their dependencies)" >&2
        make_rootfs "$VM_DIR/rootfs" >&2
        echo "$rootfs_key" >"$VM_DIR/rootfs.key"
    fi
    if [ "$(cat "$VM_DIR/image.key" 2>/dev/null)" != "$image_key" ]; then
        rm -f "$VM_DIR/image.key"
        make_image "$VM_DIR/rootfs"
        echo "$image_key" >"$VM_DIR/image.key"
    fi
    echo "vm.sh: guest in $VM_DIR ready ($((SECONDS - began)) s)" >&2
}

# -------------------------------------------------------------------------------- run

# kvm only where the CPU has VT-x or AMD-V: a /dev/kvm without them (kvm_pvm) runs only
# PVM guest kernels and hangs Debian's kernel at boot.
pick_accel() {
    if [ "$1" != auto ]; then
        echo "$1"
    elif [ -w /dev/kvm ] && grep -qwE 'vmx|svm' /proc/cpuinfo; then
        echo kvm
    else
        echo tcg
    fi
}

run() {
    local mem=4G cpus=2 timeout=900 accel=${VM_ACCEL:-auto} verbose=0 shares=() nic=(-nic none)
    while [ $# -gt 0 ]; do
        case $1 in
        --share) [ -d "${2:-}" ] || fail "--share ${2:-}: no such directory"
            shares+=("$(realpath "$2")"); shift 2 ;;
        --mem) mem=$2; shift 2 ;;
        --cpus) cpus=$2; shift 2 ;;
        --timeout) timeout=$2; shift 2 ;;
        --accel) accel=$2; shift 2 ;;
        --verbose) verbose=1; shift ;;
        # qemu's user network (slirp): no listening socket on the host, no host
        # forwarding; the guest's connections to 10.0.2.2 leave from the host's loopback.
        --host-net) nic=(-nic user,model=virtio-net-pci,ipv6=off); shift ;;
        --) shift; break ;;
        *) fail "run: unknown option $1 (vm.sh run [options] -- COMMAND...)" ;;
        esac
    done
    [ $# -gt 0 ] || fail "run: no command (vm.sh run [options] -- COMMAND...)"
    [ -f "$VM_DIR/image.key" ] || fail "no guest in $VM_DIR: run vm.sh build first"
    need_tools qemu-system-x86_64
    accel=$(pick_accel "$accel")
    local cpu
    case $accel in
    kvm) cpu=(-accel kvm -cpu host) ;;
    # An x86-64-v2 CPU, not -cpu max: given AVX the guest's copy routines take paths
    # that TCG emulates several times slower.
    tcg) cpu=(-accel tcg,thread=multi,tb-size=1024
        -cpu qemu64,+ssse3,+sse4.1,+sse4.2,+popcnt,+cx16) ;;
    *) fail "--accel: auto, kvm or tcg" ;;
    esac

    # The control directory, shared with the guest as tag "ctl": what to run (cmd),
    # where (cwd) and what to mount (shares); the guest writes back rc and started.
    local ctl
    ctl=$(mktemp -d /tmp/granary-vm.XXXXXX)
    # shellcheck disable=SC2064 # expand now: ctl is local
    trap "rm -rf '$ctl'" EXIT
    printf '%q ' "$@" >"$ctl/cmd"
    printf '%s\n' "$PWD" >"$ctl/cwd"
    local i=0 s virtfs=()
    : >"$ctl/shares"
    for s in "${shares[@]}"; do
        printf 'share%d %s\n' "$i" "$s" >>"$ctl/shares"
        virtfs+=(-virtfs "local,path=$s,mount_tag=share$i,security_model=none,multidevs=remap")
        i=$((i + 1))
    done

    # q35 and -kernel/-initrd skip the firmware's disk probing; lpj= and tsc=reliable
    # skip the delay-loop calibration and clock checks that are slow under TCG. The root
    # disk is a snapshot: each boot starts from the image and its writes vanish.
    # The boot time: from here until the guest's init creates ctl/started.
    local began=$EPOCHREALTIME rc=0 watcher
    (while [ ! -e "$ctl/started" ]; do sleep 0.2; done; echo "$EPOCHREALTIME" >"$ctl/booted") &
    watcher=$!
    timeout -k 5 "$timeout" qemu-system-x86_64 -nodefaults -no-user-config -machine q35 \
        "${cpu[@]}" -smp "$cpus" -m "$mem" "${nic[@]}" -display none -vga none -no-reboot \
        -kernel "$VM_DIR/vmlinuz" -initrd "$VM_DIR/initramfs" \
        -append "console=ttyS1 quiet loglevel=4 panic=-1 tsc=reliable lpj=10000000 ${VM_APPEND:-}" \
        -drive "file=$VM_DIR/root.img,format=raw,if=virtio,snapshot=on,cache=unsafe" \
        -chardev stdio,id=out -serial chardev:out -serial "file:$ctl/console" \
        -virtfs "local,path=$ctl,mount_tag=ctl,security_model=none" \
        "${virtfs[@]}" </dev/null || rc=$?
    local ended=$EPOCHREALTIME
    kill "$watcher" 2>/dev/null || true
    wait "$watcher" 2>/dev/null || true
    [ "$verbose" = 0 ] || cat "$ctl/console" >&2
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
        echo "vm.sh: the guest did not finish within $timeout s; its console ends:" >&2
        tail -20 "$ctl/console" >&2
        exit 124
    fi
    if [ -f "$ctl/booted" ]; then
        awk -v a="$began" -v b="$(cat "$ctl/booted")" -v c="$ended" -v acc="$accel" \
            'BEGIN { printf "vm.sh: boot %.1f s, total %.1f s (accel %s)\n", b - a, c - a, acc }' \
            >"$ctl/timing"
        [ "${VM_TIMING:-0}" = 0 ] && [ "$verbose" = 0 ] || cat "$ctl/timing" >&2
    fi
    if [ ! -f "$ctl/rc" ]; then
        echo "vm.sh: the guest ended without a status (qemu exit $rc); its console ends:" >&2
        tail -30 "$ctl/console" >&2
        exit 255
    fi
    exit "$(cat "$ctl/rc")"
}

case ${1:-} in
build) shift; [ $# = 0 ] || VM_DIR=$1; build ;;
run) shift; run "$@" ;;
packages) printf '%s\n' "${PACKAGES[@]}" ;;
*) usage ;;
esac
