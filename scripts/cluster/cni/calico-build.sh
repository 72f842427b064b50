# shellcheck shell=bash
# The Calico build: the real calico-node (felix, its start-up and tunnel-address tools; cgo, as
# felix's eBPF dataplane links libbpf), the calico CNI plugin (also calico-ipam: one binary that
# dispatches on its name) and felix's BPF programs, compiled with the machine's clang. The project
# carries none of Calico's code: the build takes a source checkout of github.com/projectcalico/calico
# (--calico-src DIR or BENCHLIB_CALICO_SRC), or clones the release tag where the network allows.
# The Go module proxy is no way to Calico: it serves no release newer than 3.28, and not the
# tree's nested api/ module. Go modules come from the proxy. Cached per version under $CACHE.
#   build calico [--check] [--calico-src DIR] [--libbpf-src DIR]
#                             --check: build nothing, say whether it is built (benchlib doctor asks)
# libbpf: 3.28 carries it (felix/bpf-gpl/include/libbpf); later releases clone it at build time
# (felix/bpf-gpl/libbpf, the tag in metadata.mk): a checkout of that tag with --libbpf-src DIR or
# BENCHLIB_LIBBPF_SRC, else the clone.

CALICO_DEFAULT_VERSION=v3.32.1   # the nftables dataplane (3.31 GA) and an eBPF connect-time LB that loads on 6.18
CALICO_VERSION=${BENCHLIB_CALICO_VERSION:-$CALICO_DEFAULT_VERSION}
CALICO_REPO=https://github.com/projectcalico/calico
LIBBPF_REPO=https://github.com/libbpf/libbpf
CLONE_TIMEOUT_S=120

calico_bin() { echo "$CACHE/calico/bin-calico$1"; }
calico_built() { [ -x "$(calico_bin "$1")/calico-node" ] && [ -x "$(calico_bin "$1")/calico" ]; }

no_calico_source() {  # the one line a machine without a checkout and without the network gets
  die "no Calico source: $1; give a checkout of $CALICO_REPO ($CALICO_VERSION) with --calico-src DIR or BENCHLIB_CALICO_SRC=DIR"
}

tree_version() {  # tree_version <dir>: the release a Calico tree is (its tag, else the images its manifests name)
  local v
  v=$(git -C "$1" describe --tags --exact-match 2>/dev/null) ||
    v=$(sed -n 's#.*image: [^ ]*calico/ctl:\(v[0-9][^ ]*\).*#\1#p' "$1/manifests/calicoctl.yaml" 2>/dev/null | head -1)
  [ -n "$v" ] || die "$1: cannot tell its Calico release (no git tag, no manifests/calicoctl.yaml): is it a Calico checkout?"
  echo "$v"
}

clone() {  # clone <repo> <tag> <dir>: a shallow clone of one tag, bounded in time
  rm -rf "$3"
  timeout "$CLONE_TIMEOUT_S" env GIT_TERMINAL_PROMPT=0 git clone -q --depth 1 --branch "$2" "$1" "$3" 2>/dev/null
}

calico_build() {  # calico_build [--check] [--calico-src DIR] [--libbpf-src DIR]
  local src=${BENCHLIB_CALICO_SRC:-} libbpf_src=${BENCHLIB_LIBBPF_SRC:-} check=""
  while [ $# -gt 0 ]; do
    case $1 in
      --check) check=1; shift ;;
      --calico-src) [ $# -ge 2 ] || bad_input "--calico-src needs a directory"; src=$2; shift 2 ;;
      --libbpf-src) [ $# -ge 2 ] || bad_input "--libbpf-src needs a directory"; libbpf_src=$2; shift 2 ;;
      *) bad_input "build calico: unknown argument '$1' (build calico [--check] [--calico-src DIR] [--libbpf-src DIR])" ;;
    esac
  done
  local version=$CALICO_VERSION
  if [ -n "$src" ]; then
    if [ ! -d "$src/felix/bpf-gpl" ] || [ ! -f "$src/go.mod" ]; then
      bad_input "--calico-src $src: not a Calico checkout (no go.mod, felix/bpf-gpl)"
    fi
    version=$(tree_version "$src")
  fi
  if [ -n "$check" ]; then
    calico_built "$version" || die "no Calico $version build at $(calico_bin "$version"): run '$0 build calico' (about 10 minutes cold; a Calico checkout or the network)"
    calico_bin "$version"; return
  fi
  if calico_built "$version"; then log "already built: $(calico_bin "$version")"; return; fi
  mkdir -p "$CACHE/calico"
  exec 9>"$CACHE/calico/build.lock"
  flock 9  # a second build at the same time waits, then finds it built
  if calico_built "$version"; then log "already built: $(calico_bin "$version")"; return; fi
  command -v go >/dev/null || die "go not found: the Calico build needs Go (and the Go module proxy)"
  local c; for c in clang llc make gcc; do command -v "$c" >/dev/null || die "$c not found (bash scripts/setup.sh installs it)"; done
  [ -f /usr/include/pcap.h ] || die "pcap.h not found: felix's BPF filter needs libpcap (apt-get install libpcap-dev)"
  local work="$CACHE/calico/src-calico$version"
  rm -rf "$work"
  if [ -n "$src" ]; then
    mkdir -p "$work"
    tar -C "$src" --exclude=.git -cf - . | tar -C "$work" -xf -
  else
    clone "$CALICO_REPO" "$version" "$work" || no_calico_source "cloning $CALICO_REPO $version failed (no network?)"
    log "cloned Calico $version"
  fi
  calico_libbpf "$work/felix/bpf-gpl" "$libbpf_src"
  calico_compile "$work" "$version"
  rm -rf "$work"  # the Go caches stay; the copy of the tree is 60 MB and rebuilt from the source
  log "built: $(calico_bin "$version")"
}

calico_libbpf() {  # calico_libbpf <bpf-gpl dir> <libbpf source|"">: libbpf at <bpf-gpl>/libbpf
  local gpl=$1 want
  [ -d "$gpl/libbpf/src" ] && return
  if [ -d "$gpl/include/libbpf/src" ]; then ln -s include/libbpf "$gpl/libbpf"; return; fi  # 3.28
  want=$(sed -n 's/^LIBBPF_VERSION=//p' "$gpl/../../metadata.mk")
  if [ -n "$2" ]; then
    [ -f "$2/src/libbpf.h" ] || bad_input "--libbpf-src $2: not a libbpf checkout (no src/libbpf.h)"
    mkdir -p "$gpl/libbpf"
    tar -C "$2" --exclude=.git -cf - . | tar -C "$gpl/libbpf" -xf -
  else
    clone "$LIBBPF_REPO" "$want" "$gpl/libbpf" ||
      die "no libbpf source: Calico ${gpl#*src-calico} wants libbpf $want and cloning $LIBBPF_REPO failed (no network?); give a checkout of its tag $want with --libbpf-src DIR or BENCHLIB_LIBBPF_SRC=DIR"
    log "cloned libbpf $want"
  fi
}

calico_compile() {  # calico_compile <tree> <version>: binaries and BPF objects into the cache, atomically
  local tree=$1 version=$2 gpl="$1/felix/bpf-gpl" out
  out="$(calico_bin "$version").tmp"
  rm -rf "$out" && mkdir -p "$out/bpf" "$tree/libbpf-obj"
  log "libbpf.a"
  nice -n 10 make -s -C "$gpl/libbpf/src" -j2 BUILD_STATIC_ONLY=1 OBJDIR="$tree/libbpf-obj" >/dev/null
  local ldflags="-s -w -X github.com/projectcalico/calico/pkg/buildinfo.Version=$version"
  ldflags+=" -X github.com/projectcalico/calico/node/pkg/lifecycle/startup.VERSION=$version"  # 3.28's variable
  log "go build calico-node (cgo, several minutes cold)"
  # libbpf's own headers first: felix's bpf-gpl has a bpf.h of its own (the BPF programs' one)
  (cd "$tree" && CGO_ENABLED=1 CGO_CFLAGS="-I$gpl/libbpf/src -I$gpl" \
    CGO_LDFLAGS="-L$tree/libbpf-obj -lbpf -lelf -lz" nice -n 10 go build -o "$out/calico-node" \
    -ldflags "$ldflags" ./node/cmd/calico-node)
  log "go build calico (CNI plugin and calico-ipam)"
  (cd "$tree" && CGO_ENABLED=0 nice -n 10 go build -o "$out/calico" -ldflags "$ldflags" ./cni-plugin/cmd/calico)
  ln "$out/calico" "$out/calico-ipam"
  log "BPF programs (clang)"
  calico_bpf_objects "$tree" "$out/bpf"
  cp "$tree/manifests/crds.yaml" "$out/crds.yaml"  # the CRDs this felix reads (applied by calico_up)
  echo "$version" >"$out/version"
  rm -rf "$(calico_bin "$version")" && mv "$out" "$(calico_bin "$version")"
}

calico_bpf_objects() {  # calico_bpf_objects <tree> <dest>: the programs felix loads for IPv4 without debug logs
  local gpl="$1/felix/bpf-gpl" objs
  chmod +x "$gpl/list-objs" "$gpl/calculate-flags" "$gpl/list-ut-objs" 2>/dev/null || true
  # the Makefile's own list (it differs between releases), less what felix loads only for IPv6 or
  # at a debug log level (felix picks a program per log level and IP version; v46 is IPv4's
  # connect-time load balancer)
  objs=$( (make -s -C "$gpl" -pn all 2>/dev/null || true) | sed -n '/^OBJS := /{s///p;q}' | tr ' ' '\n' |
    grep -v -e '^$' -e debug -e '_info' -e '_v6\.o$' -e tcx_test) || die "cannot list the BPF programs of $gpl/Makefile"
  # shellcheck disable=SC2086 # object names, one a word
  nice -n 10 make -s -C "$gpl" -j2 $objs >"$1/bpf.log" 2>&1 || { tail -20 "$1/bpf.log" >&2; die "the BPF programs did not compile"; }
  cp "$gpl"/bin/*.o "$2/"
  if [ -f "$1/felix/bpf-apache/Makefile" ]; then  # the XDP filter (felix looks for it at start)
    nice -n 10 make -s -C "$1/felix/bpf-apache" all >/dev/null && cp "$1"/felix/bpf-apache/bin/*.o "$2/"
  fi
}
