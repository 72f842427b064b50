#!/usr/bin/env bash
# Succeeds once every node's Cilium agent has every ClusterIP Service of the
# API in its service map (Cilium's eBPF load balancer), checked twice a second
# apart (a change the agent's watch has not delivered yet is not in the map).
#   --print: print each node's service map size and Cilium's effective
#            configuration instead (recorded with every run).
set -euo pipefail
cluster() { bash "$(dirname "$0")/../../scripts/k8s-local-cluster.sh" "$@"; }
nodes=$(cluster kubectl get nodes -o jsonpath='{.items[*].metadata.name}')

map_ips() {  # the ClusterIP frontends in node N's service map, one address per line
  cluster cilium-dbg "$1" service list -o json | python3 -c '
import json, sys
for svc in json.load(sys.stdin):
    spec = svc["spec"]
    if spec["flags"]["type"] == "ClusterIP":
        print(spec["frontend-address"]["ip"])' | sort -u
}

if [ "${1:-}" = --print ]; then
  for node in $nodes; do
    n=${node##*node}
    echo "node $node: $(map_ips "$n" | wc -l) ClusterIP frontends in the service map"
    cluster cilium-dbg "$n" version
    cluster cilium-dbg "$n" status --verbose
  done
  exit 0
fi

check() {
  local api n missing
  api=$(cluster kubectl get services -A -o jsonpath='{range .items[*]}{.spec.clusterIP}{"\n"}{end}' | grep -v '^None$' | sort -u)
  for node in $nodes; do
    n=${node##*node}
    missing=$(comm -23 <(echo "$api") <(map_ips "$n") | wc -l)
    if [ "$missing" != 0 ]; then
      echo "node $node: $missing of $(echo "$api" | wc -l) ClusterIPs not yet in Cilium's service map" >&2
      return 1
    fi
  done
}
check && sleep 1 && check
