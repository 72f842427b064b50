# shellcheck shell=bash
# Calico as the local cluster's CNI (built by calico-build.sh): calico-node per node (its start-up,
# its tunnel-address allocation, then felix as a daemon), the calico CNI plugin and calico-ipam,
# the Kubernetes API as datastore, VXLAN without BGP. Felix runs as a host process in the node's
# network namespace and a private mount namespace of its own (calico-node-ns.sh), so that nothing
# machine-wide changes. Its dataplane: iptables or nftables rules beside kube-proxy, or eBPF
# replacing kube-proxy. Its pool is the cluster's pod CIDR (the address plan), never Calico's
# default. See pod-network.sh for the functions every CNI defines; the network's last two fields
# are Calico's routing (vxlan, native) and dataplane (iptables, nftables, ebpf).
CNIS+=(calico)

CALICO_BIN=$(calico_bin "$CALICO_VERSION")
CALICO_HOST_DIRS="/run/calico /var/lib/calico /usr/lib/calico/bpf"  # mount points of the private ones
CALICO_HEALTH=127.0.0.1:9099       # felix's health endpoint, inside the node

calico_minor() { local v=${1#v}; v=${v%%-*}; echo $((${v%%.*} * 100 + $(echo "$v" | cut -d. -f2))); }

calico_network() {  # calico_network <command> <proxy-mode> [--dataplane D] [--routing vxlan|native]
  local cmd=$1 proxy=$2 dataplane=iptables routing=vxlan
  shift 2
  while [ $# -gt 0 ]; do
    case $1 in
      --dataplane) dataplane=$2 ;;
      --routing) routing=$2 ;;
      *) bad_input "$cmd: unknown argument '$1' (see $0 --help)" ;;
    esac
    shift 2
  done
  case $routing in vxlan|native) ;; *) bad_input "--routing $routing: choose vxlan or native (Calico)" ;; esac
  case $dataplane in
    iptables) proxy=${proxy:-iptables}
      [ "$proxy" != none ] || bad_input "--dataplane iptables --proxy-mode none: Calico's iptables dataplane leaves Services to kube-proxy (use --proxy-mode iptables or nftables)" ;;
    nftables) proxy=${proxy:-nftables}
      [ "$proxy" = nftables ] || bad_input "--dataplane nftables --proxy-mode $proxy: Calico's nftables dataplane runs beside kube-proxy in nftables mode only (use --proxy-mode nftables)" ;;
    ebpf) proxy=${proxy:-none}
      [ "$proxy" = none ] || bad_input "--dataplane ebpf --proxy-mode $proxy: Calico's eBPF dataplane replaces kube-proxy (use --proxy-mode none)" ;;
    *) bad_input "--dataplane $dataplane: choose iptables, nftables or ebpf" ;;
  esac
  calico_built "$CALICO_VERSION" ||
    die "no Calico $CALICO_VERSION build at $CALICO_BIN: run '$0 build calico' first (BENCHLIB_CALICO_VERSION picks another built release)"
  if [ "$dataplane" = nftables ] && [ "$(calico_minor "$CALICO_VERSION")" -lt 329 ]; then
    bad_input "--dataplane nftables: Calico $CALICO_VERSION has no nftables dataplane (3.29 and later)"
  fi
  echo "$proxy $routing $dataplane"
}

calico_follows_proxy() { true; }  # felix's dataplane is chosen with kube-proxy's mode
calico_packages() { echo libpcap-dev make ipset bpftool; }  # the build: make, libpcap; felix: ipsets; the teardown: bpftool
calico_commands() { echo ipset bpftool; }
calico_components() { local n; for n in $(seq 1 "$1"); do echo "calico-node$n"; done; }

calico_dir() { echo "$STATE/node$1/calico"; }
calico_mtu() { if [ "$1" = vxlan ]; then echo 1450; else echo 1500; fi; }  # the wire's 1500, less VXLAN's 50

# The connect-time load balancer (eBPF mode's Service translation at connect()) of releases before
# 3.31 fails to load on recent kernels ("connect_time_no_log_v46_co-re.o: invalid argument", Calico
# fixed it by splitting its program maps): there, Services are translated per packet by tc.
calico_ctlb() { if [ "$(calico_minor "$CALICO_VERSION")" -ge 331 ]; then echo TCP; else echo Disabled; fi; }

calico_env() {  # calico_env <node> <routing> <dataplane>: calico-node's settings, one VAR=value a line
  local n=$1 routing=$2 dataplane=$3
  cat <<ENV
DATASTORE_TYPE=kubernetes
KUBECONFIG=$STATE/cp.kubeconfig
NODENAME=$PREFIX-node$n
CLUSTER_TYPE=k8s
CALICO_NETWORKING_BACKEND=vxlan
IP=$(node_ip "$n")/$WIRE_PREFIX
IP6=none
CALICO_IPV4POOL_CIDR=$CLUSTER_CIDR
CALICO_IPV4POOL_VXLAN=$([ "$routing" = vxlan ] && echo Always || echo CrossSubnet)
CALICO_IPV4POOL_IPIP=Never
CALICO_IPV4POOL_NAT_OUTGOING=false
CALICO_DISABLE_FILE_LOGGING=true
FELIX_FELIXHOSTNAME=$PREFIX-node$n
FELIX_DATASTORETYPE=kubernetes
FELIX_USAGEREPORTINGENABLED=false
FELIX_IPV6SUPPORT=false
FELIX_DEFAULTENDPOINTTOHOSTACTION=ACCEPT
FELIX_HEALTHENABLED=true
FELIX_HEALTHHOST=${CALICO_HEALTH%:*}
FELIX_HEALTHPORT=${CALICO_HEALTH#*:}
FELIX_LOGFILEPATH=none
FELIX_LOGSEVERITYSYS=none
FELIX_LOGSEVERITYSCREEN=info
FELIX_VXLANMTU=$(calico_mtu vxlan)
FELIX_XDPENABLED=false
FELIX_NFTABLESMODE=$([ "$dataplane" = nftables ] && echo Enabled || echo Disabled)
FELIX_BPFENABLED=$([ "$dataplane" = ebpf ] && echo true || echo false)
ENV
  [ "$dataplane" = ebpf ] || return 0
  # the API server's own address: with no kube-proxy, its Service cannot take felix there
  cat <<ENV
KUBERNETES_SERVICE_HOST=$(node_ip 1)
KUBERNETES_SERVICE_PORT=$API_PORT
FELIX_BPFDATAIFACEPATTERN=^(wire0|vxlan[.]calico)\$
FELIX_BPFCONNECTTIMELOADBALANCING=$(calico_ctlb)
ENV
}

calico_command() {  # calico_command <node> <routing> <dataplane>: CALICO_CMD, calico-node in the node's namespaces
  local n=$1 settings
  mapfile -t settings < <(calico_env "$n" "$2" "$3")
  CALICO_CMD=(env "${settings[@]}" unshare --mount --propagation slave --
    sh "$PROJECT/scripts/cluster/cni/calico-node-ns.sh" "$(calico_dir "$n")" "$(unified_cgroup)/$PREFIX-node$n"
    "/$PREFIX-node$n" "$(netns "$n")" "$CALICO_BIN/bpf" "$CALICO_BIN/calico-node")
}

calico_once() {  # calico_once <node> <log name> <routing> <dataplane> ARGS: a one-shot step, bounded, its log kept
  calico_command "$1" "$3" "$4"
  timeout 90 "${CALICO_CMD[@]}" "${@:5}" >"$STATE/logs/$2$1.log" 2>&1 </dev/null
}

calico_node_cli() {  # calico_node_cli <node> ARGS: calico-node in the namespaces of the node's felix
  local pid
  pid=$(pid_of "calico-node$1") || die "no felix on node $1"
  nsenter --target "$pid" --mount --net "$CALICO_BIN/calico-node" "${@:2}"
}

calico_ready() { innode "$1" curl -sf --max-time 2 "http://$CALICO_HEALTH/readiness" >/dev/null; }

calico_cni_config() {  # calico_cni_config <node> <routing>: the plugin runs in the host's mount namespace,
  # so every path it would default to (/var/lib/calico/nodename, /var/run/calico/ipam.lock,
  # /var/log/calico/cni) is the node's
  local d; d=$(calico_dir "$1")
  cat <<JSON
{"name": "k8s-pod-network", "cniVersion": "0.3.1", "plugins": [
  {"type": "calico", "datastore_type": "kubernetes", "nodename": "$PREFIX-node$1",
   "nodename_file": "$d/lib/nodename", "ipam_lock_file": "$d/ipam.lock",
   "log_level": "info", "log_file_path": "$d/cni.log", "mtu": $(calico_mtu "$2"),
   "ipam": {"type": "calico-ipam"}, "policy": {"type": "k8s"},
   "kubernetes": {"kubeconfig": "$STATE/cp.kubeconfig"}}]}
JSON
}

calico_up() {  # calico_up <nodes> <proxy-mode> <routing> <dataplane>
  local nodes=$1 routing=$3 dataplane=$4 n p
  command -v ipset >/dev/null || die "ipset not found (felix programs ipsets): apt-get install ipset"
  for p in $CALICO_HOST_DIRS; do make_host_dir "$p"; done
  kubectl apply --server-side --force-conflicts -f "$CALICO_BIN/crds.yaml" >/dev/null
  kubectl wait --for=condition=Established -f "$CALICO_BIN/crds.yaml" --timeout=60s >/dev/null
  for n in $(seq 1 "$nodes"); do
    mkdir -p "$(calico_dir "$n")"
    # the pods' gateway 169.254.1.1 is answered by proxy ARP on the cali* veths, and the kernel
    # proxies only for an address it has a route to: a node has no default route. eBPF mode
    # routes it itself (to bpfin.cali), and fails on this one.
    if [ "$dataplane" != ebpf ]; then ip -n "$(netns "$n")" route replace 169.254.1.1/32 dev wire0 scope link; fi
    # the Node's Calico annotations, the pool (made once), the nodename file; then its VXLAN address
    calico_once "$n" calico-startup "$routing" "$dataplane" -startup ||
      calico_fallback "$nodes" "$2" "calico-startup$n" "calico-node -startup failed on node $n"
    calico_once "$n" calico-tunnel "$routing" "$dataplane" -allocate-tunnel-addrs -allocate-tunnel-addrs-run-once ||
      calico_fallback "$nodes" "$2" "calico-tunnel$n" "calico-node -allocate-tunnel-addrs failed on node $n"
  done
  # a pool made before keeps its mode: the routing asked for now
  kubectl patch ippools.crd.projectcalico.org default-ipv4-ippool --type merge \
    -p "{\"spec\": {\"vxlanMode\": \"$([ "$routing" = vxlan ] && echo Always || echo CrossSubnet)\"}}" >/dev/null
  for n in $(seq 1 "$nodes"); do calico_command "$n" "$routing" "$dataplane"; daemon "calico-node$n" - "${CALICO_CMD[@]}" -felix; done
  for n in $(seq 1 "$nodes"); do calico_wait_ready "$n" "$nodes" "$2"; done
  local outside
  outside=$(calico_programs_outside_nodes)
  if [ -n "$outside" ]; then  # never leave the machine's processes behind a node's load balancer
    calico_down "$nodes"
    die "a Calico program was attached outside the nodes' cgroups ($outside): felix stopped"
  fi
  for n in $(seq 1 "$nodes"); do
    ln -sf "$CALICO_BIN/calico" "$CALICO_BIN/calico-ipam" "$STATE/node$n/cni/bin/"
    calico_cni_config "$n" "$routing" >"$STATE/node$n/cni/net.d/05-calico.conflist"
  done
}

calico_wait_ready() {  # calico_wait_ready <node> <nodes> <proxy-mode>: felix ready, or the cluster back on the bridge
  local n=$1 deadline=$((SECONDS + FELIX_READY_S))
  until calico_ready "$n"; do
    running "calico-node$n" || calico_fallback "$2" "$3" "calico-node$n" "felix exited on node $n before it was ready"
    [ $SECONDS -lt "$deadline" ] || calico_fallback "$2" "$3" "calico-node$n" "felix on node $n not ready after ${FELIX_READY_S}s"
    sleep 0.5
  done
}

calico_fallback() {  # calico_fallback <nodes> <proxy-mode> <component> <why>: Calico removed, the bridge
  # and kube-proxy iptables back (a working pod network), then the failure with the component's log tail
  local log="$STATE/logs/$3.log"
  [ ! -f "$log" ] || cp "$log" "$STATE/logs/$3.failed.log"
  log "$4: going back to the bridge CNI"
  calico_down "$1"
  bridge_up "$1"
  (kube_proxies "$1" "$2" iptables) >/dev/null 2>&1 || true  # a subshell: its own failure must not end this
  echo "bridge iptables - -" >"$STATE/network"
  fail "$3.failed" "$4 (the cluster is back on the bridge CNI with kube-proxy iptables)"
}

calico_programs_outside_nodes() {  # each cgroup outside every local cluster's nodes' that has a Calico program
  local root; root=$(unified_cgroup)
  bpftool cgroup tree "$root" 2>/dev/null | awk -v root="$root" -v nodes="$NODE_CGROUP_ERE" '
    /^\// { cg = $1; next }
    /calico_|cali_/ && !(index(cg, root) == 1 && substr(cg, length(root) + 1) ~ ("^" nodes)) { print cg }' | sort -u
}

calico_down() {  # calico_down <nodes>: felix gone, and everything it made in the nodes
  local n dev cg id hook set
  stop_daemons calico-node1 calico-node2
  for n in $(seq 1 "$1"); do
    rm -f "$STATE/node$n/cni/net.d/05-calico.conflist" "$STATE/node$n/cni/bin/calico" "$STATE/node$n/cni/bin/calico-ipam"
    for dev in $(ip -n "$(netns "$n")" -o link show | awk -F': ' '{sub(/@.*/, "", $2); print $2}' |
                 grep -E '^(cali|vxlan\.calico$|bpf(in|out)\.cali$)'); do
      ip -n "$(netns "$n")" link del "$dev" 2>/dev/null || true
    done
    # its iptables chains and the rules that jump to them, its ipsets, its nftables table
    innode "$n" sh -c 'iptables-save | grep -v -i cali | iptables-restore' 2>/dev/null || true
    for set in $(innode "$n" ipset list -n 2>/dev/null | grep '^cali'); do innode "$n" ipset destroy "$set" 2>/dev/null || true; done
    innode "$n" nft list tables 2>/dev/null | awk '$3 ~ /calico/ {print $2, $3}' | while read -r family table; do
      innode "$n" nft delete table "$family" "$table" || true
    done
    # eBPF mode's tc programs outlive felix, on wire0 and on lo too, where they would keep
    # translating (and dropping) the node's own traffic, the API server's included
    for dev in lo wire0; do innode "$n" tc qdisc del dev "$dev" clsact 2>/dev/null || true; done
    ip -n "$(netns "$n")" route del 169.254.1.1/32 dev wire0 2>/dev/null || true
    ip -n "$(netns "$n")" route flush root "$CLUSTER_CIDR" 2>/dev/null || true  # its routes to the other node's blocks
    cg="$(unified_cgroup)/$PREFIX-node$n"
    # the connect-time load balancer's programs, attached to the node's cgroup
    bpftool cgroup show "$cg" 2>/dev/null | awk '$1 ~ /^[0-9]+$/ && $3 ~ /cali/ {print $1, $2}' |
      while read -r id hook; do bpftool cgroup detach "$cg" "$hook" id "$id" 2>/dev/null || true; done
    rm -rf "$(calico_dir "$n")/run"
  done
}
