# shellcheck shell=bash
# kube-proxy on each node, in one of its modes, or none (a CNI that replaces it).

PROXY_MODES="iptables nftables"

kube_proxy() {  # kube_proxy <node> <mode>
  local n=$1
  # metrics on the node address: the apiserver's node proxy reads them, as on a real cluster
  daemon "kube-proxy$n" "$n" "$HYPERKUBE" kube-proxy --kubeconfig="$STATE/kube-proxy.kubeconfig" \
    --hostname-override="$PREFIX-node$n" --proxy-mode="$2" --cluster-cidr="$CLUSTER_CIDR" \
    --conntrack-max-per-core=0 --conntrack-tcp-timeout-established=0 --conntrack-tcp-timeout-close-wait=0 \
    --healthz-bind-address=127.0.0.1:10256 --metrics-bind-address="$(node_ip "$n"):10249" \
    --nodeport-addresses=primary --v=1
}

proxy_synced() {  # proxy_synced <node>: kube-proxy answers healthy and has synced at least once
  innode "$1" curl -sf --max-time 2 http://127.0.0.1:10256/healthz >/dev/null &&
    innode "$1" curl -sf --max-time 2 "http://$(node_ip "$1"):10249/metrics" |
      grep -Eq '^kubeproxy_sync_proxy_rules_last_timestamp_seconds\{ip_family="IPv4"\} [1-9]'
}

kube_proxies() {  # kube_proxies <nodes> <old mode> <mode|none>: each node's kube-proxy in that mode, or none
  local nodes=$1 old=$2 mode=$3 n m
  for n in $(seq 1 "$nodes"); do
    if [ "$old" = "$mode" ] && { [ "$mode" = none ] || running "kube-proxy$n"; }; then continue; fi
    stop_daemons "kube-proxy$n"
    # each mode's cleanup removes only its own rules
    for m in $PROXY_MODES; do innode "$n" "$HYPERKUBE" kube-proxy --cleanup --proxy-mode="$m" >/dev/null 2>&1 || true; done
    [ "$mode" = none ] || kube_proxy "$n" "$mode"
  done
  [ "$mode" = none ] && return
  for n in $(seq 1 "$nodes"); do wait_for "kube-proxy$n" "kube-proxy on node $n to sync its rules" proxy_synced "$n"; done
}
