# shellcheck shell=bash
# The running cluster's pod network, "<cni> <proxy-mode> <routing> <lb>" in $STATE/network, and
# switching it: what a CNI change is on a real cluster. The old CNI's devices, routes and rules go,
# the new one's agents start, pods made after that get the new network (benchlib makes fresh pods
# for every scenario).
#
# Each CNI is a file in cni/ that adds its name to CNIS and defines, for CNI c:
#   c_network <command> <proxy-mode> [--option value...]
#                                           validate --proxy-mode (empty: not given) and the CNI's own
#                                           options, print "<proxy-mode> <routing> <lb>" with defaults,
#                                           "-" for unused (the last two fields are the CNI's own)
#   c_up <nodes> <proxy-mode> <routing> <lb> start it on every node (the podCIDRs are known)
#   c_down <nodes>                          remove it and what it made in the nodes
#   c_components <nodes>                    its daemons (supervise.sh names), one a line
#   c_follows_proxy                         true if a kube-proxy change needs it restarted
#   c_packages                              the Debian packages it needs on the host beyond the
#                                           cluster's (setup.sh's profile named c installs them)
#   c_commands                              the host commands its switch runs beyond the cluster's
#                                           (benchlib doctor checks them)
# and, when it is built from source, in cni/c-build.sh:
#   c_build [--check] [ARGS]                build it into the per-machine cache ($CACHE); --check:
#                                           build nothing, print where it is, or fail saying how to
# `k8s-local-cluster.sh cnis` lists them all (cni_table), for setup.sh, reproduce.sh and doctor.
# A directory a CNI makes on the host (a mount point for its agents' private ones) is made with
# make_host_dir (host.sh): the last local cluster's `down` removes it.
CNIS=()

cni_known() { local c; for c in "${CNIS[@]}"; do [ "$c" = "$1" ] && return 0; done; return 1; }
cni_built_from_source() { declare -F "$1_build" >/dev/null; }
built_cnis() { local c out=(); for c in "${CNIS[@]}"; do ! cni_built_from_source "$c" || out+=("$c"); done; echo "${out[*]}"; }

cni_table() {  # a line per CNI, tab-separated: name, "build" or "-", its packages, its commands (words, or "-")
  local c
  for c in "${CNIS[@]}"; do
    printf '%s\t%s\t%s\t%s\n' "$c" "$(cni_built_from_source "$c" && echo build || echo -)" \
      "$(words_or_dash "$("${c}_packages")")" "$(words_or_dash "$("${c}_commands")")"
  done
}

words_or_dash() { if [ -n "$1" ]; then echo "$1"; else echo -; fi; }

pod_network() {  # pod_network <cni> <proxy-mode> <routing> <lb>: switch to it (nothing to do when it runs)
  local want="$*" have nodes n
  nodes=$(cat "$STATE/nodes" 2>/dev/null) || die "no cluster is up (run: $0 ${CLUSTER_OPT}up)"
  have=$(cat "$STATE/network" 2>/dev/null || echo "none none - -")
  if [ "$have" = "$want" ] && network_running "$nodes"; then log "pod network: $want (unchanged)"; return; fi
  local old_cni old_proxy old_routing old_lb t0=$SECONDS
  read -r old_cni old_proxy old_routing old_lb <<<"$have"
  rm -f "$STATE/network"
  if [ "$1" != "$old_cni" ] || [ "$3 $4" != "$old_routing $old_lb" ] || "$1_follows_proxy"; then
    [ "$old_cni" = none ] || "${old_cni}_down" "$nodes"
    # the old pod routes (static, or a CNI's native ones over the wire)
    for n in $(seq 1 "$nodes"); do ip -n "$(netns "$n")" route flush root "$CLUSTER_CIDR" 2>/dev/null || true; done
  fi
  kube_proxies "$nodes" "$old_proxy" "$2"
  "$1_up" "$nodes" "$2" "$3" "$4"
  for n in $(seq 1 "$nodes"); do wait_for "kubelet$n" "node $(netns "$n") to be Ready" node_ready "$n"; done
  echo "$want" >"$STATE/network"
  log "pod network: $want on $nodes node(s), after $((SECONDS - t0)) s"
}

network_components() {  # network_components <nodes>: the daemons the current pod network needs
  local cni proxy n
  read -r cni proxy _ _ <"$STATE/network" || return 0
  "${cni}_components" "$1"
  if [ "$proxy" != none ]; then for n in $(seq 1 "$1"); do echo "kube-proxy$n"; done; fi
}

network_running() {  # every daemon of the current pod network is alive
  local c; for c in $(network_components "$1"); do running "$c" || return 1; done
}

network_args() {  # network_args <up|cni|proxy-mode> ARGS: validated "<cni> <proxy-mode> <routing> <lb>" on stdout
  local cmd=$1 cni="" proxy="" own=() rest; shift
  while [ $# -gt 0 ]; do
    case $1 in
      --*) [ $# -ge 2 ] || bad_input "$1 needs a value (see $0 --help)" ;;
      *) bad_input "$cmd: unknown argument '$1' (see $0 --help)" ;;
    esac
    case $1 in
      --cni) cni=$2 ;;
      --proxy-mode) proxy=$2 ;;
      *) own+=("$1" "$2") ;;  # the CNI's own options
    esac
    shift 2
  done
  cni=${cni:-bridge}
  cni_known "$cni" || bad_input "--cni $cni: choose one of: ${CNIS[*]}"
  rest=$("${cni}_network" "$cmd" "$proxy" "${own[@]}") || exit $?
  read -r proxy _ _ <<<"$rest"
  case " $PROXY_MODES none " in *" $proxy "*) ;; *) bad_input "--proxy-mode $proxy: choose one of: $PROXY_MODES none" ;; esac
  echo "$cni $rest"
}
