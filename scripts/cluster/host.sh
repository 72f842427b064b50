# shellcheck shell=bash
# What the cluster changes on the host outside $STATE, and how `down` puts it back: the kernel
# tunables the kubelet sets host-wide, the host paths the kubelet and containerd write whatever their
# flags, and the empty directories made as mount points for the CNI agents' private ones. Several
# local clusters share all of these: the first one up saves the machine's own tunables (a later one
# copies them from a cluster already up), and only the last one down restores them and removes the
# shared paths; a cluster that goes down before the others hands its directories to them.

SYSCTLS="vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes"

other_states() {  # the state dirs of the other local clusters on this machine, one a line
  local name d
  for name in $(local_clusters); do
    d=$(cluster_state_dir "$name")
    if [ "$d" != "$STATE" ] && [ -d "$d" ]; then echo "$d"; fi
  done
}

save_sysctls() {  # the machine's own values: a cluster already up has them (it changed them since)
  local d key
  for d in $(other_states); do
    if [ -f "$d/sysctl.saved" ]; then cp "$d/sysctl.saved" "$STATE/sysctl.saved"; return; fi
  done
  for key in $SYSCTLS; do echo "$key=$(sysctl -n "$key")"; done >"$STATE/sysctl.saved"
}

make_host_dir() {  # make_host_dir <dir>: made if missing, each directory made recorded for the last `down`
  local d=$1 missing=()
  while [ ! -d "$d" ]; do missing=("$d" "${missing[@]}"); d=$(dirname "$d"); done
  [ ${#missing[@]} -gt 0 ] || return 0
  mkdir -p "$1"
  printf '%s\n' "${missing[@]}" >>"$STATE/host-dirs.made"
}

remove_host_paths() {  # this cluster's: its pods' log links and CNI results
  find /var/log/containers /var/log/pods -maxdepth 1 -lname "$STATE/*" -delete 2>/dev/null || true
  grep -ls "$STATE/" /var/lib/cni/results/* 2>/dev/null | xargs -r rm -f || true
}

put_host_back() {  # at `down`: the last cluster restores the host, another hands its directories on
  local others d
  others=$(other_states)
  if [ -n "$others" ]; then
    if [ -f "$STATE/host-dirs.made" ]; then
      for d in $others; do cat "$STATE/host-dirs.made" >>"$d/host-dirs.made"; done
    fi
    return
  fi
  if [ -f "$STATE/sysctl.saved" ]; then xargs -r sysctl -qw <"$STATE/sysctl.saved"; fi
  rm -f /var/lib/kubelet/device-plugins/kubelet.sock
  rmdir /var/lib/kubelet/device-plugins /var/lib/kubelet /var/lib/cni/results /var/lib/cni /var/log/containers 2>/dev/null || true
  # deepest first; a directory no longer empty (something else uses it) stays
  if [ -f "$STATE/host-dirs.made" ]; then
    tac "$STATE/host-dirs.made" | while read -r d; do rmdir "$d" 2>/dev/null || true; done
  fi
}

remove_node_cgroups() {  # in every hierarchy, the unified one included (the kubelet creates it there too)
  local n c
  for n in 1 2; do
    for c in /sys/fs/cgroup/*/"$PREFIX-node$n" /sys/fs/cgroup/"$PREFIX-node$n"; do
      if [ -d "$c" ]; then find "$c" -depth -type d -exec rmdir {} \; 2>/dev/null || true; fi
    done
  done
}
