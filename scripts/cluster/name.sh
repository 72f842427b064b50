# shellcheck shell=bash disable=SC2034 # the names here are read by the scripts that source this file
# Which local cluster a command is about, and the names that keep it apart from the other local
# clusters on this machine: the one place a cluster's name becomes its paths and names. Sourced by
# scripts/cluster/common.sh and by the pipelines' scripts that read a cluster's state.
#
#   the default cluster (no name)      a cluster NAME
#   /var/lib/benchlib-k8s              /var/lib/benchlib-k8s-NAME      state (BENCHLIB_K8S_STATE moves the base)
#   bk8s-node1, bk8s-node2             bk8s-NAME-node1, -node2         netns, Kubernetes node and cgroup names
#   bk8s-br0                           bk-NAME-br0                     the bridge CNI's bridge (15 characters at most)
#   127.0.0.1:16443                    the first free port of 16444-16543, chosen at `up` ($STATE/api-port)
#   benchlib-local                     benchlib-NAME                   kubeconfig cluster and context names

STATE_BASE="${BENCHLIB_K8S_STATE:-/var/lib/benchlib-k8s}"
NAMED_API_PORTS="16444 16543"  # first and last: where a named cluster's API forward is chosen

cluster_name_error() {  # cluster_name_error <value>: why the value is not a cluster name (nothing when it is one)
  if ! [[ $1 =~ ^[a-z][a-z0-9]{0,7}$ ]]; then echo "a cluster name is 1 to 8 lowercase letters and digits, starting with a letter"
  elif [ "$1" = local ]; then echo "'local' would share the default cluster's context name benchlib-local"
  fi
}

cluster_state_dir() {  # cluster_state_dir <name|default>
  if [ "$1" = default ]; then echo "$STATE_BASE"; else echo "$STATE_BASE-$1"; fi
}

cluster_identity() {  # cluster_identity <name|default>: CLUSTER_NAME ("" for the default), STATE, PREFIX,
  # LINK_PREFIX, KUBE_CONTEXT, KUBE_USER_SUFFIX, HOST_API_PORT (a named cluster's: once `up` chose it),
  # CLUSTER_OPT (what selects it on the command line, for messages)
  STATE=$(cluster_state_dir "$1")
  if [ "$1" = default ]; then
    CLUSTER_NAME="" PREFIX=bk8s LINK_PREFIX=bk8s KUBE_CONTEXT=benchlib-local KUBE_USER_SUFFIX="" HOST_API_PORT=16443 CLUSTER_OPT=""
  else
    CLUSTER_NAME=$1 PREFIX=bk8s-$1 LINK_PREFIX=bk-$1 KUBE_CONTEXT=benchlib-$1 KUBE_USER_SUFFIX=@benchlib-$1 CLUSTER_OPT="--cluster $1 "
    HOST_API_PORT=$(cat "$STATE/api-port" 2>/dev/null || true)
  fi
}

select_cluster() {  # select_cluster <value> <where it came from: --cluster or BENCHLIB_K8S_CLUSTER>: or 2, with why
  local name=$1 why
  if [ -z "$name" ] && [ "$2" = BENCHLIB_K8S_CLUSTER ]; then name=default; fi
  if [ "$name" != default ]; then
    why=$(cluster_name_error "$name")
    if [ -n "$why" ]; then
      if [ "$2" = --cluster ]; then printf "k8s-local-cluster.sh: --cluster '%s': %s\n" "$name" "$why" >&2
      else printf "k8s-local-cluster.sh: BENCHLIB_K8S_CLUSTER='%s': %s\n" "$name" "$why" >&2; fi
      return 2
    fi
  fi
  cluster_identity "$name"
}

local_clusters() {  # every local cluster with a state dir or a node namespace, one a line ("default" for the default)
  local d name
  {
    if [ -d "$STATE_BASE" ]; then echo default; fi
    for d in "$STATE_BASE"-*/; do
      name=${d%/}; name=${name#"$STATE_BASE"-}
      if [ -d "$d" ] && [ -z "$(cluster_name_error "$name")" ]; then echo "$name"; fi
    done
    ip netns list 2>/dev/null | awk '{print $1}' | sed -nE 's/^bk8s-(([a-z][a-z0-9]{0,7})-)?node[0-9]+$/\2/p' | sed 's/^$/default/'
  } | sort -u
}

# every local cluster's node cgroups (as an extended regular expression on a path under the cgroup root)
NODE_CGROUP_ERE='/bk8s(-[a-z][a-z0-9]*)?-node[0-9]+(/|$)'
