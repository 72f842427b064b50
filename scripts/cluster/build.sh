# shellcheck shell=bash
# The Kubernetes build: one multi-call binary for every component (go/hyperkube/main.go), from the
# Go module proxy: k8s.io/kubernetes as a library (1.31/1.32 are incomplete on the proxy, 1.34.4 is
# complete; 1.35 would refuse cgroup v1 by default) with etcd 3.6.4 embedded (the version 1.34.4
# pins). Cached under $CACHE: a second build finds it built.

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
  cp "$PROJECT/scripts/cluster/go/hyperkube/main.go" "$src/main.go"
  log "go mod tidy (k8s.io/kubernetes v$K8S_VERSION)"
  (cd "$src" && go mod tidy)
  log "go build hyperkube (several minutes)"
  (cd "$src" && nice -n 10 go build -o "$BIN/hyperkube.tmp" -ldflags "-s -w \
      -X k8s.io/component-base/version.gitVersion=v$K8S_VERSION \
      -X k8s.io/component-base/version.gitMajor=1 \
      -X k8s.io/component-base/version.gitMinor=${K8S_VERSION#1.}" . && mv "$BIN/hyperkube.tmp" "$BIN/hyperkube")
  log "built: $BIN"
}
