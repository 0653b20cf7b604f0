#!/bin/bash
# The guest's side of test/vm/run.sh, started by the image's stove-vm-job.service with the run's disk
# at /repo: runs /repo/.vm/job there with its output on the virtio port stove.out, then writes
# "<nonce> exit <status> <uptime>" as the last line and powers the guest off.
set -u
out=/dev/virtio-ports/stove.out
for _ in $(seq 100); do [ -e "$out" ] && break; sleep 0.1; done
nonce=$(cat /repo/.vm/nonce)
printf '%s boot %s\n' "$nonce" "$(cut -d' ' -f1 /proc/uptime)" >"$out"
cd /repo
bash /repo/.vm/job >"$out" 2>&1 </dev/null
status=$?
printf '\n%s exit %d %s\n' "$nonce" "$status" "$(cut -d' ' -f1 /proc/uptime)" >"$out"
sync
# The disks are thrown away: no need to wait for units to stop. (The unit's SuccessAction does not fire
# for a unit of the boot transaction.) sysrq's power-off if systemd has not done it in 20 s.
systemctl --no-block poweroff --force
( sleep 20; echo o >/proc/sysrq-trigger ) &
exit 0
