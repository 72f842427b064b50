#!/bin/sh
# One local-cluster node's ipamd (the VPC CNI's aws-k8s-agent), inside the private mount namespace
# that cni/vpc.sh opens for it (`unshare --mount --propagation slave`):
#   vpc-ipamd-ns.sh RUN_DIR NETNS IPAMD
# ipamd serves aws-cni on a fixed socket, /var/run/aws-node/ipamd.sock, and keeps its checkpoint
# beside it: here that directory is the node's RUN_DIR, so two nodes' ipamds never meet.
set -eu
run=$1 netns=$2
shift 2
mount --bind "$run" /var/run/aws-node
exec nsenter --net="/run/netns/$netns" "$@"
