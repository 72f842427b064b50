# shellcheck shell=bash
# The two locks the cluster's commands take. The cluster lock: one up/down/cni/proxy-mode at a time
# on this machine. The measurement lock, /run/benchlib/collect.lock (benchlib/host/machine.py), which
# `benchlib collect` holds for its whole run: changing the cluster or the CPUs' load under it would
# spoil what it measures.

LOCK_DIR=${BENCHLIB_LOCK_DIR:-/run/benchlib}  # elsewhere only for tests
CLUSTER_LOCK=$LOCK_DIR/k8s-cluster.lock
MEASUREMENT_LOCK=$LOCK_DIR/collect.lock
MEASUREMENT_WAIT_S=7200  # down --wait: the longest a running measurement is waited for

with_cluster_lock() {  # with_cluster_lock <command...>
  mkdir -p "$(dirname "$CLUSTER_LOCK")"
  exec 8>"$CLUSTER_LOCK"
  flock -w 600 8 || die "another k8s-local-cluster.sh holds $CLUSTER_LOCK"
  "$@"
}

no_measurement_running() {  # no_measurement_running <what> [--wait]: refuse at once, or wait (bounded) for it to end
  [ -e "$MEASUREMENT_LOCK" ] || return 0
  exec 7>>"$MEASUREMENT_LOCK"  # >>: a refused attempt keeps the holder's line
  if ! flock -n 7; then
    [ "${2:-}" = --wait ] || die "a measurement is running ($(cat "$MEASUREMENT_LOCK")): $1 would disturb it; wait for it or stop it first (down --wait waits)"
    log "a measurement is running ($(cat "$MEASUREMENT_LOCK")): $1 waits for it to end (at most $MEASUREMENT_WAIT_S s)"
    flock -w "$MEASUREMENT_WAIT_S" 7 || die "the measurement still runs after $MEASUREMENT_WAIT_S s: $1 not done"
  fi
  flock -u 7
  exec 7>&-
}

holder_is_ancestor() {  # the measurement lock's holder ("pid N: ...") is this script or one of its parents
  local holder pid=$$
  holder=$(sed -n '1s/^pid \([0-9][0-9]*\):.*/\1/p' "$MEASUREMENT_LOCK")
  [ -n "$holder" ] || return 1
  while [ "$pid" -gt 1 ]; do
    [ "$pid" = "$holder" ] && return 0
    pid=$(awk '/^PPid:/ {print $2}' "/proc/$pid/status" 2>/dev/null) || return 1
    [ -n "$pid" ] || return 1
  done
  return 1
}

hold_measurement_lock() {  # hold_measurement_lock <what>: held until the script exits, or refused at once
  # A campaign's own scenario switches the cluster (its apply commands run `cni`) while it holds the
  # lock: that change is part of the measurement. Any other process is refused.
  mkdir -p "$(dirname "$MEASUREMENT_LOCK")"
  exec 7>>"$MEASUREMENT_LOCK"
  if flock -n 7; then
    : >"$MEASUREMENT_LOCK"
    echo "pid $$: k8s-local-cluster.sh $1" >&7
    return
  fi
  exec 7>&-
  holder_is_ancestor ||
    die "refused: a measurement is running ($(cat "$MEASUREMENT_LOCK")); $1 would change the cluster under it"
}
