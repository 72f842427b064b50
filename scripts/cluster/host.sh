# shellcheck shell=bash
# What the cluster changes on the host outside $STATE, and how `down` puts it back: the kernel
# tunables the kubelet sets host-wide (saved at `up`, restored at `down`) and the host paths the
# kubelet and containerd write whatever their flags (removed when they point into $STATE).

SYSCTLS="vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes"

save_sysctls() {
  local key
  for key in $SYSCTLS; do echo "$key=$(sysctl -n "$key")"; done >"$STATE/sysctl.saved"
}

restore_sysctls() {
  if [ -f "$STATE/sysctl.saved" ]; then xargs -r sysctl -qw <"$STATE/sysctl.saved"; fi
}

remove_host_paths() {
  find /var/log/containers /var/log/pods -maxdepth 1 -lname "$STATE/*" -delete 2>/dev/null || true
  grep -ls "$STATE/" /var/lib/cni/results/* 2>/dev/null | xargs -r rm -f || true
  rm -f /var/lib/kubelet/device-plugins/kubelet.sock
  rmdir /var/lib/kubelet/device-plugins /var/lib/kubelet /var/lib/cni/results /var/lib/cni /var/log/containers 2>/dev/null || true
}

remove_node_cgroups() {  # in every hierarchy, the unified one included (the kubelet creates it there too)
  local n c
  for n in 1 2; do
    for c in /sys/fs/cgroup/*/"$PREFIX-node$n" /sys/fs/cgroup/"$PREFIX-node$n"; do
      if [ -d "$c" ]; then find "$c" -depth -type d -exec rmdir {} \; 2>/dev/null || true; fi
    done
  done
}
