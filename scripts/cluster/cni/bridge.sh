# shellcheck shell=bash
# The bridge + host-local CNI (the Debian plugins), beside kube-proxy: each node's pods on a bridge,
# the other node's pods reached by a static route over the wire. See pod-network.sh for the
# functions every CNI defines.
CNIS+=(bridge)

bridge_network() {  # bridge_network <command> <proxy-mode>: "<proxy-mode> - -" with its default; no options of its own
  case ${3:-} in
    "") ;;
    --routing|--lb) bad_input "--routing and --lb are Cilium's options (add --cni cilium)" ;;
    *) bad_input "$1: unknown argument '$3' (see $0 --help)" ;;
  esac
  [ "$2" != none ] || bad_input "--proxy-mode none needs a CNI that replaces kube-proxy (--cni cilium)"
  echo "${2:-iptables} - -"
}

bridge_follows_proxy() { false; }  # its config does not depend on kube-proxy's mode
bridge_components() { true; }      # no daemon of its own
bridge_packages() { true; }      # the Debian CNI plugins, which the cluster has
bridge_commands() { true; }

bridge_config() {  # bridge_config <node> <podCIDR>
  cat <<JSON
{"cniVersion": "1.0.0", "name": "benchlib-bridge", "plugins": [
  {"type": "bridge", "bridge": "$LINK_PREFIX-br0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$2"}]], "routes": [{"dst": "0.0.0.0/0"}],
            "dataDir": "$STATE/node$1/cni/ipam"}},
  {"type": "loopback"}]}
JSON
}

bridge_up() {  # bridge_up <nodes> <proxy-mode> <routing> <lb>
  local n
  for n in $(seq 1 "$1"); do bridge_config "$n" "$(cat "$STATE/node$n/podcidr")" >"$STATE/node$n/cni/net.d/10-benchlib.conflist"; done
  [ "$1" = 2 ] || return 0
  ip -n "$(netns 1)" route replace "$(cat "$STATE/node2/podcidr")" via "$(node_ip 2)"
  ip -n "$(netns 2)" route replace "$(cat "$STATE/node1/podcidr")" via "$(node_ip 1)"
}

bridge_down() {  # bridge_down <nodes>
  local n
  for n in $(seq 1 "$1"); do
    rm -f "$STATE/node$n/cni/net.d/10-benchlib.conflist"
    ip -n "$(netns "$n")" link del "$LINK_PREFIX-br0" 2>/dev/null || true
  done
}
