# shellcheck shell=bash disable=SC2034 # the settings here are read by the pieces that source this file
# What every piece of the local cluster shares: where things are, the names of nodes and their
# namespaces (the selected cluster's, name.sh), messages, and the address plan (from benchlib, its one
# source). Sourced by scripts/k8s-local-cluster.sh, which has set PROJECT (the repository) and cd'd
# into it, and selects the cluster (select_cluster) before any piece runs.

# shellcheck source=scripts/cluster/name.sh
. "$PROJECT/scripts/cluster/name.sh"

K8S_VERSION=1.34.4
ETCD_VERSION=3.6.4
CACHE="${BENCHLIB_CACHE:-$HOME/.cache/benchlib}"
BIN="$CACHE/k8s/bin-k8s$K8S_VERSION-etcd$ETCD_VERSION"
HYPERKUBE="$BIN/hyperkube"
export GOMODCACHE="$CACHE/go/mod" GOCACHE="$CACHE/go/build" GOFLAGS=-buildvcs=false
API_PORT=6443                    # inside node 1's namespace; forwarded to the host's loopback on HOST_API_PORT
TIMEOUT_S=${BENCHLIB_K8S_TIMEOUT_S:-180}
FELIX_READY_S=${BENCHLIB_FELIX_READY_S:-$TIMEOUT_S}

log() { printf '[k8s-local-cluster] %s\n' "$*" >&2; }
die() { printf 'k8s-local-cluster.sh: %s\n' "$*" >&2; exit 1; }
bad_input() { printf 'k8s-local-cluster.sh: %s\n' "$*" >&2; exit 2; }  # a wrong option or value: nothing changed
node_ip() { echo "$WIRE_NET.$1"; }
netns() { echo "$PREFIX-node$1"; }
innode() { local n=$1; shift; nsenter --net="/run/netns/$(netns "$n")" "$@"; }
kubectl() { "$HYPERKUBE" kubectl --kubeconfig "$STATE/admin.kubeconfig" "$@"; }
ctr_of() { ctr -a "$STATE/node$1/containerd/containerd.sock" -n k8s.io "${@:2}"; }
remove_tree() {  # remove_tree <dir>: gone on return, though a process in flight still writes into it for a moment
  for _ in $(seq 50); do rm -rf "$1" 2>/dev/null && return 0; sleep 0.1; done
  rm -rf "$1"  # its own error names the entry that keeps coming back
}

load_addresses() {  # WIRE_NET, WIRE_PREFIX, CLUSTER_CIDR, NODE_CIDR_PREFIX, SERVICE_CIDR, API_SERVICE_IP
  local plan key value python="$PROJECT/.venv/bin/python"
  # the project's venv; else the python on PATH (a copy of the project run with another venv's commands)
  [ -x "$python" ] || python=python3
  plan=$("$python" -c \
    'from benchlib.targets.lab.addresses import cluster_shell; print(cluster_shell(), end="")') ||
    die "cannot read the address plan from benchlib.targets.lab.addresses (is the venv set up? bash scripts/setup.sh)"
  while IFS='=' read -r key value; do
    case $key in
      WIRE_NET|WIRE_PREFIX|CLUSTER_CIDR|NODE_CIDR_PREFIX|SERVICE_CIDR|API_SERVICE_IP) printf -v "$key" %s "$value" ;;
      *) die "benchlib.targets.lab.addresses: unexpected key '$key' in the cluster's address plan" ;;
    esac
  done <<<"$plan"
}
