# shellcheck shell=bash
# The nodes: one network namespace each, joined by a veth wire, and in each containerd (the
# benchlib images imported) and a kubelet with a cgroup root of its own.
# Nodes are entered with `nsenter --net`, never `ip netns exec`, whose private mount namespace
# would hide the kubelet's mounts from containerd and back.

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
    ip -n "$(netns "$n")" addr add "$(node_ip "$n")/$WIRE_PREFIX" dev wire0
    ip -n "$(netns "$n")" link set wire0 up
  done
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
node_ready() { kubectl wait --for=condition=Ready "node/$PREFIX-node$1" --timeout=2s; }

images() {  # the images every node imports, built by benchlib
  mkdir -p "$STATE/images"
  "$PROJECT/.venv/bin/python" -m benchlib.targets.kubernetes.images "$STATE/images" >&2
}

node() {  # node <n>: containerd, the images, the kubelet; the podCIDR it gets saved for the CNI
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
