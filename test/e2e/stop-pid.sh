# Sourced by the shell harnesses (test/e2e/cluster/lib.sh, test/e2e/critest.sh): stopping a process that
# is not the shell's own child, which `wait` cannot wait for.
# shellcheck shell=bash

# wait_pid_exit PID SECONDS — 0 once PID has exited, 1 when it still runs after SECONDS (looked at every
# 0.1 s: a process that is not our child gives no event to wait on).
wait_pid_exit() {
  local pid=$1 tenths=$(($2 * 10)) i
  for ((i = 0; i < tenths; i++)); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  ! kill -0 "$pid" 2>/dev/null
}

# stop_pid PID SECONDS [SIGNAL] — sends SIGNAL (default TERM), waits up to SECONDS for PID to exit, then
# kills it. 0 when it is gone (also when it was gone before).
stop_pid() {
  local pid=$1 seconds=$2
  kill -"${3:-TERM}" "$pid" 2>/dev/null || return 0
  wait_pid_exit "$pid" "$seconds" || kill -KILL "$pid" 2>/dev/null
  return 0
}
