#!/usr/bin/env bash
# A real Kubernetes cluster on this machine: real kubelets, containerd + runc,
# a real pod network (the bridge + host-local CNI with kube-proxy, Cilium,
# Calico, or the AWS VPC CNI against a mocked AWS) with each node in a network namespace of its own and the nodes joined
# by a veth "wire".
#
#   k8s-local-cluster.sh build [cilium]     # Kubernetes (~8 min cold on 2 cores), or Cilium (~10 min)
#   k8s-local-cluster.sh build calico [--calico-src DIR] [--libbpf-src DIR]
#                                           # Calico from its source (~10 min): a checkout of
#                                           #   github.com/projectcalico/calico (or BENCHLIB_CALICO_SRC),
#                                           #   else a clone of the release tag (BENCHLIB_CALICO_VERSION,
#                                           #   default v3.32.1); libbpf likewise (or BENCHLIB_LIBBPF_SRC)
#   k8s-local-cluster.sh build vpc          # the AWS VPC CNI v1.23.2 and ec2-metadata-mock (3-11 min cold)
#   k8s-local-cluster.sh build CNI --check  # build nothing: where CNI's build is, or how to make it
#   k8s-local-cluster.sh cnis               # the CNIs (cni/*.sh), a line each, tab-separated: name,
#                                           #   "build" if built from source, the Debian packages and
#                                           #   the host commands it needs beyond the cluster's ("-": none)
#   k8s-local-cluster.sh up [--nodes 1|2] [NETWORK]
#   k8s-local-cluster.sh cni bridge|cilium|calico|vpc [NETWORK]   # switch the pod network of a running cluster
#   k8s-local-cluster.sh proxy-mode iptables|nftables  # kube-proxy in that mode, the CNI kept
#   k8s-local-cluster.sh status                # exit 0 when every component runs
#   k8s-local-cluster.sh kubectl ARGS...       # kubectl as the cluster's admin
#   k8s-local-cluster.sh cilium-dbg NODE ARGS  # Cilium's client against node NODE's agent
#   k8s-local-cluster.sh calico-node NODE ARGS # calico-node (e.g. -bpf nat dump) in node NODE's felix namespaces
#   k8s-local-cluster.sh down [--wait]         # leaves nothing behind; --wait: after a running
#                                              #   measurement (else refused while one runs)
#   k8s-local-cluster.sh down --all [--wait]   # every local cluster down
#   k8s-local-cluster.sh list                  # the local clusters that are up, one a line, tab-separated:
#                                              #   name (or default), nodes, pod network, kubeconfig, context
#
# Several clusters side by side (e.g. one per pod network): `--cluster NAME` before the command, or
# BENCHLIB_K8S_CLUSTER=NAME (the option wins), selects cluster NAME for up, down, status, kubectl,
# cilium-dbg, calico-node, cni and proxy-mode. NAME: 1 to 8 lowercase letters and digits, starting
# with a letter, not "local"; none (or "default") is the default cluster. Each cluster has its own
# state dir (/var/lib/benchlib-k8s-NAME; the default's /var/lib/benchlib-k8s), node namespaces, node
# and cgroup names (bk8s-NAME-node1; the default's bk8s-node1), bridge (bk-NAME-br0), API forward (a
# free port of 127.0.0.1:16444-16543 chosen at `up`, in $STATE/api-port; the default's 16443) and
# kubeconfig cluster, user and context names (benchlib-NAME; the default's benchlib-local), so that
# KUBECONFIG=a:b holds both. Shared by all, on the host: the two locks (below), the kernel tunables the
# kubelet sets (the first cluster up saves them, the last one down restores them) and the mount
# points of the CNI agents' private directories (the last one down removes them).
#
# NETWORK (defaults: bridge with kube-proxy iptables; Cilium: tunnel, no kube-proxy, socket LB;
# Calico: iptables dataplane, VXLAN, kube-proxy in the dataplane's mode):
#   --cni bridge|cilium|calico|vpc        vpc: ipamd and aws-cni beside kube-proxy, no options of its own
#   --proxy-mode iptables|nftables|none   none = Cilium or Calico eBPF replaces kube-proxy
#   --routing tunnel|native               Cilium: VXLAN between nodes, or plain routes over the wire
#   --lb socket|packet                    Cilium without kube-proxy: Services translated at connect(),
#                                         or per packet by its tc programs
#   --dataplane iptables|nftables|ebpf    Calico's felix: rules beside kube-proxy iptables (or nftables),
#                                         its nftables rules beside kube-proxy nftables (3.29+), or eBPF
#                                         programs replacing kube-proxy
#   --routing vxlan|native                Calico: VXLAN between nodes, or plain routes (CrossSubnet)
#
# Exit status: 0 done, 1 failed (with the failing component's log tail), 2 a wrong
# option or value (refused before anything changes).
#
# Bounds: BENCHLIB_K8S_TIMEOUT_S (default 180) for each wait on a component;
# BENCHLIB_FELIX_READY_S (default the same) for felix's readiness after a switch;
# BENCHLIB_VPC_READY_S (default the same) for ipamd's readiness after a switch.
# BENCHLIB_VPC_POD_IPS (1-9, default 9, an m6i.large's) for the pod IPs each node's ENI holds.
#
# `up` is idempotent (a healthy cluster of the same size is kept and its pod
# network switched if another is asked for), bounded in time, and prints the
# failing component's log tail on failure. A cluster whose script was killed
# is cleaned by the next `up` or `down`. `up` and `down` are refused while a
# measurement (`benchlib collect`) runs, on any local cluster; so are `cni` and
# `proxy-mode`, unless the measurement itself runs them (a scenario's apply
# commands). One up/down/cni/proxy-mode runs at a time on the machine. Kubeconfigs
# for host-side clients (the apiserver is forwarded to 127.0.0.1:16443, or a
# named cluster's port): $STATE/admin.kubeconfig and $STATE/runner.kubeconfig
# (a token with only the rights of pipelines/kubernetes/rbac.yaml, once applied).
#
# The pieces, one concern each, are in scripts/cluster/ (sourced below); the
# address plan comes from benchlib/targets/lab/addresses.py. Facts the pieces
# rely on: docs and README "A real cluster on this machine".
set -euo pipefail
cd "$(dirname "$0")/.."
PROJECT=$PWD

# shellcheck source=scripts/cluster/common.sh
. scripts/cluster/common.sh
# shellcheck source=scripts/cluster/supervise.sh
. scripts/cluster/supervise.sh
# shellcheck source=scripts/cluster/lock.sh
. scripts/cluster/lock.sh
# shellcheck source=scripts/cluster/build.sh
. scripts/cluster/build.sh
# shellcheck source=scripts/cluster/pki.sh
. scripts/cluster/pki.sh
# shellcheck source=scripts/cluster/host.sh
. scripts/cluster/host.sh
# shellcheck source=scripts/cluster/control-plane.sh
. scripts/cluster/control-plane.sh
# shellcheck source=scripts/cluster/node-config.sh
. scripts/cluster/node-config.sh
# shellcheck source=scripts/cluster/node.sh
. scripts/cluster/node.sh
# shellcheck source=scripts/cluster/kube-proxy.sh
. scripts/cluster/kube-proxy.sh
# shellcheck source=scripts/cluster/pod-network.sh
. scripts/cluster/pod-network.sh
# Each CNI is a plugin file, cni/NAME.sh, with its build in cni/NAME-build.sh where it has one (the
# build first: the plugin reads its paths); cni/*-ns.sh are programs its agents start, not sourced.
for plugin in scripts/cluster/cni/*.sh; do
  case $plugin in *-ns.sh) continue ;; esac
  # shellcheck source=/dev/null # each plugin is checked on its own
  . "$plugin"
done
# shellcheck source=scripts/cluster/lifecycle.sh
. scripts/cluster/lifecycle.sh

usage() {  # the comment block above, up to its first blank line after the paragraph on `up`
  awk 'NR == 1 {next} /^# The pieces/ || !/^#/ {exit} {sub(/^# ?/, ""); print}' "$0" | sed '$d'
}

up_command() {  # up [--nodes 1|2] [NETWORK]
  local nodes=2 net_args=() spec
  while [ $# -gt 0 ]; do
    case $1 in
      --nodes) [ $# -ge 2 ] || bad_input "--nodes needs 1 or 2"; nodes=$2; shift 2 ;;
      --cluster) misplaced_cluster_option up ;;
      -h|--help) usage; exit 0 ;;
      *) net_args+=("$1"); shift ;;
    esac
  done
  case $nodes in 1|2) ;; *) bad_input "--nodes $nodes: choose 1 or 2" ;; esac
  spec=$(network_args up "${net_args[@]}")
  no_measurement_running up
  load_addresses
  # shellcheck disable=SC2086 # four words
  with_cluster_lock up "$nodes" $spec
}

cni_command() {  # cni <cni> [NETWORK]: switch the running cluster's pod network
  [ $# -gt 0 ] || bad_input "cni needs one of: ${CNIS[*]} (see $0 --help)"
  local spec
  spec=$(network_args cni --cni "$@")
  hold_measurement_lock "cni $*"
  load_addresses
  # shellcheck disable=SC2086 # four words
  with_cluster_lock pod_network $spec
}

proxy_mode_command() {  # proxy-mode <mode>: kube-proxy in that mode, the CNI kept
  local mode=$1
  [ -n "$mode" ] || bad_input "proxy-mode needs iptables or nftables (see $0 --help)"
  hold_measurement_lock "proxy-mode $mode"
  load_addresses
  with_cluster_lock switch_proxy_mode "$mode"
}

switch_proxy_mode() {  # read under the cluster lock: the network a concurrent switch left
  local cni routing last spec
  read -r cni _ routing last <"$STATE/network" 2>/dev/null || die "no cluster is up (run: $0 ${CLUSTER_OPT}up)"
  local args=(--cni "$cni" --proxy-mode "$1")
  [ "$routing" = - ] || args+=(--routing "$routing")
  [ "$cni" != calico ] || args+=(--dataplane "$last")  # felix's dataplane kept (or the mode refused)
  spec=$(network_args proxy-mode "${args[@]}")
  # shellcheck disable=SC2086 # four words
  pod_network $spec
}

misplaced_cluster_option() { bad_input "$1: --cluster NAME comes before the command ($0 --cluster NAME $1 ...)"; }

down_command() {  # down [--all] [--wait]
  local all="" wait=""
  while [ $# -gt 0 ]; do
    case $1 in
      --all) all=1 ;;
      --wait) wait=--wait ;;
      --cluster) misplaced_cluster_option down ;;
      *) bad_input "down: unknown argument '$1' (see $0 --help)" ;;
    esac
    shift
  done
  [ -z "$all" ] || [ "$cluster_from" != --cluster ] || bad_input "down --all takes every local cluster down: drop --cluster"
  no_measurement_running down "$wait"
  if [ -n "$all" ]; then with_cluster_lock down_all; else with_cluster_lock down; fi
}

cluster=${BENCHLIB_K8S_CLUSTER:-} cluster_from=BENCHLIB_K8S_CLUSTER
if [ "${1:-}" = --cluster ]; then
  [ $# -ge 2 ] || bad_input "--cluster needs a name (see $0 --help)"
  cluster=$2 cluster_from=--cluster
  shift 2
fi
select_cluster "$cluster" "$cluster_from" || exit 2

case "${1:-}" in
  build)
    if [ -z "${2:-}" ]; then build
    elif cni_known "$2" && cni_built_from_source "$2"; then c=$2; shift 2; "${c}_build" "$@"
    else bad_input "build: unknown argument '$2' (build, or build CNI for a CNI built from source: $(built_cnis))"
    fi ;;
  cnis) cni_table ;;
  up) shift; up_command "$@" ;;
  down) shift; down_command "$@" ;;
  list) list_clusters ;;
  cni) shift; cni_command "$@" ;;
  proxy-mode) proxy_mode_command "${2:-}" ;;
  cilium-dbg) [ -n "${2:-}" ] || bad_input "cilium-dbg needs a node number (see $0 --help)"; shift; cilium_dbg "$@" ;;
  calico-node) [ -n "${2:-}" ] || bad_input "calico-node needs a node number (see $0 --help)"; shift; calico_node_cli "$@" ;;
  status) status ;;
  kubectl) shift; kubectl "$@" ;;
  -h|--help|help) usage ;;
  *) usage >&2; exit 2 ;;
esac
