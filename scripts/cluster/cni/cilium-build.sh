# shellcheck shell=bash
# The Cilium build: the real cilium-agent, cilium-operator-generic, cilium-cni and cilium-dbg
# (their main packages in go/cilium/cmd), from the Go module proxy, cached under $CACHE.
# v1.17.6 is the newest release whose go.mod replaces nothing the module proxy refuses (later ones
# replace k8s.io/apimachinery or gobgp with Cilium forks, which the proxy does not serve). A wrapper
# module requires it; its one replace only concerns Cilium's code generators. Go ignores a
# dependency's replaces, so the wrapper must repeat it. Facts: docs/design.md, "Cilium on the local
# cluster".
#   build cilium [--check]    --check: build nothing, say whether it is built (benchlib doctor asks)

CILIUM_VERSION=1.17.6
CILIUM_BIN="$CACHE/cilium/bin-cilium$CILIUM_VERSION"
CILIUM_BINARIES="cilium-agent cilium-operator-generic cilium-cni cilium-dbg"

cilium_built() { local b; for b in $CILIUM_BINARIES; do [ -x "$CILIUM_BIN/$b" ] || return 1; done; }

cilium_build() {  # cilium_build [--check]
  case ${1:-} in
    "") ;;
    --check) cilium_built || die "no Cilium build at $CILIUM_BIN: run '$0 build cilium' (about 10 minutes cold, Go and the Go module proxy)"
      echo "$CILIUM_BIN"; return ;;
    *) bad_input "build cilium: unknown argument '$1' (build cilium [--check])" ;;
  esac
  mkdir -p "$CACHE/cilium"
  exec 9>"$CACHE/cilium/build.lock"
  flock 9
  if cilium_built; then log "already built: $CILIUM_BIN"; return; fi
  command -v go >/dev/null || die "go not found: the Cilium build needs Go >= 1.24 (and the Go module proxy)"
  local src="$CACHE/cilium/src-cilium$CILIUM_VERSION"
  mkdir -p "$src"
  cat >"$src/go.mod" <<MOD
module benchlib.local/cilium

go 1.24.0

require github.com/cilium/cilium v$CILIUM_VERSION

// as in Cilium's own go.mod; no binary built here imports it
replace sigs.k8s.io/controller-tools => github.com/cilium/controller-tools v0.16.5-1
MOD
  cp -r "$PROJECT/scripts/cluster/go/cilium/cmd" "$src/"
  log "go mod tidy (github.com/cilium/cilium v$CILIUM_VERSION)"
  (cd "$src" && go mod tidy) ||
    die "cannot resolve Cilium v$CILIUM_VERSION from the Go module proxy (a release whose go.mod replaces modules with forks the proxy refuses fails here)"
  log "go build cilium-agent, -operator-generic, -cni, -dbg (about 10 minutes cold on 2 cores)"
  mkdir -p "$CILIUM_BIN.tmp"
  # ipam_provider_operator: the generic operator's Kubernetes IPAM
  (cd "$src" && nice -n 10 go build -tags osusergo,ipam_provider_operator -o "$CILIUM_BIN.tmp/" -ldflags "-s -w \
      -X 'github.com/cilium/cilium/pkg/version.ciliumVersion=$CILIUM_VERSION benchlib'" ./cmd/...)
  rm -rf "$CILIUM_BIN" && mv "$CILIUM_BIN.tmp" "$CILIUM_BIN"
  log "built: $CILIUM_BIN"
}
