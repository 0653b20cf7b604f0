# Sourced by test/e2e/cluster/lib.sh and multi/lib.sh (which define die and W): waiting for a cluster's
# part to come up while watching the processes it started.
# shellcheck shell=bash

# wait_for WHAT SECONDS CMD... — until CMD succeeds (tried every $WAIT_INTERVAL s, default 1); on time-out,
# the end of every log in $W/logs and a failure; a failure too when a process in $W/pids exits meanwhile.
wait_for() {
  local what=$1 limit=$2; shift 2
  local deadline=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      for f in "$W"/logs/*.log; do echo "--- ${f##*/}" >&2; tail -15 "$f" >&2; done
      die "$what did not come up within ${limit}s"
    fi
    for p in "$W"/pids/*; do
      [ -e "$p" ] || continue
      kill -0 "$(cat "$p")" 2>/dev/null || { tail -30 "$W/logs/${p##*/}.log" >&2; die "${p##*/} exited while waiting for $what"; }
    done
    sleep "${WAIT_INTERVAL:-1}"
  done
}
