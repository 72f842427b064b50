#!/usr/bin/env bash
# Succeeds once every node's kube-proxy has programmed the latest Service
# change: its last successful sync is not older than the last change it queued
# (kube-proxy's own metrics, read through the API server's node proxy as on
# any cluster whose kube-proxy serves metrics on the node address).
#   --print: print each node's sync metrics (recorded with every run) instead.
# The cluster: the local one BENCHLIB_K8S_CLUSTER names (the default one when unset), as for the
# cluster's script itself.
set -euo pipefail
kubectl() { bash "$(dirname "$0")/../../scripts/k8s-local-cluster.sh" kubectl "$@"; }
print=${1:-}
check() {
for node in $(kubectl get nodes -o jsonpath='{.items[*].metadata.name}'); do
  metrics=$(kubectl get --raw "/api/v1/nodes/$node:10249/proxy/metrics")
  value() { awk -v k="$1" '$1 == k {print $2}' <<<"$metrics"; }
  if [ "$print" = --print ]; then
    echo "node $node"
    grep -E '^kubeproxy_(sync_proxy_rules_(duration_seconds_(sum|count)|last_timestamp_seconds|last_queued_timestamp_seconds|iptables_total|nftables_(objects|element_updates))|network_programming_duration_seconds_(sum|count))[{ ]' <<<"$metrics" | grep -v 'ip_family="IPv6"' || true
    continue
  fi
  synced=$(value 'kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv4"}')
  queued=$(value 'kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{ip_family="IPv4"}')
  python3 -c "import sys; sys.exit(0 if float('${synced:-0}') >= float('${queued:-1}') > 0 else 1)" || {
    echo "node $node: kube-proxy last synced at ${synced:-never}, last change queued at ${queued:-never}" >&2
    return 1
  }
done
}
# twice, a second apart: a change the watch has not delivered yet is not queued yet
if [ "$print" = --print ]; then check; else check && sleep 1 && check; fi
