#!/usr/bin/env bash
# Installs what benchlib needs on Debian 12 / Ubuntu, as root, by profile:
#
#   setup.sh                  everything (all): what the whole test suite needs
#   setup.sh PROFILE...       lab, mesh, cluster, a CNI of the local cluster, test, or all
#   setup.sh --params FILE    the profiles FILE's campaign needs (`benchlib doctor --profiles`)
#
#   lab      the embedded lab and the report: netperf (Debian non-free), iperf3, iproute2,
#            iptables, nftables, dnsperf and dnsmasq, wireguard-tools, an ssh client, clang and
#            libbpf-dev for the lab's tc BPF programs, chromium for static figure export; uv and
#            the locked Python environment (.venv). Every other profile includes it.
#   mesh     the service-mesh scenarios and HTTP tests: haproxy, fortio (built with go into
#            .tools/bin; Envoy comes with the Python environment)
#   cluster  the local Kubernetes cluster (scripts/k8s-local-cluster.sh): containerd, runc, the
#            CNI plugins, the API forward, the image's contents (busybox, a static pause built by
#            gcc), conntrack; fortio for the image, as in mesh
#   test     the test suite's own tools: sshd (ssh target tests), tcpdump, shellcheck (lint)
#   CNI      cluster, and the packages the local cluster's CNI plugin names (its CNI_packages in
#            scripts/cluster/cni/CNI.sh); one profile per CNI:
#
# Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[setup] %s\n' "$*" >&2; }
declare -A apt_for=(
  [lab]="netperf iperf3 iproute2 iptables nftables procps chromium clang llvm libbpf-dev
         dnsutils dnsmasq-base dnsperf wireguard-tools openssh-client"
  [mesh]="haproxy"
  [cluster]="containerd runc containernetworking-plugins socat curl openssl busybox-static gcc libc6-dev conntrack"
  [test]="openssh-server tcpdump shellcheck"
)
cnis=()  # the local cluster's CNIs, each a profile: the cluster's packages and its own
while IFS=$'\t' read -r cni _ packages _; do
  cnis+=("$cni")
  apt_for[$cni]=${packages#-}
done < <(bash scripts/k8s-local-cluster.sh cnis)
[ ${#cnis[@]} -gt 0 ] || { echo "setup.sh: scripts/k8s-local-cluster.sh cnis listed no CNI" >&2; exit 1; }
all_profiles=(lab mesh cluster "${cnis[@]}" test)
is_cni() { [[ " ${cnis[*]} " == *" $1 "* ]]; }

usage() {
  awk 'NR == 1 {next} /^# Idempotent/ || !/^#/ {exit} {sub(/^# ?/, ""); print}' "$0" | sed '$d'
  local cni
  for cni in "${cnis[@]}"; do printf '  %-8s cluster%s\n' "$cni" "${apt_for[$cni]:+, and ${apt_for[$cni]}}"; done
}

params=
profiles=()
while [ $# -gt 0 ]; do
  case $1 in
    --params) params=${2:?--params needs a params file, e.g. params.yaml}; shift 2 ;;
    all) profiles+=("${all_profiles[@]}"); shift ;;
    -h|--help) usage; exit 0 ;;
    *)
      [ -n "${apt_for[$1]+x}" ] || { echo "setup.sh: unknown profile '$1' (one of: ${all_profiles[*]} all)" >&2; exit 2; }
      profiles+=("$1"); shift ;;
  esac
done
[ ${#profiles[@]} -gt 0 ] || [ -n "$params" ] || profiles=("${all_profiles[@]}")

if [ "$(id -u)" -ne 0 ]; then
  echo "setup.sh: must run as root (it installs system packages and the lab needs CAP_NET_ADMIN)" >&2
  exit 1
fi

APT_STAMP=${XDG_CACHE_HOME:-$HOME/.cache}/benchlib/apt-lists-fetched  # apt_lists_state after our last update
apt_lists_state() {  # the sources' digest and the time the package lists last changed
  echo "$(cat /etc/apt/sources.list /etc/apt/sources.list.d/* 2>/dev/null | md5sum | cut -d' ' -f1)" \
    "$(stat -c %Y /var/lib/apt/lists 2>/dev/null)"
}

install_profiles() {  # install_profiles PROFILE...: the apt packages of lab and of each profile
  local want=(lab "$@") p pkg missing=() cluster_needed=
  for p in "$@"; do ! is_cni "$p" || cluster_needed=1; done
  [ -z "$cluster_needed" ] || want+=(cluster)
  for p in "${want[@]}"; do
    for pkg in ${apt_for[$p]}; do
      dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
    done
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
  # netperf lives in Debian's non-free component: enable it on the sources
  # already configured (deb822 or one-line format).
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    sed -i -E '/^Components:/{/non-free( |$)/! s/$/ non-free/}' /etc/apt/sources.list.d/debian.sources
  fi
  if [ -f /etc/apt/sources.list ]; then
    sed -i -E '/^deb .*debian/{/ non-free( |$)/! s/$/ non-free/}' /etc/apt/sources.list
  fi
  log "apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # The package lists are fetched again only when this script did not fetch them within the hour, from
  # these sources, into the lists as they are: on a fresh machine reproduce.sh's set-up fetched them
  # minutes before test.sh's.
  if [[ ! -f $APT_STAMP || -n $(find "$APT_STAMP" -mmin +60) || "$(cat "$APT_STAMP")" != "$(apt_lists_state)" ]]; then
    apt-get update -qq
    mkdir -p "$(dirname "$APT_STAMP")"
    apt_lists_state >"$APT_STAMP"
  fi
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

install_profiles "${profiles[@]}"

if ! command -v uv >/dev/null 2>&1; then
  log "installing uv from PyPI"
  python3 -m pip install --quiet --root-user-action=ignore uv
fi

log "syncing the locked Python environment (.venv)"
# --compile-bytecode: the packages' bytecode written once here, so that every Python the pipeline and
# the tests start (papermill kernels, dvc stages, benchlib commands) reads it instead of compiling
# plotly, polars and scipy again when the environment forbids writing it (PYTHONDONTWRITEBYTECODE)
uv sync --frozen --all-extras --quiet --compile-bytecode

if [ -n "$params" ]; then
  # the campaign's needs, as benchlib reads them (an invalid file stops here with its error)
  needed=$(.venv/bin/benchlib --params "$params" doctor --profiles)
  read -ra needed <<<"$needed"
  log "profiles for $params: ${needed[*]}"
  profiles+=("${needed[@]}")
  install_profiles "${profiles[@]}"
fi

# fortio (HTTP load generator); v1.65.0 is the newest release whose modules
# the Go proxy serves here.
# The mesh's HTTP tests run it, and the local cluster's image carries it.
needs_fortio=
for p in "${profiles[@]}"; do if [[ $p == mesh || $p == cluster ]] || is_cni "$p"; then needs_fortio=1; fi; done
if [[ -n $needs_fortio && ! -x .tools/bin/fortio ]]; then
  if command -v go >/dev/null 2>&1; then
    log "go install fortio.org/fortio@v1.65.0"
    GOBIN="$PWD/.tools/bin" go install fortio.org/fortio@v1.65.0
  else
    log "go not found: fortio (HTTP tests, mesh scenarios) will be unavailable"
  fi
fi
log "done (profiles: $(printf '%s\n' lab "${profiles[@]}" | awk '!seen[$0]++' | paste -sd' '))"
