#!/bin/sh
# One local-cluster node's Cilium agent, inside the private mount namespace that
# cni/cilium.sh opens for it (`unshare --mount --propagation slave`):
#   cilium-agent-ns.sh RUN_DIR NODE_CGROUP_DIR NODE_CGROUP NETNS AGENT [ARGS...]
# Nothing here changes the machine (see cilium_agent in cni/cilium.sh):
# /run/cilium is the node's RUN_DIR, /sys/fs/bpf a bpffs of its own, two
# machine-wide sysctls read-only, and /run/cilium/cgroupv2 the node's cgroup
# (NODE_CGROUP_DIR, which is NODE_CGROUP relative to the cgroup2 root).
# Refuses (exit 3) unless what is mounted at /run/cilium/cgroupv2 is that node
# cgroup: the agent attaches its socket load balancer there, and on the
# hierarchy's root it would catch every process of the machine.
set -eu
run=$1 cg=$2 node_cgroup=$3 netns=$4
shift 4
mount --bind "$run" /run/cilium
mkdir -p /run/cilium/cgroupv2
mount --bind "$cg" /run/cilium/cgroupv2
root=$(awk '$5 == "/run/cilium/cgroupv2" {print $4}' /proc/self/mountinfo | tail -1)
if [ "$root" != "$node_cgroup" ]; then
  echo "refusing to start: /run/cilium/cgroupv2 is cgroup $root, not $node_cgroup" >&2
  exit 3
fi
mount -t bpf bpffs /sys/fs/bpf
for s in kernel/unprivileged_bpf_disabled kernel/timer_migration; do
  mount --bind "/proc/sys/$s" "/proc/sys/$s"
  mount -o remount,bind,ro "/proc/sys/$s"
done
exec nsenter --net="/run/netns/$netns" "$@"
