#!/bin/sh
# One local-cluster node's calico-node, inside the private mount namespace that
# cni/calico.sh opens for it (`unshare --mount --propagation slave`):
#   calico-node-ns.sh NODE_DIR NODE_CGROUP_DIR NODE_CGROUP NETNS BPF_DIR CMD [ARGS...]
# calico-node's host paths are fixed (no flag sets them): /run/calico (felix's
# state; eBPF mode's cgroup2 at /run/calico/cgroup), /var/lib/calico (the
# nodename and MTU files the CNI plugin reads) and /usr/lib/calico/bpf (the BPF
# objects). Here they are the node's own NODE_DIR/run, NODE_DIR/lib and BPF_DIR,
# /sys/fs/bpf a bpffs of its own, and kernel.unprivileged_bpf_disabled read-only
# (felix sets it machine-wide in eBPF mode; 2 -> 1 cannot be undone).
# Refuses (exit 3) unless what is mounted at /run/calico/cgroup is the node's
# cgroup (NODE_CGROUP_DIR, which is NODE_CGROUP relative to the cgroup2 root):
# felix attaches its connect-time load balancer there and, finding nothing
# mounted, mounts the hierarchy's root, which holds every process of the machine.
set -eu
dir=$1 cg=$2 node_cgroup=$3 netns=$4 bpf=$5
shift 5
mkdir -p "$dir/run" "$dir/lib"
mount --bind "$dir/run" /run/calico
mount --bind "$dir/lib" /var/lib/calico
mount --bind "$bpf" /usr/lib/calico/bpf
mkdir -p /run/calico/cgroup
mount --bind "$cg" /run/calico/cgroup
root=$(awk '$5 == "/run/calico/cgroup" {print $4}' /proc/self/mountinfo | tail -1)
if [ "$root" != "$node_cgroup" ]; then
  echo "refusing to start: /run/calico/cgroup is cgroup $root, not $node_cgroup" >&2
  exit 3
fi
mount -t bpf bpffs /sys/fs/bpf
mount --bind /proc/sys/kernel/unprivileged_bpf_disabled /proc/sys/kernel/unprivileged_bpf_disabled
mount -o remount,bind,ro /proc/sys/kernel/unprivileged_bpf_disabled
exec nsenter --net="/run/netns/$netns" "$@"
