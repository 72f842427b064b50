# shellcheck shell=bash
# The cluster's PKI: a CA, the apiserver's serving certificate, its client certificate to the
# kubelets, the service-account key pair, static tokens, and a kubeconfig per client.

pki() {
  local p="$STATE/pki"
  mkdir -p "$p"
  # umask 077: keys, tokens and certificates are 0600 from the moment they exist
  ( umask 077; cd "$p" || exit 1
    openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj /CN=benchlib-local-ca \
      -keyout ca.key -out ca.crt 2>/dev/null
    cert() {  # cert <name> <subject> <subjectAltName>
      openssl req -newkey rsa:2048 -nodes -subj "$2" -keyout "$1.key" -out "$1.csr" 2>/dev/null
      printf 'subjectAltName=%s\n' "$3" >"$1.ext"
      openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 \
        -extfile "$1.ext" -out "$1.crt" 2>/dev/null
    }
    cert apiserver /CN=kube-apiserver \
      "IP:$(node_ip 1),IP:127.0.0.1,IP:$API_SERVICE_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default.svc"
    # the apiserver's client cert to the kubelets (exec, logs): system:masters passes their webhook authz
    cert kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" DNS:kubelet-client
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    {
      echo "$(openssl rand -hex 16),admin,admin,system:masters"
      echo "$(openssl rand -hex 16),benchlib-runner,benchlib-runner"
      echo "$(openssl rand -hex 16),system:kube-proxy,kube-proxy"
      for n in 1 2; do echo "$(openssl rand -hex 16),system:node:$PREFIX-node$n,$PREFIX-node$n,system:nodes"; done
    } >tokens.csv )
  kubeconfig "$STATE/admin.kubeconfig" admin "https://127.0.0.1:$HOST_API_PORT"
  kubeconfig "$STATE/runner.kubeconfig" benchlib-runner "https://127.0.0.1:$HOST_API_PORT"
  # components inside the node namespaces reach the apiserver over the wire
  kubeconfig "$STATE/kube-proxy.kubeconfig" system:kube-proxy "https://$(node_ip 1):$API_PORT"
  for n in 1 2; do kubeconfig "$STATE/node$n.kubeconfig" "system:node:$PREFIX-node$n" "https://$(node_ip 1):$API_PORT"; done
  kubeconfig "$STATE/cp.kubeconfig" admin "https://$(node_ip 1):$API_PORT"
}

kubeconfig() {  # kubeconfig <file> <user> <server>: its names the cluster's (KUBE_CONTEXT), so that
  # two local clusters' files merge in one KUBECONFIG, each selected by its context
  local token
  token=$(awk -F, -v u="$2" '$2 == u {print $1}' "$STATE/pki/tokens.csv")
  (umask 077; cat >"$1") <<KC
apiVersion: v1
kind: Config
clusters: [{name: $KUBE_CONTEXT, cluster: {server: "$3", certificate-authority: "$STATE/pki/ca.crt"}}]
users: [{name: "$2$KUBE_USER_SUFFIX", user: {token: "$token"}}]
contexts: [{name: $KUBE_CONTEXT, context: {cluster: $KUBE_CONTEXT, user: "$2$KUBE_USER_SUFFIX"}}]
current-context: $KUBE_CONTEXT
KC
}
