#!/usr/bin/env bash
# A real, local Kubernetes control plane for the test suite (never for a campaign):
# etcd + kube-apiserver + kube-controller-manager + kube-scheduler, built from the
# Go module proxy (k8s.io/kubernetes as a library, one multi-call binary with etcd
# embedded), and KWOK, which fakes two nodes whose pods "run" exec'd commands on
# this host. Everything listens on 127.0.0.1 only.
#
#   k8s-control-plane.sh build   # once, ~10 min cold on 2 cores; a no-op when built
#   k8s-control-plane.sh start   # ~5 s; writes $STATE/admin.kubeconfig + runner token
#   k8s-control-plane.sh stop    # stops what start started (by recorded PID)
#
# Why these versions (see ../shared notes): k8s 1.31/1.32 are incomplete on the
# module proxy, 1.34.4 is complete; KWOK v0.8 needs etcd's RequestWatchProgress,
# which Debian's etcd 3.4 lacks, so etcd 3.6.4 (pinned by k8s 1.34.4) is embedded.
set -euo pipefail
cd "$(dirname "$0")/.."

K8S_VERSION=1.34.4
ETCD_VERSION=3.6.4
KWOK_VERSION=0.8.0
# Builds live in a per-machine cache keyed by version, so a fresh clone (CI)
# on the same machine reuses them while a new machine builds from scratch.
CACHE="${BENCHLIB_CACHE:-$HOME/.cache/benchlib}"
ROOT="$CACHE/k8s"
BIN="$ROOT/bin-k8s$K8S_VERSION-etcd$ETCD_VERSION-kwok$KWOK_VERSION"
STATE="${K8S_STATE:-$PWD/.tools/k8s/state}"
export GOMODCACHE="$CACHE/go/mod" GOCACHE="$CACHE/go/build" GOFLAGS=-buildvcs=false

log() { printf '[k8s-control-plane] %s\n' "$*" >&2; }

build() {
  mkdir -p "$ROOT"
  exec 9>"$ROOT/build.lock"
  flock 9  # a second build at the same time waits, then finds it built
  if [ -x "$BIN/hyperkube" ] && [ -x "$BIN/kwok" ]; then
    log "already built: $BIN"
    return
  fi
  command -v go >/dev/null || { echo "k8s-control-plane.sh: go not found" >&2; exit 1; }
  local src="$ROOT/src-k8s$K8S_VERSION"
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
  log "go install kwok v$KWOK_VERSION"
  GOBIN="$BIN" go install "sigs.k8s.io/kwok/cmd/kwok@v$KWOK_VERSION"
  log "built: $BIN"
}

# A CA, serving certs for the apiserver and KWOK's kubelet endpoint, a kubelet
# client cert, the service-account key, and two random bearer tokens: an admin
# (system:masters) and "benchlib-runner" (no groups: it gets only what RBAC grants).
pki() {
  local pki="$STATE/pki"
  [ -f "$pki/tokens.csv" ] && return
  mkdir -p "$pki"
  ( cd "$pki"
    openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj /CN=benchlib-test-ca \
      -keyout ca.key -out ca.crt 2>/dev/null
    for name in apiserver kwok kubelet-client; do
      openssl req -newkey rsa:2048 -nodes -subj "/CN=$name" -keyout $name.key -out $name.csr 2>/dev/null
      printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >$name.ext
      openssl x509 -req -in $name.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 \
        -extfile $name.ext -out $name.crt 2>/dev/null
    done
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    printf '%s,admin,admin,system:masters\n%s,benchlib-runner,benchlib-runner\n' \
      "$(openssl rand -hex 16)" "$(openssl rand -hex 16)" >tokens.csv
    chmod 600 ./*.key tokens.csv )
}

kubeconfig() {  # kubeconfig <file> <user> <token>
  cat >"$1" <<KC
apiVersion: v1
kind: Config
clusters: [{name: local, cluster: {server: "https://127.0.0.1:6443", certificate-authority: "$STATE/pki/ca.crt"}}]
users: [{name: $2, user: {token: $3}}]
contexts: [{name: local, context: {cluster: local, user: $2}}]
current-context: local
KC
  chmod 600 "$1"
}

# KWOK: both fake nodes answer on 127.0.0.1:10250; exec runs the command on this
# host. KWOK ships its lifecycle stages as files, not defaults: use its own.
kwok_config() {
  cat <<YAML
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  nodeIP: 127.0.0.1
  nodePort: 10250
  serverAddress: 127.0.0.1:10250
  tlsCertFile: $STATE/pki/kwok.crt
  tlsPrivateKeyFile: $STATE/pki/kwok.key
  manageAllNodes: true
  cidr: 10.244.0.0/16
  nodeLeaseDurationSeconds: 40
  # defaults are not applied when a config file is given; 0 is refused
  nodeLeaseParallelism: 4
  podPlayStageParallelism: 4
  nodePlayStageParallelism: 4
  podsOnNodeSyncParallelism: 1
  enableDebuggingHandlers: true
  enableProfilingHandler: false
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterExec
metadata:
  name: local-exec
spec:
  execs:
  - local:
      workDir: $STATE/kwok/podroot
YAML
  local stages="$GOMODCACHE/sigs.k8s.io/kwok@v$KWOK_VERSION/kustomize/stage"
  for f in "$stages"/node/fast/*.yaml "$stages"/node/heartbeat-with-lease/*.yaml "$stages"/pod/fast/*.yaml; do
    case "$f" in *kustomization.yaml) continue ;; esac
    echo ---; cat "$f"
  done
}

bg() {  # bg <name> <command...>: start in the background, record its PID
  local name=$1; shift
  "$@" >"$STATE/logs/$name.log" 2>&1 &
  echo $! >"$STATE/$name.pid"
}

alive() {  # fail with the log tail if a component died or start takes too long
  [ $SECONDS -lt 180 ] || { echo "k8s-control-plane.sh: start timed out" >&2; exit 1; }
  for n in "$@"; do
    kill -0 "$(cat "$STATE/$n.pid")" 2>/dev/null || {
      echo "k8s-control-plane.sh: $n died:" >&2; tail -20 "$STATE/logs/$n.log" >&2; exit 1; }
  done
}

api() {  # api <method> <path> [json]: admin request to the apiserver
  curl -sf --cacert "$STATE/pki/ca.crt" -H "Authorization: Bearer $ADMIN_TOKEN" \
    -H 'Content-Type: application/json' -X "$1" "https://127.0.0.1:6443$2" ${3:+-d "$3"}
}

node_ready() {  # a Node (JSON on stdin) that is Ready and has KWOK's address
  python3 -c 'import json, sys
s = json.load(sys.stdin).get("status", {})
ready = any(c["type"] == "Ready" and c["status"] == "True" for c in s.get("conditions", []))
sys.exit(0 if ready and any(a["address"] == "127.0.0.1" for a in s.get("addresses", [])) else 1)'
}

start() {
  [ -x "$BIN/hyperkube" ] || { echo "k8s-control-plane.sh: run 'build' first" >&2; exit 1; }
  # never take over a control plane another session is using
  for n in etcd kube-apiserver kube-controller-manager kube-scheduler kwok; do
    if [ -f "$STATE/$n.pid" ] && kill -0 "$(cat "$STATE/$n.pid")" 2>/dev/null; then
      echo "k8s-control-plane.sh: already running ($n, pid $(cat "$STATE/$n.pid")); '$0 stop' first" >&2
      exit 1
    fi
  done
  rm -rf "$STATE/etcd" "$STATE/logs"
  mkdir -p "$STATE/logs" "$STATE/kwok/podroot"
  pki
  local p="$STATE/pki"
  ADMIN_TOKEN=$(awk -F, '$2=="admin"{print $1}' "$p/tokens.csv")
  kubeconfig "$STATE/admin.kubeconfig" admin "$ADMIN_TOKEN"
  kubeconfig "$STATE/runner.kubeconfig" benchlib-runner "$(awk -F, '$2=="benchlib-runner"{print $1}' "$p/tokens.csv")"
  kwok_config >"$STATE/kwok/kwok.yaml"

  bg etcd "$BIN/hyperkube" etcd --name benchlib --data-dir "$STATE/etcd" --unsafe-no-fsync \
    --listen-client-urls http://127.0.0.1:23790 --advertise-client-urls http://127.0.0.1:23790 \
    --listen-peer-urls http://127.0.0.1:23800 --initial-advertise-peer-urls http://127.0.0.1:23800 \
    --initial-cluster benchlib=http://127.0.0.1:23800 --listen-metrics-urls=
  until curl -sf --max-time 1 http://127.0.0.1:23790/health >/dev/null 2>&1; do alive etcd; sleep 0.1; done

  bg kube-apiserver "$BIN/hyperkube" kube-apiserver \
    --etcd-servers=http://127.0.0.1:23790 \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port=6443 \
    --tls-cert-file="$p/apiserver.crt" --tls-private-key-file="$p/apiserver.key" \
    --client-ca-file="$p/ca.crt" --token-auth-file="$p/tokens.csv" \
    --authorization-mode=RBAC \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$p/sa.pub" --service-account-signing-key-file="$p/sa.key" \
    --service-cluster-ip-range=10.96.0.0/16 --endpoint-reconciler-type=none \
    --kubelet-client-certificate="$p/kubelet-client.crt" --kubelet-client-key="$p/kubelet-client.key" \
    --kubelet-certificate-authority="$p/ca.crt" --kubelet-preferred-address-types=InternalIP \
    --allow-privileged=true --profiling=false
  until [ "$(curl -s --max-time 2 --cacert "$p/ca.crt" https://127.0.0.1:6443/readyz 2>/dev/null)" = ok ]; do
    alive etcd kube-apiserver; sleep 0.2; done

  bg kube-controller-manager "$BIN/hyperkube" kube-controller-manager \
    --kubeconfig="$STATE/admin.kubeconfig" --bind-address=127.0.0.1 --secure-port=10257 \
    --leader-elect=false --service-account-private-key-file="$p/sa.key" --root-ca-file="$p/ca.crt" \
    --use-service-account-credentials=false \
    --controllers='*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-node-route-controller'
  bg kube-scheduler "$BIN/hyperkube" kube-scheduler --kubeconfig="$STATE/admin.kubeconfig" \
    --bind-address=127.0.0.1 --secure-port=10259 --leader-elect=false
  bg kwok "$BIN/kwok" --kubeconfig="$STATE/admin.kubeconfig" --config="$STATE/kwok/kwok.yaml"

  # Two fake nodes in two zones, created without status: KWOK fills in
  # InternalIP 127.0.0.1 and its kubelet port, which the apiserver proxies exec to.
  for i in 0 1; do
    api POST /api/v1/nodes "{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":{\"name\":\"kwok-node-$i\",
      \"labels\":{\"type\":\"kwok\",\"kubernetes.io/hostname\":\"kwok-node-$i\",\"kubernetes.io/os\":\"linux\",
      \"topology.kubernetes.io/zone\":\"zone-$i\"},
      \"annotations\":{\"node.alpha.kubernetes.io/ttl\":\"0\",\"kwok.x-k8s.io/node\":\"fake\"}}}" >/dev/null
  done
  for i in 0 1; do
    until api GET /api/v1/nodes/kwok-node-$i 2>/dev/null | node_ready; do
      alive kube-apiserver kube-controller-manager kube-scheduler kwok; sleep 0.2; done
  done
  until api GET /api/v1/namespaces/default/serviceaccounts/default >/dev/null 2>&1; do
    alive kube-controller-manager; sleep 0.2; done
  log "ready after ${SECONDS}s: KUBECONFIG=$STATE/admin.kubeconfig (runner: $STATE/runner.kubeconfig)"
}

stop() {  # newest first, each by its recorded PID
  for n in kwok kube-scheduler kube-controller-manager kube-apiserver etcd; do
    local f="$STATE/$n.pid"
    [ -f "$f" ] || continue
    local pid; pid=$(cat "$f")
    if kill "$pid" 2>/dev/null; then
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$f"
  done
}

case "${1:-}" in
  build) build ;;
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 build|start|stop" >&2; exit 2 ;;
esac
