#!/usr/bin/env bash
# A real Kubernetes cluster on this machine: real kubelets, containerd + runc,
# a real pod network (the bridge + host-local CNI with kube-proxy, or Cilium)
# with each node in a network namespace of its own and the nodes joined by a
# veth "wire".
#
#   k8s-local-cluster.sh build [cilium]     # Kubernetes (~8 min cold on 2 cores), or Cilium (~10 min)
#   k8s-local-cluster.sh up [--nodes 1|2] [NETWORK]
#   k8s-local-cluster.sh cni bridge|cilium [NETWORK]   # switch the pod network of a running cluster
#   k8s-local-cluster.sh proxy-mode iptables|nftables  # kube-proxy in that mode, the CNI kept
#   k8s-local-cluster.sh status                # exit 0 when every component runs
#   k8s-local-cluster.sh kubectl ARGS...       # kubectl as the cluster's admin
#   k8s-local-cluster.sh cilium-dbg NODE ARGS  # Cilium's client against node NODE's agent
#   k8s-local-cluster.sh down [--wait]         # leaves nothing behind; --wait: after a running
#                                              #   measurement (else refused while one runs)
#
# NETWORK (defaults: bridge with kube-proxy iptables; Cilium: tunnel, no kube-proxy, socket LB):
#   --cni bridge|cilium
#   --proxy-mode iptables|nftables|none   none = Cilium replaces kube-proxy (eBPF Services)
#   --routing tunnel|native               Cilium: VXLAN between nodes, or plain routes over the wire
#   --lb socket|packet                    Cilium without kube-proxy: Services translated at connect(),
#                                         or per packet by its tc programs
#
# `up` is idempotent (a healthy cluster of the same size is kept and its pod
# network switched if another is asked for), bounded in time, and prints the
# failing component's log tail on failure. A cluster whose script was killed
# is cleaned by the next `up` or `down`. Kubeconfigs for host-side clients (the
# apiserver is forwarded to 127.0.0.1:16443): $STATE/admin.kubeconfig and
# $STATE/runner.kubeconfig (a token with only the rights of
# pipelines/kubernetes/rbac.yaml, once applied).
#
# Facts this relies on (see docs and README "A real cluster on this machine"):
# - nodes are entered with `nsenter --net`, never `ip netns exec`, whose private
#   mount namespace would hide the kubelet's mounts from containerd and back;
# - this VM lacks CAP_SYS_RESOURCE, so containerd must not lower oom_score_adj
#   (restrict_oom_score_adj);
# - the kubelet changes host kernel tunables: saved at `up`, restored at `down`;
# - the kubelet and containerd write a few host paths whatever their flags:
#   removed at `down` when they point into $STATE.
# Addresses: node wire 198.18.32.0/24, pods 198.18.64.0/19 (/24 per node),
# Services 198.18.96.0/19: inside the RFC 2544 benchmark range 198.18.0.0/15,
# apart from the lab's (198.18.0.0/24, 198.18.128.0/17, 198.19.0.0/16).
set -euo pipefail
cd "$(dirname "$0")/.."
PROJECT=$PWD

K8S_VERSION=1.34.4
ETCD_VERSION=3.6.4
CACHE="${BENCHLIB_CACHE:-$HOME/.cache/benchlib}"
BIN="$CACHE/k8s/bin-k8s$K8S_VERSION-etcd$ETCD_VERSION"
HYPERKUBE="$BIN/hyperkube"
STATE="${BENCHLIB_K8S_STATE:-/var/lib/benchlib-k8s}"
LOCK=/run/benchlib/k8s-cluster.lock
MEASUREMENT_WAIT_S=7200  # down --wait: the longest a running measurement is waited for
PREFIX=bk8s                      # netns, node, bridge and cgroup names
WIRE_NET=198.18.32               # node N has $WIRE_NET.N
CLUSTER_CIDR=198.18.64.0/19
SERVICE_CIDR=198.18.96.0/19
API_SERVICE_IP=198.18.96.1       # the first address of SERVICE_CIDR: the kubernetes Service
API_PORT=6443                    # inside node 1's namespace
HOST_API_PORT=16443              # forwarded on the host's loopback
TIMEOUT_S=${BENCHLIB_K8S_TIMEOUT_S:-180}
PROXY_MODES="iptables nftables"
SYSCTLS="vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes"

log() { printf '[k8s-local-cluster] %s\n' "$*" >&2; }
die() { printf 'k8s-local-cluster.sh: %s\n' "$*" >&2; exit 1; }
node_ip() { echo "$WIRE_NET.$1"; }
netns() { echo "$PREFIX-node$1"; }
innode() { local n=$1; shift; nsenter --net="/run/netns/$(netns "$n")" "$@"; }
kubectl() { "$HYPERKUBE" kubectl --kubeconfig "$STATE/admin.kubeconfig" "$@"; }
ctr_of() { ctr -a "$STATE/node$1/containerd/containerd.sock" -n k8s.io "${@:2}"; }

usage() {
  sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//'
}

# ---------------------------------------------------------------- build
# One multi-call binary for every component, from the Go module proxy:
# k8s.io/kubernetes as a library (1.31/1.32 are incomplete on the proxy,
# 1.34.4 is complete; 1.35 would refuse cgroup v1 by default) with etcd 3.6.4
# embedded (the version 1.34.4 pins).
export GOMODCACHE="$CACHE/go/mod" GOCACHE="$CACHE/go/build" GOFLAGS=-buildvcs=false
build() {
  mkdir -p "$CACHE/k8s"
  exec 9>"$CACHE/k8s/build.lock"
  flock 9  # a second build at the same time waits, then finds it built
  if [ -x "$HYPERKUBE" ]; then
    log "already built: $BIN"
    return
  fi
  command -v go >/dev/null || die "go not found: the build needs Go >= 1.24 (and the Go module proxy)"
  local src="$CACHE/k8s/src-k8s$K8S_VERSION"
  mkdir -p "$src" "$BIN"
  go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" >/dev/null
  # k8s.io/kubernetes points its staging modules at ./staging/src; a library
  # user must replace each of them with the published v0.x.y module.
  local modfile="$GOMODCACHE/cache/download/k8s.io/kubernetes/@v/v$K8S_VERSION.mod"
  {
    printf 'module benchlib.local/hyperkube\n\ngo 1.24.0\n\n'
    printf 'require (\n\tk8s.io/kubernetes v%s\n\tgo.etcd.io/etcd/server/v3 v%s\n)\n\nreplace (\n' \
      "$K8S_VERSION" "$ETCD_VERSION"
    awk -v v="0.${K8S_VERSION#1.}" '/=> \.\/staging\/src\//{print "\t" $1 " => " $1 " v" v}' "$modfile"
    printf ')\n'
  } >"$src/go.mod"
  cat >"$src/main.go" <<'GO'
// Multi-call binary: hyperkube etcd|kube-apiserver|kube-controller-manager|
// kube-scheduler|kubelet|kube-proxy|kubectl [flags]
package main

import (
	"context"
	"fmt"
	"os"
	_ "time/tzdata"

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/server/v3/etcdmain"
	_ "k8s.io/client-go/plugin/pkg/client/auth"
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	kubectlcmd "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: hyperkube etcd|kube-apiserver|kube-controller-manager|kube-scheduler|kubelet|kube-proxy|kubectl [flags]")
		os.Exit(2)
	}
	name, args := os.Args[1], os.Args[2:]
	os.Args = append([]string{name}, args...)
	var cmd *cobra.Command
	switch name {
	case "etcd":
		etcdmain.Main(os.Args)
		return
	case "kube-apiserver":
		cmd = apiserver.NewAPIServerCommand()
	case "kube-controller-manager":
		cmd = controllermanager.NewControllerManagerCommand()
	case "kube-scheduler":
		cmd = scheduler.NewSchedulerCommand()
	case "kubelet":
		cmd = kubelet.NewKubeletCommand(context.Background())
	case "kube-proxy":
		cmd = proxy.NewProxyCommand()
	case "kubectl":
		// as upstream cmd/kubectl does: its own verbosity flag, errors printed once
		logs.GlogSetter(kubectlcmd.GetLogVerbosity(os.Args)) // nolint:errcheck
		if err := cli.RunNoErrOutput(kubectlcmd.NewDefaultKubectlCommand()); err != nil {
			kubectlutil.CheckErr(err)
		}
		return
	default:
		fmt.Fprintln(os.Stderr, "hyperkube: unknown command", name)
		os.Exit(2)
	}
	os.Exit(cli.Run(cmd))
}
GO
  log "go mod tidy (k8s.io/kubernetes v$K8S_VERSION)"
  (cd "$src" && go mod tidy)
  log "go build hyperkube (several minutes)"
  [ -x "$BIN/hyperkube" ] || (cd "$src" && nice -n 10 go build -o "$BIN/hyperkube.tmp" -ldflags "-s -w \
      -X k8s.io/component-base/version.gitVersion=v$K8S_VERSION \
      -X k8s.io/component-base/version.gitMajor=1 \
      -X k8s.io/component-base/version.gitMinor=${K8S_VERSION#1.}" . && mv "$BIN/hyperkube.tmp" "$BIN/hyperkube")
  log "built: $BIN"
}

# Cilium: its build, agents and cleanup
. "$PROJECT/scripts/k8s-local-cilium.sh"


# ------------------------------------------------------ daemons by PID
daemon() {  # daemon <name> <node|-> <command...>: detached (own session), PID recorded
  local name=$1 node=$2; shift 2
  local prefix=()
  [ "$node" = - ] || prefix=(nsenter --net="/run/netns/$(netns "$node")")
  # nsenter execs the program, so the recorded PID is the program's own; the
  # daemon must not inherit the script's lock descriptors (8, 9), or it holds the lock
  setsid "${prefix[@]}" "$@" >"$STATE/logs/$name.log" 2>&1 </dev/null 8>&- 9>&- &
  echo $! >"$STATE/run/$name.pid"
}

pid_of() { [ -f "$STATE/run/$1.pid" ] && cat "$STATE/run/$1.pid"; }
running() { local pid; pid=$(pid_of "$1") && kill -0 "$pid" 2>/dev/null; }

stop_daemons() {  # stop_daemons <name...>: TERM all at once, KILL what is left after 10 s
  local pids=() n pid
  for n in "$@"; do
    pid=$(pid_of "$n") || continue
    kill "$pid" 2>/dev/null && pids+=("$pid")
  done
  for _ in $(seq 100); do
    local alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  for n in "$@"; do rm -f "$STATE/run/$n.pid"; done
}

fail() {  # fail <component> <message>: the message and the component's log tail
  printf 'k8s-local-cluster.sh: %s\n' "$2" >&2
  if [ -f "$STATE/logs/$1.log" ]; then
    printf -- '--- last lines of %s ---\n' "$STATE/logs/$1.log" >&2
    tail -25 "$STATE/logs/$1.log" >&2
  fi
  exit 1
}

wait_for() {  # wait_for <component> <what> <command...>: retry until it succeeds, bounded
  local component=$1 what=$2; shift 2
  local deadline=$((SECONDS + TIMEOUT_S))
  until "$@" >/dev/null 2>&1; do
    running "$component" || fail "$component" "$component exited while waiting for $what"
    [ $SECONDS -lt $deadline ] || fail "$component" "timed out after ${TIMEOUT_S}s waiting for $what"
    sleep 0.2
  done
}

# ------------------------------------------------------------ pieces
pki() {
  local p="$STATE/pki"
  mkdir -p "$p"
  # umask 077: keys, tokens and certificates are 0600 from the moment they exist
  ( umask 077; cd "$p"
    openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj /CN=benchlib-local-ca \
      -keyout ca.key -out ca.crt 2>/dev/null
    cert() {  # cert <name> <subject> <subjectAltName>
      openssl req -newkey rsa:2048 -nodes -subj "$2" -keyout "$1.key" -out "$1.csr" 2>/dev/null
      printf 'subjectAltName=%s\n' "$3" >"$1.ext"
      openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 \
        -extfile "$1.ext" -out "$1.crt" 2>/dev/null
    }
    cert apiserver /CN=kube-apiserver \
      "IP:$(node_ip 1),IP:127.0.0.1,IP:$API_SERVICE_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default.svc"
    # the apiserver's client cert to the kubelets (exec, logs): system:masters passes their webhook authz
    cert kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" DNS:kubelet-client
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    {
      echo "$(openssl rand -hex 16),admin,admin,system:masters"
      echo "$(openssl rand -hex 16),benchlib-runner,benchlib-runner"
      echo "$(openssl rand -hex 16),system:kube-proxy,kube-proxy"
      for n in 1 2; do echo "$(openssl rand -hex 16),system:node:$PREFIX-node$n,$PREFIX-node$n,system:nodes"; done
    } >tokens.csv )
  kubeconfig "$STATE/admin.kubeconfig" admin "https://127.0.0.1:$HOST_API_PORT"
  kubeconfig "$STATE/runner.kubeconfig" benchlib-runner "https://127.0.0.1:$HOST_API_PORT"
  # components inside the node namespaces reach the apiserver over the wire
  kubeconfig "$STATE/kube-proxy.kubeconfig" system:kube-proxy "https://$(node_ip 1):$API_PORT"
  for n in 1 2; do kubeconfig "$STATE/node$n.kubeconfig" "system:node:$PREFIX-node$n" "https://$(node_ip 1):$API_PORT"; done
  kubeconfig "$STATE/cp.kubeconfig" admin "https://$(node_ip 1):$API_PORT"
}

kubeconfig() {  # kubeconfig <file> <user> <server>
  local token
  token=$(awk -F, -v u="$2" '$2 == u {print $1}' "$STATE/pki/tokens.csv")
  (umask 077; cat >"$1") <<KC
apiVersion: v1
kind: Config
clusters: [{name: benchlib-local, cluster: {server: "$3", certificate-authority: "$STATE/pki/ca.crt"}}]
users: [{name: $2, user: {token: "$token"}}]
contexts: [{name: benchlib-local, context: {cluster: benchlib-local, user: $2}}]
current-context: benchlib-local
KC
}

network() {  # network <nodes>: one namespace per node, a veth wire between them
  local nodes=$1 n
  for n in $(seq 1 "$nodes"); do
    ip netns add "$(netns "$n")"
    ip -n "$(netns "$n")" link set lo up
    innode "$n" sysctl -qw net.ipv4.ip_forward=1
  done
  if [ "$nodes" = 2 ]; then
    ip link add wire0 netns "$(netns 1)" type veth peer name wire0 netns "$(netns 2)"
  else  # one node still needs a non-loopback address (the kubelet refuses a loopback node IP);
        # a veth with a loose end, as this kernel has no dummy links
    ip -n "$(netns 1)" link add wire0 type veth peer name wire0-end
    ip -n "$(netns 1)" link set wire0-end up
  fi
  for n in $(seq 1 "$nodes"); do
    ip -n "$(netns "$n")" addr add "$(node_ip "$n")/24" dev wire0
    ip -n "$(netns "$n")" link set wire0 up
  done
}

control_plane() {
  local p="$STATE/pki"
  daemon etcd 1 "$HYPERKUBE" etcd --name benchlib --data-dir "$STATE/etcd" --unsafe-no-fsync \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster benchlib=http://127.0.0.1:2380 --listen-metrics-urls=
  wait_for etcd "etcd health" innode 1 curl -sf --max-time 1 http://127.0.0.1:2379/health
  daemon kube-apiserver 1 "$HYPERKUBE" kube-apiserver \
    --etcd-servers=http://127.0.0.1:2379 \
    --bind-address="$(node_ip 1)" --advertise-address="$(node_ip 1)" --secure-port=$API_PORT \
    --tls-cert-file="$p/apiserver.crt" --tls-private-key-file="$p/apiserver.key" \
    --client-ca-file="$p/ca.crt" --token-auth-file="$p/tokens.csv" \
    --authorization-mode=Node,RBAC \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$p/sa.pub" --service-account-signing-key-file="$p/sa.key" \
    --service-cluster-ip-range=$SERVICE_CIDR \
    --kubelet-client-certificate="$p/kubelet-client.crt" --kubelet-client-key="$p/kubelet-client.key" \
    --kubelet-preferred-address-types=InternalIP \
    --allow-privileged=true --profiling=false
  wait_for kube-apiserver "the apiserver's /readyz" \
    innode 1 curl -sf --max-time 2 --cacert "$p/ca.crt" "https://$(node_ip 1):$API_PORT/readyz"
  # the host's clients (benchlib, tests) reach it on loopback
  daemon apiserver-forward - socat "TCP-LISTEN:$HOST_API_PORT,bind=127.0.0.1,reuseaddr,fork" \
    "SYSTEM:exec nsenter --net=/run/netns/$(netns 1) socat STDIO TCP\\:$(node_ip 1)\\:$API_PORT"
  # --kube-api-qps: the default 20 writes/s makes 5000 Services' EndpointSlices take minutes
  daemon kube-controller-manager 1 "$HYPERKUBE" kube-controller-manager \
    --kubeconfig="$STATE/cp.kubeconfig" --bind-address=127.0.0.1 --secure-port=10257 \
    --leader-elect=false --service-account-private-key-file="$p/sa.key" --root-ca-file="$p/ca.crt" \
    --use-service-account-credentials=false --kube-api-qps=500 --kube-api-burst=1000 \
    --allocate-node-cidrs=true --cluster-cidr=$CLUSTER_CIDR --node-cidr-mask-size=24 \
    --service-cluster-ip-range=$SERVICE_CIDR \
    --controllers='*,-cloud-node-lifecycle,-service-lb-controller,-node-route-controller'
  daemon kube-scheduler 1 "$HYPERKUBE" kube-scheduler --kubeconfig="$STATE/cp.kubeconfig" \
    --bind-address=127.0.0.1 --secure-port=10259 --leader-elect=false
  wait_for kube-controller-manager "the default ServiceAccount" kubectl get serviceaccount default
  kubectl apply -f pipelines/kubernetes/rbac.yaml >/dev/null
}

containerd_config() {  # containerd_config <node>
  local d="$STATE/node$1"
  cat <<TOML
version = 2
root = "$d/containerd/root"
state = "$d/containerd/state"
[grpc]
  address = "$d/containerd/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/benchlib/pause:1"
  disable_apparmor = true
  # no CAP_SYS_RESOURCE here: runc cannot set the sandbox's negative oom_score_adj
  restrict_oom_score_adj = true
  # pod network namespaces under the node's state, not the host's /var/run/netns
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$d/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    # the Debian plugins, and cilium-cni's wrapper while Cilium runs (cilium_cni_plugin)
    bin_dir = "$d/cni/bin"
    conf_dir = "$d/cni/net.d"
    max_conf_num = 1
TOML
}

kubelet_config() {  # kubelet_config <node>
  local d="$STATE/node$1"
  cat <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://$d/containerd/containerd.sock
cgroupDriver: cgroupfs
cgroupRoot: /$PREFIX-node$1
failCgroupV1: false
address: $(node_ip "$1")
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $STATE/pki/ca.crt}
authorization: {mode: Webhook}
podLogsDir: $d/pod-logs
failSwapOn: true
evictionHard: {memory.available: 200Mi, nodefs.available: 2%, imagefs.available: 2%}
# the images were imported by hand: never garbage-collect them
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
nodeStatusReportFrequency: 10s
YAML
}

cni_config() {  # cni_config <node> <podCIDR>
  cat <<JSON
{"cniVersion": "1.0.0", "name": "benchlib-bridge", "plugins": [
  {"type": "bridge", "bridge": "$PREFIX-br0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$2"}]], "routes": [{"dst": "0.0.0.0/0"}],
            "dataDir": "$STATE/node$1/cni/ipam"}},
  {"type": "loopback"}]}
JSON
}

cgroup_dirs() {  # the kubelet's cgroup root in every v1 hierarchy (and v2 if unified)
  local h
  for h in /sys/fs/cgroup/*/; do
    case $h in */unified/) continue ;; esac
    echo "${h%/}/$PREFIX-node$1"
  done
  [ -f /sys/fs/cgroup/cgroup.controllers ] && echo "/sys/fs/cgroup/$PREFIX-node$1"
  true
}

pod_cidr() { kubectl get node "$1" -o jsonpath='{.spec.podCIDR}'; }
has_pod_cidr() { [ -n "$(pod_cidr "$1")" ]; }

node() {  # node <n>: containerd, the images, the kubelet, the CNI config once the podCIDR is known
  local n=$1 d="$STATE/node$1" name="$PREFIX-node$1" c
  mkdir -p "$d/containerd" "$d/cni/net.d" "$d/kubelet" "$d/pod-logs" "$d/runc"
  containerd_config "$n" >"$d/containerd.toml"
  kubelet_config "$n" >"$d/kubelet.yaml"
  for c in $(cgroup_dirs "$n"); do
    mkdir -p "$c"
    if [ -f "$(dirname "$c")/cpuset.cpus" ] && [ ! -f /sys/fs/cgroup/cgroup.controllers ]; then
      cat "$(dirname "$c")/cpuset.cpus" >"$c/cpuset.cpus"
      cat "$(dirname "$c")/cpuset.mems" >"$c/cpuset.mems"
    fi
  done
  mkdir -p "$d/cni/bin"
  ln -sf /usr/lib/cni/* "$d/cni/bin/"
  daemon "containerd$n" "$n" containerd --config "$d/containerd.toml"
  wait_for "containerd$n" "containerd on node $n" ctr -a "$d/containerd/containerd.sock" version
  local image
  for image in "$STATE"/images/*.tar; do ctr_of "$n" images import "$image" >/dev/null; done
  daemon "kubelet$n" "$n" "$HYPERKUBE" kubelet --config="$d/kubelet.yaml" --kubeconfig="$STATE/node$n.kubeconfig" \
    --root-dir="$d/kubelet" --cert-dir="$d/kubelet/pki" --hostname-override="$name" --node-ip="$(node_ip "$n")" --v=1
  wait_for "kubelet$n" "node $name to get a podCIDR" has_pod_cidr "$name"
  pod_cidr "$name" >"$d/podcidr"
}

node_ready() { kubectl wait --for=condition=Ready "node/$PREFIX-node$1" --timeout=2s; }

# ------------------------------------------------------ the pod network
# A cluster's pod network is "<cni> <proxy-mode> <routing> <lb>" in $STATE/network:
#   bridge  iptables|nftables  -  -                      (the bridge plugin, static routes over the wire)
#   cilium  iptables|nftables  tunnel|native  -          (Cilium alongside kube-proxy)
#   cilium  none  tunnel|native  socket|packet           (Cilium replacing kube-proxy)
# Switching it is what a CNI change is on a real cluster: the old one's
# devices, routes and rules go, the new one's agents start, pods made after
# that get the new network (benchlib makes fresh pods for every scenario).

bridge_up() {  # bridge_up <nodes>: the bridge plugin's config, each node reaching the other's pods over the wire
  local n
  for n in $(seq 1 "$1"); do cni_config "$n" "$(cat "$STATE/node$n/podcidr")" >"$STATE/node$n/cni/net.d/10-benchlib.conflist"; done
  [ "$1" = 2 ] || return 0
  ip -n "$(netns 1)" route replace "$(cat "$STATE/node2/podcidr")" via "$(node_ip 2)"
  ip -n "$(netns 2)" route replace "$(cat "$STATE/node1/podcidr")" via "$(node_ip 1)"
}

bridge_down() {  # bridge_down <nodes>
  local n
  for n in $(seq 1 "$1"); do
    rm -f "$STATE/node$n/cni/net.d/10-benchlib.conflist"
    ip -n "$(netns "$n")" link del "$PREFIX-br0" 2>/dev/null || true
  done
}

kube_proxy() {  # kube_proxy <node> <mode>
  local n=$1
  # metrics on the node address: the apiserver's node proxy reads them, as on a real cluster
  daemon "kube-proxy$n" "$n" "$HYPERKUBE" kube-proxy --kubeconfig="$STATE/kube-proxy.kubeconfig" \
    --hostname-override="$PREFIX-node$n" --proxy-mode="$2" --cluster-cidr=$CLUSTER_CIDR \
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

pod_network() {  # pod_network <cni> <proxy-mode> <routing> <lb>: switch to it (nothing to do when it runs)
  local want="$*" have nodes n
  nodes=$(cat "$STATE/nodes" 2>/dev/null) || die "no cluster is up (run: $0 up)"
  have=$(cat "$STATE/network" 2>/dev/null || echo "none none - -")
  if [ "$have" = "$want" ] && network_running "$nodes"; then log "pod network: $want (unchanged)"; return; fi
  local old_cni old_proxy old_routing old_lb t0=$SECONDS
  read -r old_cni old_proxy old_routing old_lb <<<"$have"
  rm -f "$STATE/network"
  # Cilium's agent flags depend on all four; the bridge only on itself
  if [ "$1" != bridge ] || [ "$old_cni" != bridge ]; then
    case $old_cni in
      bridge) bridge_down "$nodes" ;;
      cilium) cilium_down "$nodes" ;;
    esac
    # the old pod routes (static, or Cilium's native ones over the wire)
    for n in $(seq 1 "$nodes"); do ip -n "$(netns "$n")" route flush root "$CLUSTER_CIDR" 2>/dev/null || true; done
  fi
  kube_proxies "$nodes" "$old_proxy" "$2"
  case $1 in
    bridge) bridge_up "$nodes" ;;
    cilium) cilium_up "$nodes" "$3" "$2" "$4" ;;
  esac
  for n in $(seq 1 "$nodes"); do wait_for "kubelet$n" "node $(netns "$n") to be Ready" node_ready "$n"; done
  echo "$want" >"$STATE/network"
  log "pod network: $want on $nodes node(s), after $((SECONDS - t0)) s"
}

network_components() {  # network_components <nodes>: the daemons the current pod network needs
  local cni proxy n
  read -r cni proxy _ _ <"$STATE/network" || return 0
  [ "$cni" = cilium ] && echo cilium-operator
  for n in $(seq 1 "$1"); do
    [ "$cni" = cilium ] && echo "cilium-agent$n"
    [ "$proxy" = none ] || echo "kube-proxy$n"
  done
  true
}

network_running() {  # every daemon of the current pod network is alive
  local c; for c in $(network_components "$1"); do running "$c" || return 1; done
}

network_args() {  # network_args <up|cni> ARGS: validated "<cni> <proxy-mode> <routing> <lb>" on stdout
  local cmd=$1 cni="" proxy="" routing="" lb=""; shift
  while [ $# -gt 0 ]; do
    case $1 in
      --cni) cni=${2:?--cni needs bridge or cilium}; shift 2 ;;
      --proxy-mode) proxy=${2:?--proxy-mode needs iptables, nftables or none}; shift 2 ;;
      --routing) routing=${2:?--routing needs tunnel or native}; shift 2 ;;
      --lb) lb=${2:?--lb needs socket or packet}; shift 2 ;;
      *) die "$cmd: unknown argument '$1' (see $0 --help)" ;;
    esac
  done
  cni=${cni:-bridge}
  case $cni in
    bridge)
      proxy=${proxy:-iptables}
      [ -z "$routing$lb" ] || die "--routing and --lb are Cilium's options (add --cni cilium)"
      [ "$proxy" != none ] || die "--proxy-mode none needs a CNI that replaces kube-proxy (--cni cilium)"
      routing=- lb=- ;;
    cilium)
      proxy=${proxy:-none} routing=${routing:-tunnel}
      case $routing in tunnel|native) ;; *) die "--routing $routing: choose tunnel or native" ;; esac
      if [ "$proxy" = none ]; then
        lb=${lb:-socket}
        case $lb in socket|packet) ;; *) die "--lb $lb: choose socket or packet" ;; esac
      else
        [ -z "$lb" ] || die "--lb: with kube-proxy running, kube-proxy balances Services (drop --lb or use --proxy-mode none)"
        lb=-
      fi ;;
    *) die "--cni $cni: choose bridge or cilium" ;;
  esac
  case " $PROXY_MODES none " in *" $proxy "*) ;; *) die "--proxy-mode $proxy: choose one of: $PROXY_MODES none" ;; esac
  echo "$cni $proxy $routing $lb"
}

images() {
  mkdir -p "$STATE/images"
  "$PROJECT/.venv/bin/python" -m benchlib.images "$STATE/images" >&2
}

# --------------------------------------------------------------- commands
components() {  # what must run for a cluster of <nodes> nodes
  echo etcd kube-apiserver apiserver-forward kube-controller-manager kube-scheduler
  local n; for n in $(seq 1 "$1"); do echo "containerd$n" "kubelet$n"; done
  network_components "$1"
}

healthy() {  # healthy: a complete cluster runs (its `up` finished and every component is alive)
  [ -f "$STATE/up.done" ] || return 1
  local c; for c in $(components "$(cat "$STATE/nodes")"); do running "$c" || return 1; done
}

status() {
  if [ ! -d "$STATE" ]; then echo "down"; return 1; fi
  local nodes c rc=0
  nodes=$(cat "$STATE/nodes" 2>/dev/null || echo 2)
  for c in $(components "$nodes"); do
    if running "$c"; then echo "$c: running (pid $(pid_of "$c"))"; else echo "$c: not running"; rc=1; fi
  done
  [ -f "$STATE/up.done" ] || { echo "up did not finish (a killed or failed up: run down or up)"; rc=1; }
  if [ $rc = 0 ]; then
    echo "pod network (cni proxy-mode routing lb): $(cat "$STATE/network")"
    kubectl get nodes -o wide
    echo "KUBECONFIG=$STATE/admin.kubeconfig"
  fi
  return $rc
}

up() {
  local nodes=2 net_args=() network_spec
  while [ $# -gt 0 ]; do
    case $1 in
      --nodes) nodes=${2:?--nodes needs 1 or 2}; shift 2 ;;
      -h|--help) usage; exit 0 ;;
      *) net_args+=("$1"); shift ;;
    esac
  done
  case $nodes in 1|2) ;; *) die "--nodes $nodes: choose 1 or 2" ;; esac
  network_spec=$(network_args up "${net_args[@]}")
  [ "$(id -u)" = 0 ] || die "must run as root (network namespaces, containerd, the kubelet)"
  [ -x "$HYPERKUBE" ] || die "no binary at $HYPERKUBE: run '$0 build' first"
  local missing=() c
  for c in containerd runc ctr nsenter socat curl openssl conntrack iptables nft gcc busybox; do
    command -v "$c" >/dev/null || missing+=("$c")
  done
  [ ${#missing[@]} = 0 ] || die "missing commands: ${missing[*]} (bash scripts/setup.sh installs them)"
  [ -x /usr/lib/cni/bridge ] || die "missing the CNI plugins in /usr/lib/cni (apt-get install containernetworking-plugins)"

  if healthy && [ "$(cat "$STATE/nodes")" = "$nodes" ]; then
    log "already up ($nodes node(s))"
    # shellcheck disable=SC2086 # four words
    pod_network $network_spec
    return
  fi
  [ -d "$STATE" ] && { log "removing an incomplete or different cluster first"; down; }
  local t0=$SECONDS
  mkdir -p "$STATE/logs" "$STATE/run"
  echo "$nodes" >"$STATE/nodes"
  # the kubelet sets these host-wide; `down` puts them back
  local key
  for key in $SYSCTLS; do echo "$key=$(sysctl -n "$key")"; done >"$STATE/sysctl.saved"
  trap 'log "up failed: cleaning up"; trap - EXIT; down >/dev/null 2>&1 || true' EXIT
  images
  pki
  network "$nodes"
  control_plane
  log "control plane ready after $((SECONDS - t0)) s"
  local n
  for n in $(seq 1 "$nodes"); do node "$n"; done
  # shellcheck disable=SC2086 # four words
  pod_network $network_spec
  trap - EXIT
  touch "$STATE/up.done"
  log "up: $nodes node(s) Ready, pod network $network_spec, after $((SECONDS - t0)) s; KUBECONFIG=$STATE/admin.kubeconfig"
}

down() {
  local t0=$SECONDS n
  if [ ! -d "$STATE" ] && ! ip netns list | grep -q "^$PREFIX-node"; then log "nothing to take down"; return; fi
  mkdir -p "$STATE/run"
  stop_daemons apiserver-forward kube-proxy1 kube-proxy2 kubelet1 kubelet2 cilium-agent1 cilium-agent2 cilium-operator
  for n in 1 2; do
    local sock="$STATE/node$n/containerd/containerd.sock" t
    if [ -S "$sock" ] && running "containerd$n"; then
      # the shims outlive containerd: kill the tasks through it first
      for t in $(ctr_of "$n" tasks ls -q 2>/dev/null); do ctr_of "$n" tasks kill -s SIGKILL "$t" 2>/dev/null || true; done
      for t in $(ctr_of "$n" tasks ls -q 2>/dev/null); do ctr_of "$n" tasks rm -f "$t" 2>/dev/null || true; done
    fi
  done
  stop_daemons containerd1 containerd2 kube-scheduler kube-controller-manager kube-apiserver etcd
  # anything still running from the state dir (shims, pods of a killed cluster)
  local pid
  for pid in $(pgrep -f -- "$STATE/" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
  for n in 1 2; do ip netns pids "$(netns "$n")" 2>/dev/null | xargs -r kill -9 2>/dev/null || true; done
  # pod netns bind mounts and container rootfs mounts, deepest first
  local m
  for m in $(awk -v s="$STATE/" 'index($2, s) == 1 {print $2}' /proc/self/mounts | sort -r); do
    umount -l "$m" 2>/dev/null || true
  done
  for n in 1 2; do ip netns del "$(netns "$n")" 2>/dev/null || true; done
  for n in 1 2; do
    local c
    # in every hierarchy, the unified one included (the kubelet creates it there too)
    for c in /sys/fs/cgroup/*/"$PREFIX-node$n" /sys/fs/cgroup/"$PREFIX-node$n"; do
      if [ -d "$c" ]; then find "$c" -depth -type d -exec rmdir {} \; 2>/dev/null || true; fi
    done
  done
  # host paths the kubelet and containerd write whatever their flags
  find /var/log/containers /var/log/pods -maxdepth 1 -lname "$STATE/*" -delete 2>/dev/null || true
  grep -ls "$STATE/" /var/lib/cni/results/* 2>/dev/null | xargs -r rm -f || true
  rm -f /var/lib/kubelet/device-plugins/kubelet.sock
  rmdir /var/lib/kubelet/device-plugins /var/lib/kubelet /var/lib/cni/results /var/lib/cni /var/log/containers 2>/dev/null || true
  if [ -f "$STATE/sysctl.saved" ]; then xargs -r sysctl -qw <"$STATE/sysctl.saved"; fi
  # the empty mount point the agents' private /run/cilium covers
  if [ -f "$STATE/run/created-run-cilium" ]; then rmdir /run/cilium 2>/dev/null || true; fi
  rm -rf "$STATE"
  log "down after $((SECONDS - t0)) s"
}

cni() {  # cni <bridge|cilium> [options]: switch the running cluster's pod network
  [ $# -gt 0 ] || die "cni needs bridge or cilium (see $0 --help)"
  local cni=$1; shift
  # shellcheck disable=SC2046 # four words
  pod_network $(network_args cni --cni "$cni" "$@")
}

proxy_mode() {  # proxy_mode <mode>: kube-proxy in that mode, the CNI kept
  local cni routing lb
  read -r cni _ routing lb <"$STATE/network" 2>/dev/null || die "no cluster is up (run: $0 up)"
  local args=(--cni "$cni" --proxy-mode "$1")
  [ "$routing" = - ] || args+=(--routing "$routing")
  # shellcheck disable=SC2046 # four words
  pod_network $(network_args proxy-mode "${args[@]}")
}

no_measurement_running() {  # up and down change the CPUs' load and the cluster under a running `benchlib collect`
  # no_measurement_running <what> [--wait]: refuse at once, or wait (bounded) for it to end
  local lock=/run/benchlib/collect.lock  # held by collect for its whole run (benchlib/machine.py)
  [ -e "$lock" ] || return 0
  exec 7>>"$lock"
  if ! flock -n 7; then
    [ "${2:-}" = --wait ] || die "a measurement is running ($(cat "$lock")): $1 would disturb it; wait for it or stop it first (down --wait waits)"
    log "a measurement is running ($(cat "$lock")): $1 waits for it to end (at most $MEASUREMENT_WAIT_S s)"
    flock -w "$MEASUREMENT_WAIT_S" 7 || die "the measurement still runs after $MEASUREMENT_WAIT_S s: $1 not done"
  fi
  flock -u 7
  exec 7>&-
}

with_lock() {  # one up/down/proxy-mode at a time on this machine
  mkdir -p "$(dirname "$LOCK")"
  exec 8>"$LOCK"
  flock -w 600 8 || die "another k8s-local-cluster.sh holds $LOCK"
  "$@"
}

case "${1:-}" in
  build)
    case "${2:-}" in
      "") build ;;
      cilium) cilium_build ;;
      *) die "build: unknown argument '$2' (build, or build cilium)" ;;
    esac ;;
  up) shift; no_measurement_running up; with_lock up "$@" ;;
  down)
    case "${2:-}" in ""|--wait) ;; *) die "down: unknown argument '$2' (see $0 --help)" ;; esac
    no_measurement_running down "${2:-}"; with_lock down ;;
  cni) shift; with_lock cni "$@" ;;
  proxy-mode) with_lock proxy_mode "${2:?proxy-mode needs iptables or nftables}" ;;
  cilium-dbg) shift; cilium_dbg "${1:?cilium-dbg needs a node number}" "${@:2}" ;;
  status) status ;;
  kubectl) shift; kubectl "$@" ;;
  -h|--help|help) usage ;;
  *) usage >&2; exit 2 ;;
esac
