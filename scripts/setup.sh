#!/usr/bin/env bash
# Installs everything benchlib needs on Debian 12 / Ubuntu, as root:
# system tools (netperf from Debian non-free, iperf3, iproute2, iptables,
# nftables, chromium for static figure export, clang + libbpf-dev for the
# lab's tc BPF programs, containerd/runc/CNI plugins for the local cluster),
# the shell linter for scripts/lint.sh, uv, the locked Python
# environment, and fortio. Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[setup] %s\n' "$*" >&2; }

if [ "$(id -u)" -ne 0 ]; then
  echo "setup.sh: must run as root (it installs system packages and the lab needs CAP_NET_ADMIN)" >&2
  exit 1
fi

apt_packages=(netperf iperf3 iproute2 iptables nftables procps chromium
              clang llvm libbpf-dev dnsutils dnsmasq-base dnsperf
              openssh-server openssh-client   # ssh target tests: a real sshd in lab namespaces
              wireguard-tools                 # `wg` for the lab's wireguard scenario (the kernel module is separate)
              haproxy                         # the lab's mesh scenarios: sidecar and node proxies (L4/L7, mTLS, a stats socket)
              tcpdump                         # tests: packets above 64 KiB on a veth (BIG TCP), VXLAN on the wire (Cilium)
              shellcheck                      # scripts/lint.sh: the shell scripts' checks
              # the local Kubernetes cluster (scripts/k8s-local-cluster.sh): runtime, CNI plugins,
              # the API forward, image contents (busybox, a static pause built by gcc), conntrack for tests
              containerd runc containernetworking-plugins socat curl openssl busybox-static gcc libc6-dev conntrack
              bpftool                         # Cilium on the local cluster: the agent probes the kernel with it
              libpcap-dev ipset make)         # Calico's build (felix links libpcap) and felix's ipsets
missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
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
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! command -v uv >/dev/null 2>&1; then
  log "installing uv from PyPI"
  python3 -m pip install --quiet --root-user-action=ignore uv
fi

log "syncing the locked Python environment (.venv)"
uv sync --frozen --all-extras --quiet

# fortio (HTTP load generator); v1.65.0 is the newest release whose modules
# the Go proxy serves here.
if [ ! -x .tools/bin/fortio ]; then
  if command -v go >/dev/null 2>&1; then
    log "go install fortio.org/fortio@v1.65.0"
    GOBIN="$PWD/.tools/bin" go install fortio.org/fortio@v1.65.0
  else
    log "go not found: fortio tests will be unavailable"
  fi
fi
log "done"
