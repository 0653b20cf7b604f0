#!/usr/bin/env bash
# Builds (once) the Debian 12 guest the VM suite boots: systemd as PID 1 on a pure cgroup v2 hierarchy,
# with runc, conmon, CNI plugins, iptables, AppArmor's tools, a docker-registry and CRIU. The image is
# cached outside the repo under STOVE_VM_CACHE (default /var/cache/stove-vm), in a directory named by a
# hash of this recipe, so that a change here builds a new one. Prints that directory (disk.raw, vmlinuz,
# initrd.img).
# As root; needs debootstrap and e2fsprogs, and Debian's archive. No loop mount: mkfs.ext4 -d.
set -euo pipefail

CACHE=${STOVE_VM_CACHE:-/var/cache/stove-vm}
MIRROR=${STOVE_VM_MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm
DISK_SIZE=8G
# What the guest needs beyond minbase: a booting systemd node, the runtime's own dependencies (as in
# scripts/setup.sh, with apparmor's parser and tools: the guest kernel has AppArmor on), the test
# suite's (busybox-static for test images, socat for port-forward, sudo for critest's AppArmor specs,
# which load their profiles with `sudo apparmor_parser`) and CRIU.
PACKAGES=(
  systemd systemd-sysv udev dbus linux-image-amd64 kmod iproute2 procps ca-certificates
  runc conmon crun containernetworking-plugins iptables util-linux zstd openssl apparmor
  docker-registry busybox-static socat sudo criu
)

here=$(cd "$(dirname "$0")" && pwd)
key=$(cat "$here/image.sh" "$here/guest/"* | sha256sum | cut -c1-16)
out="$CACHE/$key"
if [ -f "$out/ready" ]; then echo "$out"; exit 0; fi

mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9
if [ -f "$out/ready" ]; then echo "$out"; exit 0; fi

work=$(mktemp -d "$CACHE/build.XXXXXX")
# debootstrap mounts /proc and /sys in the target: it runs in a mount namespace of its own, so nothing
# it mounts reaches the host's table, even when it is interrupted.
cleanup() { rm -rf --one-file-system "$work"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

start=$(date +%s)
root="$work/rootfs"
echo "image: debootstrap $SUITE into $root ($(IFS=,; echo "${PACKAGES[*]}"))" >&2
unshare --mount --propagation private \
  debootstrap --variant=minbase --include="$(IFS=,; echo "${PACKAGES[*]}")" "$SUITE" "$root" "$MIRROR" \
  >"$work/debootstrap.log" 2>&1 || { tail -40 "$work/debootstrap.log" >&2; exit 1; }

# Root logs in without a password on the console (the guest has no network); the serial getty is off
# so that it never takes the console from the job.
sed -i 's/^root:[^:]*:/root::/' "$root/etc/shadow"
echo "/dev/vda / ext4 rw,errors=remount-ro 0 1" >"$root/etc/fstab"
echo stove-vm >"$root/etc/hostname"
printf '127.0.0.1 localhost stove-vm\n::1 localhost ip6-localhost\n' >"$root/etc/hosts"
ln -sf /dev/null "$root/etc/systemd/system/serial-getty@ttyS0.service"
ln -sf /dev/null "$root/etc/systemd/system/getty@tty1.service"
# The suite starts its own registry; nothing else of the guest's should listen or wait for a network.
for unit in docker-registry.service apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer \
  fstrim.timer systemd-networkd-wait-online.service; do
  ln -sf /dev/null "$root/etc/systemd/system/$unit"
done

install -m 0755 "$here/guest/stove-vm-job" "$root/usr/local/sbin/stove-vm-job"
install -m 0644 "$here/guest/stove-vm-job.service" "$root/etc/systemd/system/stove-vm-job.service"
ln -sf /etc/systemd/system/stove-vm-job.service "$root/etc/systemd/system/multi-user.target.wants/stove-vm-job.service"

cp "$root"/boot/vmlinuz-* "$work/vmlinuz"
cp "$root"/boot/initrd.img-* "$work/initrd.img"
rm -rf "$root/var/cache/apt/archives/"*.deb "$root/var/lib/apt/lists/"*
truncate -s "$DISK_SIZE" "$work/disk.raw"
mkfs.ext4 -q -F -L stove-vm -d "$root" "$work/disk.raw"
rm -rf --one-file-system "$root"

echo "$(( $(date +%s) - start ))" >"$work/build-seconds"
touch "$work/ready"
rm -rf "$out"
mv "$work" "$out"
echo "image: built $out in $(cat "$out/build-seconds")s" >&2
echo "$out"
