# shellcheck shell=bash
# The AWS VPC CNI build: the real ipamd (aws-k8s-agent), the aws-cni and egress-cni plugins, and
# amazon-ec2-metadata-mock (the instance metadata ipamd reads), all from the Go module proxy, cached
# under $CACHE per version. The VPC CNI's module builds unchanged with its own go.mod and go.sum, so
# the build works in a copy of it (the module cache is read-only).
#   build vpc [--check]    --check: build nothing, say whether it is built (benchlib doctor asks)

VPC_CNI_VERSION=1.23.2
IMDS_MOCK_VERSION=1.13.0
VPC_BIN="$CACHE/vpc-cni/bin-vpc$VPC_CNI_VERSION-imds$IMDS_MOCK_VERSION"
VPC_BINARIES="aws-k8s-agent aws-cni egress-cni ec2-metadata-mock"

vpc_built() {
  local b; for b in $VPC_BINARIES; do [ -x "$VPC_BIN/$b" ] || return 1; done
  [ -f "$VPC_BIN/imds-defaults.json" ]  # the mock's own defaults, which each node's config edits
}

vpc_build() {
  case ${1:-} in
    "") ;;
    --check) vpc_built || die "no VPC CNI build at $VPC_BIN: run '$0 build vpc' (about 9 minutes cold, Go and the Go module proxy)"
      echo "$VPC_BIN"; return ;;
    *) bad_input "build vpc: unknown argument '$1' (build vpc [--check])" ;;
  esac
  mkdir -p "$CACHE/vpc-cni"
  exec 9>"$CACHE/vpc-cni/build.lock"
  flock 9  # a second build at the same time waits, then finds it built
  if vpc_built; then log "already built: $VPC_BIN"; return; fi
  command -v go >/dev/null || die "go not found: the VPC CNI build needs Go >= 1.26 (and the Go module proxy)"
  local mod=github.com/aws/amazon-vpc-cni-k8s src="$CACHE/vpc-cni/src-vpc$VPC_CNI_VERSION" out="$VPC_BIN.tmp"
  go mod download "$mod@v$VPC_CNI_VERSION" ||
    die "cannot fetch $mod v$VPC_CNI_VERSION from the Go module proxy"
  rm -rf "$src" "$out" && mkdir -p "$out"
  cp -r "$GOMODCACHE/$mod@v$VPC_CNI_VERSION" "$src" && chmod -R u+w "$src"
  log "go build ipamd, aws-cni, egress-cni (about 9 minutes cold on 2 cores)"
  # the release's version in each binary: ipamd refuses an aws-cni whose version differs from its own
  (cd "$src" && GOFLAGS="$GOFLAGS -mod=mod" nice -n 10 go build -o "$out/" \
      -ldflags "-s -w -X $mod/pkg/version.Version=v$VPC_CNI_VERSION" ./cmd/aws-k8s-agent &&
    GOFLAGS="$GOFLAGS -mod=mod" nice -n 10 go build -o "$out/" \
      -ldflags "-s -w -X main.version=v$VPC_CNI_VERSION" ./cmd/routed-eni-cni-plugin ./cmd/egress-cni-plugin) ||
    die "the VPC CNI v$VPC_CNI_VERSION did not build"
  mv "$out/routed-eni-cni-plugin" "$out/aws-cni" && mv "$out/egress-cni-plugin" "$out/egress-cni"
  log "go install ec2-metadata-mock v$IMDS_MOCK_VERSION"
  GOBIN="$out" nice -n 10 go install -ldflags "-s -w" \
    "github.com/aws/amazon-ec2-metadata-mock/cmd/ec2-metadata-mock@v$IMDS_MOCK_VERSION" ||
    die "cannot build ec2-metadata-mock v$IMDS_MOCK_VERSION from the Go module proxy"
  cp "$GOMODCACHE/github.com/aws/amazon-ec2-metadata-mock@v$IMDS_MOCK_VERSION/pkg/config/defaults/aemm-metadata-default-values.json" \
    "$out/imds-defaults.json"
  rm -rf "$src"  # the Go caches stay; the copy is rebuilt from the module cache
  rm -rf "$VPC_BIN" && mv "$out" "$VPC_BIN"
  log "built: $VPC_BIN"
}
