# shellcheck shell=bash
# The cluster's host processes, supervised by PID: each started detached with its log under
# $STATE/logs, stopped TERM-then-KILL, and waited for with a bound, showing its log tail on failure.

daemon() {  # daemon <name> <node|-> <command...>: detached (own session), PID recorded
  local name=$1 node=$2; shift 2
  local prefix=()
  [ "$node" = - ] || prefix=(nsenter --net="/run/netns/$(netns "$node")")
  # nsenter execs the program, so the recorded PID is the program's own; the daemon must not
  # inherit the script's lock descriptors (7, 8, 9), or it holds the lock
  setsid "${prefix[@]}" "$@" >"$STATE/logs/$name.log" 2>&1 </dev/null 7>&- 8>&- 9>&- &
  echo $! >"$STATE/run/$name.pid"
}

pid_of() { [ -f "$STATE/run/$1.pid" ] && cat "$STATE/run/$1.pid"; }
running() { local pid; pid=$(pid_of "$1") && kill -0 "$pid" 2>/dev/null; }

stop_daemons() {  # stop_daemons <name...>: TERM all at once, KILL what is left after 10 s, gone on return
  signal_daemons TERM 100 "$@"
}

kill_daemons() {  # kill_daemons <name...>: KILL all at once, gone on return (for a daemon that hangs after TERM)
  signal_daemons KILL 0 "$@"
}

signal_daemons() {  # signal_daemons <signal> <tenths of a second> <name...>: the signal, then KILL after the bound
  local sig=$1 bound=$2 pids=() n pid
  shift 2
  for n in "$@"; do
    pid=$(pid_of "$n") || continue
    kill -s "$sig" "$pid" 2>/dev/null && pids+=("$pid")
  done
  await_exit "$bound" "${pids[@]}" || {
    for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
    # a killed process lingers while the kernel tears down what it held (its mount namespace,
    # sockets): the caller's next step must not find it
    await_exit 50 "${pids[@]}" || true
  }
  for n in "$@"; do rm -f "$STATE/run/$n.pid"; done
}

await_exit() {  # await_exit <tenths of a second> <pid...>: 0 once none is alive, 1 at the bound
  local bound=$1 pid alive
  shift
  for _ in $(seq "$bound"); do
    alive=0
    for pid in "$@"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && return 0
    sleep 0.1
  done
  return 1
}

fail() {  # fail <component> <message>: the message and the component's log tail
  printf 'k8s-local-cluster.sh: %s\n' "$2" >&2
  if [ -f "$STATE/logs/$1.log" ]; then
    printf -- '--- last lines of %s ---\n' "$STATE/logs/$1.log" >&2
    tail -25 "$STATE/logs/$1.log" >&2
  fi
  exit 1
}

wait_for() {  # wait_for <component> <what> <command...>: retry until it succeeds, bounded
  local component=$1 what=$2; shift 2
  local deadline=$((SECONDS + TIMEOUT_S))
  until "$@" >/dev/null 2>&1; do
    running "$component" || fail "$component" "$component exited while waiting for $what"
    [ $SECONDS -lt $deadline ] || fail "$component" "timed out after ${TIMEOUT_S}s waiting for $what"
    sleep 0.2
  done
}
