# shellcheck shell=bash
# Cilium as the local cluster's CNI (built by cilium-build.sh): an operator in node 1 and one agent
# per node, a host process inside its node's network namespace AND a private mount namespace, so
# that nothing machine-wide changes (see cilium_agent). With kube-proxy, or replacing it (eBPF
# Services, translated at connect() or per packet). See pod-network.sh for the functions every CNI
# defines.
CNIS+=(cilium)

# the module's source: the datapath's C sources the agent compiles (cilium_agent)
CILIUM_SRC="$GOMODCACHE/github.com/cilium/cilium@v$CILIUM_VERSION"
# The operator's health API, inside node 1 (its default port would do; named here to find it)
CILIUM_OPERATOR_API=127.0.0.1:9234

cilium_network() {  # cilium_network <command> <proxy-mode> [--routing tunnel|native] [--lb socket|packet]
  local cmd=$1 proxy=${2:-none} routing=tunnel lb=""
  shift 2
  while [ $# -gt 0 ]; do
    case $1 in
      --routing) routing=$2 ;;
      --lb) lb=$2 ;;
      *) bad_input "$cmd: unknown argument '$1' (see $0 --help)" ;;
    esac
    shift 2
  done
  case $routing in tunnel|native) ;; *) bad_input "--routing $routing: choose tunnel or native" ;; esac
  if [ "$proxy" = none ]; then
    lb=${lb:-socket}
    case $lb in socket|packet) ;; *) bad_input "--lb $lb: choose socket or packet" ;; esac
  else
    [ -z "$lb" ] || bad_input "--lb: with kube-proxy running, kube-proxy balances Services (drop --lb or use --proxy-mode none)"
    lb=-
  fi
  echo "$proxy $routing $lb"
}

cilium_follows_proxy() { true; }  # the agent's flags depend on kube-proxy's mode
cilium_packages() { echo bpftool; }  # the agent probes the kernel with it; the teardown detaches programs
cilium_commands() { echo bpftool; }

cilium_components() {  # cilium_components <nodes>
  echo cilium-operator
  local n; for n in $(seq 1 "$1"); do echo "cilium-agent$n"; done
}

cilium_dir() { echo "$STATE/node$1/cilium"; }

unified_cgroup() {  # the cgroup2 hierarchy: /sys/fs/cgroup/unified (hybrid) or /sys/fs/cgroup (v2 only)
  if [ "$(stat -f -c %T /sys/fs/cgroup/unified 2>/dev/null)" = cgroup2fs ]; then echo /sys/fs/cgroup/unified
  elif [ "$(stat -f -c %T /sys/fs/cgroup)" = cgroup2fs ]; then echo /sys/fs/cgroup
  else die "no cgroup2 hierarchy: Cilium's socket load balancer needs one"; fi
}

cilium_flags() {  # cilium_flags <node> <proxy-mode> <routing> <lb>: the agent's command line
  local proxy=$2 routing=$3 lb=$4
  echo --k8s-kubeconfig-path="$STATE/cp.kubeconfig" --cluster-name=default --cluster-id=0
  echo --ipam=kubernetes --k8s-require-ipv4-pod-cidr=true --enable-ipv4=true --enable-ipv6=false
  echo --enable-ipv4-masquerade=false --devices=wire0 --direct-routing-device=wire0
  # the cgroup its socket load balancer attaches to: see cilium_agent
  echo --lib-dir="$(cilium_dir "$1")/lib" --cgroup-root=/run/cilium/cgroupv2
  # no Envoy, Hubble or health endpoints: nothing here needs them, and they need images
  echo --enable-l7-proxy=false --enable-hubble=false
  echo --enable-health-checking=false --enable-endpoint-health-checking=false
  # the CNI config is ours to write (cilium_cni_config); never touch another
  echo --cni-exclusive=false
  case $routing in
    tunnel) echo --routing-mode=tunnel --tunnel-protocol=vxlan ;;
    native) echo --routing-mode=native --ipv4-native-routing-cidr="$CLUSTER_CIDR" --auto-direct-node-routes=true ;;
  esac
  if [ "$proxy" = none ]; then
    echo --kube-proxy-replacement=true
    # per-packet: socket-level translation only for the node's own processes;
    # pods' connections are translated by the tc programs, packet by packet
    [ "$lb" = packet ] && echo --bpf-lb-sock-hostns-only=true
  else
    echo --kube-proxy-replacement=false
  fi
  true
}

# One agent per node: a host process in the node's network namespace and in a
# private mount namespace of its own (propagation slave: the pods' netns
# mounts made later by containerd still appear in it). In that namespace:
# - /run/cilium is the node's own directory: the agent's socket, pid file and
#   state have fixed paths there, and two agents would collide;
# - /sys/fs/bpf is a bpffs instance of its own: its pinned maps, programs and
#   links exist only while the agent lives, so a dead agent leaves nothing
#   attached;
# - kernel.unprivileged_bpf_disabled and kernel.timer_migration are read-only:
#   the agent sets both (ignoring errors), they are machine-wide, and the first
#   change cannot be undone;
# - /run/cilium/cgroupv2 is the node's own cgroup2 directory, bind-mounted.
#   The agent attaches its socket load balancer to --cgroup-root, and if that
#   path is not a mount point it mounts cgroup2 there: the ROOT of the
#   hierarchy, every process of the machine. The launcher
#   (cilium-agent-ns.sh) refuses to exec the agent unless that path is
#   a mount of the node's own cgroup.
cilium_agent() {  # cilium_agent <node> <proxy-mode> <routing> <lb>
  local n=$1 dir cg_root cg
  dir=$(cilium_dir "$n")
  cg_root=$(unified_cgroup)
  cg="$cg_root/$PREFIX-node$n"
  mkdir -p "$dir/run" "$dir/lib" "$cg"
  ln -sfn "$CILIUM_SRC/bpf" "$dir/lib/bpf"   # the datapath's C sources, compiled by clang at run time
  make_host_dir /run/cilium  # the mount point of the agents' private ones
  # shellcheck disable=SC2046 # the flags are words without spaces
  daemon "cilium-agent$n" - env K8S_NODE_NAME="$PREFIX-node$n" \
    unshare --mount --propagation slave -- sh "$PROJECT/scripts/cluster/cni/cilium-agent-ns.sh" \
    "$dir/run" "$cg" "/$PREFIX-node$n" "$(netns "$n")" "$CILIUM_BIN/cilium-agent" $(cilium_flags "$n" "$2" "$3" "$4")
}

cilium_dbg() {  # cilium_dbg <node> ARGS: the agent's client, in the agent's namespaces
  local pid
  pid=$(pid_of "cilium-agent$1") || die "no cilium agent on node $1"
  nsenter --target "$pid" --mount --net "$CILIUM_BIN/cilium-dbg" "${@:2}"
}

cilium_ready() { [ "$(cilium_dbg "$1" status --brief 2>/dev/null)" = OK ]; }

socket_lb_attached() {  # the node's cgroup carries the agent's connect() program
  bpftool cgroup show "$(unified_cgroup)/$PREFIX-node$1" 2>/dev/null | grep -q cil_sock4_connect
}

cilium_programs_outside_nodes() {  # prints each cgroup outside every local cluster's nodes' that has a Cilium program
  local root; root=$(unified_cgroup)
  bpftool cgroup tree "$root" 2>/dev/null | awk -v root="$root" -v nodes="$NODE_CGROUP_ERE" '
    /^\// { cg = $1; next }            # a cgroup path line, then its programs
    /cil_/ && !(index(cg, root) == 1 && substr(cg, length(root) + 1) ~ ("^" nodes)) { print cg }' | sort -u
}

cilium_operator() {
  # it registers Cilium's CRDs (the agents wait for them) and holds its lease in kube-system
  daemon cilium-operator 1 env CILIUM_K8S_NAMESPACE=kube-system "$CILIUM_BIN/cilium-operator-generic" \
    --k8s-kubeconfig-path="$STATE/cp.kubeconfig" --cluster-name=default --cluster-id=0 --ipam=kubernetes \
    --enable-metrics=false --operator-api-serve-addr=$CILIUM_OPERATOR_API --leader-election-lease-duration=15s
}

cilium_cni_config() {  # cilium_cni_config <node>
  cat <<JSON
{"cniVersion": "0.3.1", "name": "cilium",
 "plugins": [{"type": "cilium-cni", "enable-debug": false, "log-file": "$STATE/node$1/cilium-cni.log"}]}
JSON
}

cilium_cni_plugin() {  # cilium_cni_plugin <node>: cilium-cni in the node's CNI bin dir, seeing the node's /run/cilium
  # The plugin talks to the agent on /run/cilium/cilium.sock and queues
  # deletes it cannot hand over in /run/cilium/deleteQueue, which the agent
  # reads at start: both must be the node's, never the machine's.
  cat >"$STATE/node$1/cni/bin/cilium-cni" <<SH
#!/bin/sh
exec unshare --mount --propagation slave -- sh -c 'mount --bind "\$0" /run/cilium && exec "\$@"' \
  "$(cilium_dir "$1")/run" "$CILIUM_BIN/cilium-cni" "\$@"
SH
  chmod +x "$STATE/node$1/cni/bin/cilium-cni"
}

cilium_up() {  # cilium_up <nodes> <proxy-mode> <routing> <lb>
  local nodes=$1 n
  cilium_built || die "no Cilium build at $CILIUM_BIN: run '$0 build cilium' first"
  command -v bpftool >/dev/null || die "bpftool not found (the agent probes the kernel with it): bash scripts/setup.sh cilium"
  command -v clang >/dev/null || die "clang not found (the agent compiles its datapath with it): apt-get install clang"
  running cilium-operator || cilium_operator
  for n in $(seq 1 "$nodes"); do cilium_cni_plugin "$n"; cilium_agent "$n" "$2" "$3" "$4"; done
  for n in $(seq 1 "$nodes"); do
    wait_for "cilium-agent$n" "the Cilium agent on node $n to report OK" cilium_ready "$n"
    if [ "$2" = none ] && [ "$4" = socket ]; then
      wait_for "cilium-agent$n" "the socket load balancer on node $n's cgroup" socket_lb_attached "$n"
    fi
  done
  local outside
  outside=$(cilium_programs_outside_nodes)
  if [ -n "$outside" ]; then  # never leave the machine's processes behind a node's load balancer
    kill_daemons cilium-agent1 cilium-agent2
    die "a Cilium program was attached outside the nodes' cgroups ($outside): agents stopped"
  fi
  for n in $(seq 1 "$nodes"); do cilium_cni_config "$n" >"$STATE/node$n/cni/net.d/05-cilium.conflist"; done
}

cilium_down() {  # cilium_down <nodes>: agents and operator gone, and what they made in the nodes
  local n dev
  # the agent hangs in shutdown after SIGTERM; its state lives in its own
  # bpffs and the node namespace, both cleaned here, so it is killed, not waited for
  kill_daemons cilium-agent1 cilium-agent2
  stop_daemons cilium-operator
  for n in $(seq 1 "$1"); do
    rm -f "$STATE/node$n/cni/net.d/05-cilium.conflist" "$STATE/node$n/cni/bin/cilium-cni"
    for dev in $(ip -n "$(netns "$n")" -o link show | awk -F': ' '{sub(/@.*/, "", $2); print $2}' | grep -E '^(cilium_|lxc)'); do
      ip -n "$(netns "$n")" link del "$dev" 2>/dev/null || true
    done
    # its iptables chains and the rules that jump to them
    innode "$n" sh -c 'iptables-save | grep -v CILIUM | iptables-restore'
    # a pod deleted just before the switch still has its sandbox torn down: its cilium-cni, finding no
    # agent, queues the delete in this directory (deleteQueue) while it is being removed
    remove_tree "$(cilium_dir "$n")/run"
  done
}
