# shellcheck shell=bash
# A whole cluster: up (idempotent, bounded, cleaned up on failure), down (leaves nothing behind,
# even after a killed script, and nothing of another local cluster touched), and status; and every
# local cluster of this machine: list and down --all.

components() {  # what must run for a cluster of <nodes> nodes
  echo etcd kube-apiserver apiserver-forward kube-controller-manager kube-scheduler
  local n; for n in $(seq 1 "$1"); do echo "containerd$n" "kubelet$n"; done
  network_components "$1"
}

healthy() {  # healthy: a complete cluster runs (its `up` finished and every component is alive)
  [ -f "$STATE/up.done" ] || return 1
  local c; for c in $(components "$(cat "$STATE/nodes")"); do running "$c" || return 1; done
}

status() {
  if [ ! -d "$STATE" ]; then echo "down"; return 1; fi
  local nodes c rc=0
  nodes=$(cat "$STATE/nodes" 2>/dev/null || echo 2)
  for c in $(components "$nodes"); do
    if running "$c"; then echo "$c: running (pid $(pid_of "$c"))"; else echo "$c: not running"; rc=1; fi
  done
  [ -f "$STATE/up.done" ] || { echo "up did not finish (a killed or failed up: run down or up)"; rc=1; }
  if [ $rc = 0 ]; then
    echo "pod network (cni proxy-mode routing lb): $(cat "$STATE/network")"
    kubectl get nodes -o wide
    echo "KUBECONFIG=$STATE/admin.kubeconfig"
    echo "context: $KUBE_CONTEXT (API forwarded to 127.0.0.1:$HOST_API_PORT)"
  fi
  return $rc
}

list_clusters() {  # every local cluster that is up: name, nodes, pod network, kubeconfig, context (tab-separated)
  local name found=""
  for name in $(local_clusters); do
    found=1
    (
      cluster_identity "$name"
      if healthy; then
        printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$(cat "$STATE/nodes")" "$(cat "$STATE/network")" "$STATE/admin.kubeconfig" "$KUBE_CONTEXT"
      else
        log "cluster $name is not up, or not every component runs ($0 ${CLUSTER_OPT}status says which; down or up cleans it)"
      fi
    )
  done
  [ -n "$found" ] || log "no local cluster is up"
}

down_all() {  # every local cluster down, the default one last
  local name
  if [ -z "$(local_clusters)" ]; then log "no local cluster: nothing to take down"; return; fi
  for name in $(local_clusters | grep -vx default) $(local_clusters | grep -x default); do
    log "cluster $name: down"
    ( cluster_identity "$name"; down )
  done
}

check_prerequisites() {
  [ "$(id -u)" = 0 ] || die "must run as root (network namespaces, containerd, the kubelet)"
  [ -x "$HYPERKUBE" ] || die "no binary at $HYPERKUBE: run '$0 build' first"
  local missing=() c
  for c in containerd runc ctr nsenter socat curl openssl conntrack iptables nft gcc busybox; do
    command -v "$c" >/dev/null || missing+=("$c")
  done
  [ ${#missing[@]} = 0 ] || die "missing commands: ${missing[*]} (bash scripts/setup.sh cluster installs them)"
  [ -x /usr/lib/cni/bridge ] || die "missing the CNI plugins in /usr/lib/cni (apt-get install containernetworking-plugins)"
}

up() {  # up <nodes> <cni> <proxy-mode> <routing> <lb>
  local nodes=$1 network_spec="${*:2}" n
  check_prerequisites
  if healthy && [ "$(cat "$STATE/nodes")" = "$nodes" ]; then
    log "already up ($nodes node(s))"
    pod_network "${@:2}"
    return
  fi
  [ -d "$STATE" ] && { log "removing an incomplete or different cluster first"; down; }
  local t0=$SECONDS
  mkdir -p "$STATE/logs" "$STATE/run"
  echo "$nodes" >"$STATE/nodes"
  if [ -n "$CLUSTER_NAME" ]; then HOST_API_PORT=$(choose_api_port); fi
  echo "$HOST_API_PORT" >"$STATE/api-port"
  save_sysctls
  trap 'log "up failed: cleaning up"; trap - EXIT; down >/dev/null 2>&1 || true' EXIT
  images
  pki
  network "$nodes"
  control_plane
  log "control plane ready after $((SECONDS - t0)) s"
  for n in $(seq 1 "$nodes"); do node "$n"; done
  pod_network "${@:2}"
  trap - EXIT
  touch "$STATE/up.done"
  log "up: $nodes node(s) Ready, pod network $network_spec, after $((SECONDS - t0)) s; KUBECONFIG=$STATE/admin.kubeconfig (context $KUBE_CONTEXT)"
}

thaw_quiet() {  # benchlib's quiet windows (benchlib/targets/kubernetes/quiet.py): a frozen daemon would not stop
  # A window's cgroup is benchlib-quiet-<owner pid>. Thawed: a dead owner's, and one holding this
  # cluster's daemons (no measurement runs: `down` waits for it, or is refused); never another
  # cluster's, whose live window is no business of this cluster's `down`.
  local c pid
  for c in /sys/fs/cgroup/freezer/benchlib-quiet-* /sys/fs/cgroup/benchlib-quiet-* /sys/fs/cgroup/unified/benchlib-quiet-*; do
    [ -d "$c" ] || continue
    if kill -0 "${c##*benchlib-quiet-}" 2>/dev/null && ! holds_own_daemon "$c"; then continue; fi
    if [ -f "$c/freezer.state" ]; then echo THAWED >"$c/freezer.state"; else echo 0 >"$c/cgroup.freeze"; fi
    while read -r pid; do echo "$pid" >"$(dirname "$c")/cgroup.procs" 2>/dev/null || true; done <"$c/cgroup.procs"
    rmdir "$c" 2>/dev/null || true
  done
}

holds_own_daemon() {  # holds_own_daemon <cgroup>: a process of this cluster's pid files is in it
  local pid
  while read -r pid; do
    grep -qsx "$pid" "$STATE"/run/*.pid && return 0
  done <"$1/cgroup.procs"
  return 1
}

down() {
  local t0=$SECONDS n c
  thaw_quiet
  if [ ! -d "$STATE" ] && ! ip netns list | grep -Eq "^$PREFIX-node[0-9]+( |$)"; then log "nothing to take down"; return; fi
  mkdir -p "$STATE/run"
  # the nodes' daemons get 2 s, then are killed: their state goes with the cluster, and Cilium's agent
  # hangs after TERM
  # shellcheck disable=SC2046 # daemon names, one a word
  signal_daemons TERM 20 apiserver-forward kube-proxy1 kube-proxy2 kubelet1 kubelet2 $(for c in "${CNIS[@]}"; do "${c}_components" 2; done)
  for n in 1 2; do
    local sock="$STATE/node$n/containerd/containerd.sock" t
    if [ -S "$sock" ] && running "containerd$n"; then
      # the shims outlive containerd: kill the tasks through it first
      for t in $(ctr_of "$n" tasks ls -q 2>/dev/null); do ctr_of "$n" tasks kill -s SIGKILL "$t" 2>/dev/null || true; done
      for t in $(ctr_of "$n" tasks ls -q 2>/dev/null); do ctr_of "$n" tasks rm -f "$t" 2>/dev/null || true; done
    fi
  done
  stop_daemons containerd1 containerd2 kube-scheduler kube-controller-manager kube-apiserver etcd
  # anything still running from the state dir (shims, pods of a killed cluster)
  local pid
  for pid in $(pgrep -f -- "$STATE/" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
  for n in 1 2; do ip netns pids "$(netns "$n")" 2>/dev/null | xargs -r kill -9 2>/dev/null || true; done
  # pod netns bind mounts and container rootfs mounts, deepest first
  awk -v s="$STATE/" 'index($2, s) == 1 {print $2}' /proc/self/mounts | sort -r |
    while read -r m; do umount -l "$m" 2>/dev/null || true; done
  for n in 1 2; do ip netns del "$(netns "$n")" 2>/dev/null || true; done
  remove_node_cgroups
  remove_host_paths
  put_host_back
  rm -rf "$STATE"
  log "down after $((SECONDS - t0)) s"
}
