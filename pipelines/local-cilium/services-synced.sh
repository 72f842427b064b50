# shellcheck shell=bash
# Sourced by cilium-synced.sh, calico-synced.sh and vpc-synced.sh: the cluster's script, its nodes,
# and the check both make of an eBPF load balancer's Service table. The cluster is the local one that
# BENCHLIB_K8S_CLUSTER names (the default one when unset), as for the script itself: its STATE and
# PREFIX (node namespaces bk8s-...-nodeN) as scripts/cluster/name.sh maps them.
cluster() { bash "$(dirname "$0")/../../scripts/k8s-local-cluster.sh" "$@"; }
# shellcheck source=scripts/cluster/name.sh
. "$(dirname "$0")/../../scripts/cluster/name.sh"
select_cluster "${BENCHLIB_K8S_CLUSTER:-}" BENCHLIB_K8S_CLUSTER || exit 2
nodes=$(cluster kubectl get nodes -o jsonpath='{.items[*].metadata.name}')

# every_cluster_ip_in <table> <what>: succeeds once <table> N (one address a line) lists every
# ClusterIP of the API on each node N, twice a second apart (a change not delivered yet is not in it)
every_cluster_ip_in() {
  check() {
    local api node n missing
    api=$(cluster kubectl get services -A -o jsonpath='{range .items[*]}{.spec.clusterIP}{"\n"}{end}' | grep -v '^None$' | sort -u)
    for node in $nodes; do
      n=${node##*node}
      missing=$(comm -23 <(echo "$api") <("$1" "$n") | wc -l)
      if [ "$missing" != 0 ]; then
        echo "node $node: $missing of $(echo "$api" | wc -l) ClusterIPs not yet in $2" >&2
        return 1
      fi
    done
  }
  check "$@" && sleep 1 && check "$@"
}
