# shellcheck shell=bash
# A node's configuration files: containerd's and the kubelet's, each under the node's state.

containerd_config() {  # containerd_config <node>
  local d="$STATE/node$1"
  cat <<TOML
version = 2
root = "$d/containerd/root"
state = "$d/containerd/state"
[grpc]
  address = "$d/containerd/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/benchlib/pause:1"
  disable_apparmor = true
  # no CAP_SYS_RESOURCE here: runc cannot set the sandbox's negative oom_score_adj
  restrict_oom_score_adj = true
  # pod network namespaces under the node's state, not the host's /var/run/netns
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$d/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    # the Debian plugins, and a CNI's own plugin while that CNI runs (cilium_cni_plugin)
    bin_dir = "$d/cni/bin"
    conf_dir = "$d/cni/net.d"
    max_conf_num = 1
TOML
}

kubelet_config() {  # kubelet_config <node>
  local d="$STATE/node$1"
  cat <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://$d/containerd/containerd.sock
cgroupDriver: cgroupfs
cgroupRoot: /$PREFIX-node$1
failCgroupV1: false
address: $(node_ip "$1")
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $STATE/pki/ca.crt}
authorization: {mode: Webhook}
podLogsDir: $d/pod-logs
failSwapOn: true
evictionHard: {memory.available: 200Mi, nodefs.available: 2%, imagefs.available: 2%}
# the images were imported by hand: never garbage-collect them
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
nodeStatusReportFrequency: 10s
YAML
}
