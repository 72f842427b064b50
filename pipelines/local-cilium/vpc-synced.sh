#!/usr/bin/env bash
# Succeeds once every node's ipamd (the AWS VPC CNI) holds each running pod's address as assigned in
# its pool: the address the API shows is the one aws-cni took from ipamd, and no pod runs on an
# address ipamd does not know. Checked twice, a second apart.
#   --print: print what the VPC CNI runs instead (recorded with every run): ipamd's settings as it
#            was started, and each node's pool (its ENI, the addresses, which are assigned).
set -euo pipefail
# shellcheck source=pipelines/local-cilium/services-synced.sh
. "$(dirname "$0")/services-synced.sh"

pool() {  # node N's pool from ipamd's introspection API (inside the node): one "address assigned|free" a line
  nsenter --net="/run/netns/$PREFIX-node$1" curl -sf --max-time 5 http://127.0.0.1:61679/v1/enis | python3 -c '
import json, sys
for card in json.load(sys.stdin).values():
    for eni_id, eni in card["ENIs"].items():
        for cidr in eni["AvailableIPv4Cidrs"].values():
            for ip, entry in cidr["IPAddresses"].items():
                key = entry.get("IPAMKey") or {}
                print(ip, "assigned" if key.get("containerID") or key.get("networkName") else "free", eni_id)' | sort
}

if [ "${1:-}" = --print ]; then
  for node in $nodes; do
    n=${node##*node}
    pid=$(cat "$STATE/run/ipamd$n.pid")
    echo "node $node: ipamd (aws-k8s-agent) $(readlink "/proc/$pid/exe")"
    # ipamd's settings as it was started (it takes them from its environment); no credentials are set
    tr '\0' '\n' <"/proc/$pid/environ" | grep -E '^(AWS_VPC_|ENABLE_|DISABLE_|MAX_ENI|WARM_|MINIMUM_)' | sort
    pool "$n" | sed "s/^/node $node pool: /"
  done
  exit 0
fi

check() {
  local node n pods missing
  for node in $nodes; do
    n=${node##*node}
    pods=$(cluster kubectl get pods -A --field-selector "spec.nodeName=$node,status.phase=Running" \
      -o jsonpath='{range .items[?(@.spec.hostNetwork!=true)]}{.status.podIP}{"\n"}{end}' | grep . | sort -u || true)
    missing=$(comm -23 <(echo "$pods" | grep . || true) <(pool "$n" | awk '$2 == "assigned" {print $1}') | wc -l)
    if [ "$missing" != 0 ]; then
      echo "node $node: $missing running pod address(es) not assigned in ipamd's pool" >&2
      return 1
    fi
  done
}
check && sleep 1 && check
