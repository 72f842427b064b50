# shellcheck shell=bash
# The AWS VPC CNI as the local cluster's CNI (built by vpc-build.sh), against a mocked AWS: per node
# the instance metadata mock and ipamd, host processes in the node's network namespace (never the
# host's: ipamd reprograms the link whose MAC the metadata names, with its rules and MTU), ipamd
# also in a private mount namespace for its fixed /var/run/aws-node; aws-cni and egress-cni called
# by containerd. ipamd runs in IMDS-only mode: it reads its ENI and the ENI's IPs from the metadata
# alone and calls no EC2 API, so no EC2 mock is needed (moto's AssignPrivateIpAddresses would also
# hand the node's own address out as a pod IP). The price: the IPs are pre-assigned, on the primary
# ENI only. The VPC fabric is the wire: one subnet for nodes and pods, MTU 9001, and static
# neighbour entries that answer for the other node's pod IPs as the VPC's mapping service does.
# See pod-network.sh for the functions every CNI defines; it has no options of its own.
CNIS+=(vpc)

VPC_IMDS=127.0.0.1:1338           # the metadata mock, inside each node
VPC_INTROSPECTION=127.0.0.1:61679 # ipamd's introspection API, inside each node
VPC_INSTANCE_TYPE=m6i.large       # the EKS study's instance type: 10 IPv4 per ENI, 9 of them pods'
VPC_POD_IPS=${BENCHLIB_VPC_POD_IPS:-9} # a smaller pool per node: as an instance type with fewer IPs per ENI
VPC_READY_S=${BENCHLIB_VPC_READY_S:-$TIMEOUT_S}  # ipamd's bound (its pool, its rules, the Kubernetes API)

vpc_network() {  # vpc_network <command> <proxy-mode>: "<proxy-mode> - -"; no options of its own
  case ${3:-} in
    "") ;;
    *) bad_input "$1: unknown argument '$3' (the vpc CNI has no options; see $0 --help)" ;;
  esac
  [[ "$VPC_POD_IPS" =~ ^[1-9]$ ]] || bad_input "BENCHLIB_VPC_POD_IPS=$VPC_POD_IPS: the pod IPs per node must be 1 to 9 (an m6i.large's ENI holds 9 besides the node's)"
  [ "$2" != none ] || bad_input "--proxy-mode none: the VPC CNI leaves Services to kube-proxy (use iptables or nftables)"
  vpc_built || die "no VPC CNI build at $VPC_BIN: run '$0 build vpc' first"
  echo "${2:-iptables} - -"
}

vpc_follows_proxy() { false; }  # ipamd's rules do not depend on kube-proxy's mode
vpc_packages() { true; }  # its commands come with the cluster's packages
# ipamd starts in a node with unshare and nsenter; its readiness and the mock use curl and python3; its teardown, the rules' tools
vpc_commands() { echo unshare nsenter curl python3 nft iptables-save; }
vpc_components() { local n; for n in $(seq 1 "$1"); do echo "imds-mock$n"; echo "ipamd$n"; done; }

vpc_dir() { echo "$STATE/node$1/vpc"; }
vpc_subnet() { echo "$WIRE_NET.0/$WIRE_PREFIX"; }  # the mocked VPC and its one subnet: the wire's
vpc_pod_ips() {  # vpc_pod_ips <node>: the secondary IPs pre-assigned to the node's primary ENI
  local i; for i in $(seq 1 "$VPC_POD_IPS"); do echo "$WIRE_NET.$(($1 * 16 + i))"; done
}
vpc_mac() { ip -n "$(netns "$1")" -o link show wire0 | sed -n 's#.*link/ether \([0-9a-f:]*\) .*#\1#p'; }

vpc_imds_config() {  # vpc_imds_config <node> <mac>: the mock's config, its defaults with this node as the instance
  python3 - "$VPC_BIN/imds-defaults.json" "$1" "$2" "$(node_ip "$1")" "$(vpc_subnet)" "$VPC_INSTANCE_TYPE" \
    "$(vpc_pod_ips "$1" | paste -sd,)" "$PREFIX-node$1" <<'PY'
import json, sys
defaults, node, mac, ip, subnet, itype, pods, hostname = sys.argv[1:]
cfg = json.load(open(defaults))
meta = cfg["metadata"]
old_mac = meta["values"]["mac"]
# every per-MAC path names the node's wire, so the listing holds one ENI: the wire
meta["paths"] = {k: v.replace(old_mac, mac) for k, v in meta["paths"].items()}
meta["values"].update({
    "mac": mac, "mac-mac": mac, "local-ipv4": ip, "instance-type": itype,
    "instance-id": f"i-0benchlib000000{node}", "mac-network-interface-id": f"eni-0benchlib00000{node}",
    "mac-device-number": "0", "mac-network-interface-card-index": "0",
    "mac-local-ipv4s": "\n".join([ip] + pods.split(",")),  # the primary first, then the pods'
    "mac-subnet-id": "subnet-0benchlib", "mac-vpc-id": "vpc-0benchlib",
    "mac-subnet-ipv4-cidr-block": subnet, "mac-vpc-ipv4-cidr-block": subnet, "mac-vpc-ipv4-cidr-blocks": subnet,
    "mac-local-hostname": hostname, "mac-security-group-ids": "sg-0benchlib",
    "placement-availability-zone": "us-east-1a",
    # no public address, as an EKS node in a private subnet; none outside the project's range
    "public-ipv4": "", "mac-public-ipv4s": "", "mac-ipv4-associations": ip,
})
meta["paths"]["mac-ipv4-associations"] = meta["paths"]["mac-ipv4-associations"].rsplit("/", 1)[0] + "/" + ip
cfg["dynamic"]["values"]["instance-identity-document"].update({
    "privateIp": ip, "instanceType": itype, "instanceId": meta["values"]["instance-id"],
    "region": "us-east-1", "availabilityZone": "us-east-1a",
})
json.dump(cfg, sys.stdout, indent=1)
PY
}

vpc_ipamd() {  # vpc_ipamd <node>: ipamd in the node's netns and a mount namespace of its own
  local n=$1 dir
  dir=$(vpc_dir "$n")
  mkdir -p "$dir/run"
  make_host_dir /run/aws-node  # the mount point of the ipamds' private ones
  # as the release's chart sets them, but IMDS-only: no EC2 calls, no new ENIs or IPs (the pool is
  # what the metadata lists); any EC2 endpoint it might still build is a closed port inside the node
  daemon "ipamd$n" - env AWS_EC2_METADATA_SERVICE_ENDPOINT="http://$VPC_IMDS" AWS_EC2_ENDPOINT=http://127.0.0.1:1 \
    AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=none AWS_SECRET_ACCESS_KEY=none \
    ENABLE_IMDS_ONLY_MODE=true DISABLE_NETWORK_RESOURCE_PROVISIONING=true MAX_ENI=1 \
    ENABLE_IPv4=true ENABLE_IPv6=false ENABLE_PREFIX_DELEGATION=false ENABLE_SUBNET_DISCOVERY=false AWS_VPC_ENI_MTU=9001 \
    AWS_VPC_K8S_CNI_LOG_FILE=stdout AWS_VPC_K8S_CNI_LOGLEVEL=INFO DISABLE_METRICS=true \
    KUBECONFIG="$STATE/cp.kubeconfig" MY_NODE_NAME="$PREFIX-node$n" \
    unshare --mount --propagation slave -- sh "$PROJECT/scripts/cluster/cni/vpc-ipamd-ns.sh" \
    "$dir/run" "$(netns "$n")" "$VPC_BIN/aws-k8s-agent"
}

vpc_imds_answers() { innode "$1" curl -sf --max-time 2 "http://$VPC_IMDS/latest/meta-data/mac" >/dev/null; }

vpc_ready() {  # ipamd serves aws-cni and holds the node's whole pool (its ENIs per network card)
  [ -S "$(vpc_dir "$1")/run/ipamd.sock" ] &&
    [ "$(innode "$1" curl -sf --max-time 2 "http://$VPC_INTROSPECTION/v1/enis" |
      python3 -c 'import json,sys; print(sum(c["TotalIPs"] for c in json.load(sys.stdin).values()))' 2>/dev/null)" = "$VPC_POD_IPS" ]
}

vpc_cni_plugin() {  # vpc_cni_plugin <node>: aws-cni seeing the node's /var/run/aws-node, and egress-cni
  cat >"$STATE/node$1/cni/bin/aws-cni" <<SH
#!/bin/sh
exec unshare --mount --propagation slave -- sh -c 'mount --bind "\$0" /var/run/aws-node && exec "\$@"' \
  "$(vpc_dir "$1")/run" "$VPC_BIN/aws-cni" "\$@"
SH
  chmod +x "$STATE/node$1/cni/bin/aws-cni"
  ln -sf "$VPC_BIN/egress-cni" "$STATE/node$1/cni/bin/egress-cni"
}

vpc_cni_config() {  # vpc_cni_config <node>: misc/10-aws.conflist of the release, filled as aws-vpc-cni does
  # egress-cni passes through (IPv6 egress off), so it needs no IPAM of its own
  cat <<JSON
{"cniVersion": "0.4.0", "name": "aws-cni", "disableCheck": true, "plugins": [
  {"name": "aws-cni", "type": "aws-cni", "vethPrefix": "eni", "mtu": "9001", "podSGEnforcingMode": "strict",
   "pluginLogFile": "$(vpc_dir "$1")/aws-cni.log", "pluginLogLevel": "INFO",
   "capabilities": {"io.kubernetes.cri.pod-annotations": true}},
  {"name": "egress-cni", "type": "egress-cni", "mtu": "9001", "enabled": "false", "randomizeSNAT": "prng",
   "nodeIP": "$(node_ip "$1")", "pluginLogFile": "$(vpc_dir "$1")/egress-cni.log", "pluginLogLevel": "INFO"},
  {"type": "portmap", "capabilities": {"portMappings": true}, "snat": true}]}
JSON
}

vpc_fabric() {  # vpc_fabric <nodes>: the VPC's answers for the other node's pod IPs, and the init container's sysctl
  local n m ip mac
  for n in $(seq 1 "$1"); do
    [ -f "$(vpc_dir "$n")/rp_filter.saved" ] || innode "$n" sysctl -n net.ipv4.conf.wire0.rp_filter >"$(vpc_dir "$n")/rp_filter.saved"
    innode "$n" sysctl -qw net.ipv4.conf.wire0.rp_filter=2
    for m in $(seq 1 "$1"); do
      [ "$m" != "$n" ] || continue
      mac=$(vpc_mac "$m")
      for ip in $(vpc_pod_ips "$m"); do ip -n "$(netns "$n")" neigh replace "$ip" lladdr "$mac" dev wire0 nud permanent; done
    done
  done
}

vpc_up() {  # vpc_up <nodes> <proxy-mode> <routing> <lb>
  local nodes=$1 n dir
  for n in $(seq 1 "$nodes"); do
    dir=$(vpc_dir "$n")
    mkdir -p "$dir"
    vpc_imds_config "$n" "$(vpc_mac "$n")" >"$dir/imds.json" || vpc_fallback "$nodes" "$2" "imds-mock$n" "cannot write the metadata mock's config for node $n"
    daemon "imds-mock$n" "$n" "$VPC_BIN/ec2-metadata-mock" -c "$dir/imds.json" -n "${VPC_IMDS%:*}" -p "${VPC_IMDS#*:}"
  done
  for n in $(seq 1 "$nodes"); do vpc_wait "$n" "$nodes" "$2" "$TIMEOUT_S" "imds-mock$n" "the metadata mock on node $n to answer" vpc_imds_answers; done
  vpc_fabric "$nodes"
  for n in $(seq 1 "$nodes"); do vpc_ipamd "$n"; done
  for n in $(seq 1 "$nodes"); do vpc_wait "$n" "$nodes" "$2" "$VPC_READY_S" "ipamd$n" "ipamd on node $n to hold its $VPC_POD_IPS pod IPs" vpc_ready; done
  for n in $(seq 1 "$nodes"); do
    vpc_cni_plugin "$n"
    vpc_cni_config "$n" >"$STATE/node$n/cni/net.d/05-aws.conflist"
  done
}

vpc_wait() {  # vpc_wait <node> <nodes> <proxy-mode> <bound> <component> <what> <check>: or the cluster back on the bridge
  local deadline=$((SECONDS + $4))
  until "$7" "$1" 2>/dev/null; do
    running "$5" || vpc_fallback "$2" "$3" "$5" "$5 exited while waiting for $6"
    [ $SECONDS -lt "$deadline" ] || vpc_fallback "$2" "$3" "$5" "timed out after ${4}s waiting for $6"
    sleep 0.5
  done
}

vpc_fallback() {  # vpc_fallback <nodes> <proxy-mode> <component> <why>: the VPC CNI removed, the bridge
  # and kube-proxy iptables back (a working pod network), then the failure with the component's log tail
  local log="$STATE/logs/$3.log"
  [ ! -f "$log" ] || cp "$log" "$STATE/logs/$3.failed.log"
  log "$4: going back to the bridge CNI"
  vpc_down "$1"
  bridge_up "$1"
  (kube_proxies "$1" "$2" iptables) >/dev/null 2>&1 || true  # a subshell: its own failure must not end this
  echo "bridge iptables - -" >"$STATE/network"
  fail "$3.failed" "$4 (the cluster is back on the bridge CNI with kube-proxy iptables)"
}

vpc_down() {  # vpc_down <nodes>: mocks and ipamds gone, and everything ipamd and aws-cni made in the nodes
  local n m ns dev ip pref
  stop_daemons ipamd1 ipamd2 imds-mock1 imds-mock2
  for n in $(seq 1 "$1"); do
    ns=$(netns "$n")
    rm -f "$STATE/node$n/cni/net.d/05-aws.conflist" "$STATE/node$n/cni/bin/aws-cni" "$STATE/node$n/cni/bin/egress-cni"
    # the pods' veths (their /32 routes go with them)
    for dev in $(ip -n "$ns" -o link show | awk -F': ' '{sub(/@.*/, "", $2); print $2}' | grep -E '^eni[0-9a-f]{11}$'); do
      ip -n "$ns" link del "$dev" 2>/dev/null || true
    done
    # its policy rules: per pod (512, 1536) and the connmark one (1024)
    for pref in 512 1024 1536; do while ip -n "$ns" rule del pref "$pref" 2>/dev/null; do :; done; done
    # its iptables chains and the rules that jump to them, its nftables connmark table
    innode "$n" sh -c 'iptables-save | grep -v AWS | iptables-restore' 2>/dev/null || true
    innode "$n" nft delete table ip aws-cni 2>/dev/null || true
    for m in 1 2; do for ip in $(vpc_pod_ips "$m"); do ip -n "$ns" neigh del "$ip" dev wire0 2>/dev/null || true; done; done
    ip -n "$ns" link set wire0 mtu 1500 2>/dev/null || true  # the wire's own (node.sh sets none)
    if [ -f "$(vpc_dir "$n")/rp_filter.saved" ]; then
      innode "$n" sysctl -qw "net.ipv4.conf.wire0.rp_filter=$(cat "$(vpc_dir "$n")/rp_filter.saved")" || true
    fi
    rm -rf "$(vpc_dir "$n")"
  done
}
