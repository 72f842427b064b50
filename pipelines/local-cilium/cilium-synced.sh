#!/usr/bin/env bash
# Succeeds once every node's Cilium agent has every ClusterIP Service of the
# API in its service map (Cilium's eBPF load balancer), checked twice a second
# apart (a change the agent's watch has not delivered yet is not in the map).
#   --print: print each node's service map size and Cilium's effective
#            configuration instead (recorded with every run).
set -euo pipefail
# shellcheck source=pipelines/local-cilium/services-synced.sh
. "$(dirname "$0")/services-synced.sh"

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

every_cluster_ip_in map_ips "Cilium's service map"
