#!/usr/bin/env bash
# Succeeds once every node's felix in eBPF mode has every ClusterIP Service of
# the API in its NAT table (Calico's eBPF load balancer), checked twice a second
# apart (a change felix has not received yet is not in the table).
#   --print: print what Calico runs instead (recorded with every run): its
#            release, each felix's dataplane settings, the IP pool (CIDR,
#            encapsulation) and, in eBPF mode, the NAT table's size.
set -euo pipefail
# shellcheck source=pipelines/local-cilium/services-synced.sh
. "$(dirname "$0")/services-synced.sh"

nat_ips() {  # the Service frontends in node N's eBPF NAT table, one address per line
  cluster calico-node "$1" -bpf nat dump 2>/dev/null | sed -n 's/^\([0-9.]*\) port [0-9]* proto .*/\1/p' | sort -u
}

if [ "${1:-}" = --print ]; then
  for node in $nodes; do
    n=${node##*node}
    pid=$(cat "$STATE/run/calico-node$n.pid")
    echo "node $node: calico-node $(cluster calico-node "$n" -v)"
    # felix's settings as it was started (calico-node takes them from its environment)
    tr '\0' '\n' <"/proc/$pid/environ" | grep -E '^(FELIX_|CALICO_|IP=)' | sort
    if grep -qz '^FELIX_BPFENABLED=true$' "/proc/$pid/environ"; then
      echo "node $node: $(nat_ips "$n" | wc -l) Service frontends in the eBPF NAT table"
    fi
  done
  cluster kubectl get ippools.crd.projectcalico.org -o jsonpath='{range .items[*]}ippool {.metadata.name}: cidr={.spec.cidr} vxlanMode={.spec.vxlanMode} ipipMode={.spec.ipipMode} blockSize={.spec.blockSize}{"\n"}{end}'
  exit 0
fi

every_cluster_ip_in nat_ips "felix's eBPF NAT table"
