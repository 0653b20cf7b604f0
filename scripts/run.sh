#!/usr/bin/env bash
# Starts `stove serve` in the background with its built-in defaults (or stops it with `run.sh stop`).
# Installs a default CNI network (bridge stove0, 10.85.0.0/16, portmap, loopback) only when the CNI conf
# dir holds no config yet, so pods get an IP out of the box.
set -euo pipefail
cd "$(dirname "$0")/.."

SOCK=${STOVE_SOCKET:-/run/stove/stove.sock}
CNI_CONF_DIR=${CNI_CONF_DIR:-/etc/cni/net.d}
LOG=${STOVE_LOG:-/var/log/stove/stove.log}
PIDFILE=/run/stove/stove.pid

running() { [[ -f $PIDFILE ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }

if [[ ${1:-} == stop ]]; then
  if running; then
    pid=$(cat "$PIDFILE"); kill -TERM "$pid"
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    rm -f "$PIDFILE"; echo "stove stopped"
  else
    echo "stove is not running"
  fi
  exit 0
fi

# Pods need no image: their pause container runs from the repository's rootfs/pause (make build).
if [[ ! -x rootfs/pause/bin/pause ]]; then
  echo "rootfs/pause/bin/pause is missing: run make build (or make setup) first" >&2
  exit 1
fi

mkdir -p "$CNI_CONF_DIR" "$(dirname "$LOG")" /run/stove
if ! ls "$CNI_CONF_DIR"/*.conf "$CNI_CONF_DIR"/*.conflist "$CNI_CONF_DIR"/*.json >/dev/null 2>&1; then
  install -m 0644 contrib/cni/10-stove-bridge.conflist "$CNI_CONF_DIR/10-stove-bridge.conflist"
  echo "installed default CNI network $CNI_CONF_DIR/10-stove-bridge.conflist"
fi

if running; then
  echo "stove already running (pid $(cat "$PIDFILE")) on unix://$SOCK"
  exit 0
fi
setsid bin/stove serve >>"$LOG" 2>&1 </dev/null &
echo $! >"$PIDFILE"
for _ in $(seq 1 100); do
  [[ -S $SOCK ]] && break
  running || break
  sleep 0.1
done
if ! running || [[ ! -S $SOCK ]]; then
  echo "stove failed to start; last lines of $LOG:" >&2
  tail -20 "$LOG" >&2
  exit 1
fi
echo "stove running (pid $(cat "$PIDFILE")) on unix://$SOCK, log $LOG"
