# shellcheck shell=bash
# The control plane, in node 1's namespace: etcd, the apiserver (forwarded to the host's loopback
# for host-side clients), the controller manager and the scheduler.

choose_api_port() {  # a named cluster's API forward: the first port of NAMED_API_PORTS nothing listens on
  # and no other local cluster has (one that is down at the moment keeps its port)
  local p taken d
  taken=$(for d in $(other_states); do cat "$d/api-port" 2>/dev/null || true; done)
  # shellcheck disable=SC2086 # first and last
  for p in $(seq $NAMED_API_PORTS); do
    if grep -qx "$p" <<<"$taken" || [ -n "$(ss -Hltn "sport = :$p")" ]; then continue; fi
    echo "$p"
    return
  done
  die "no free port in $NAMED_API_PORTS (first and last) for the API forward"
}

control_plane() {
  local p="$STATE/pki"
  daemon etcd 1 "$HYPERKUBE" etcd --name benchlib --data-dir "$STATE/etcd" --unsafe-no-fsync \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster benchlib=http://127.0.0.1:2380 --listen-metrics-urls=
  wait_for etcd "etcd health" innode 1 curl -sf --max-time 1 http://127.0.0.1:2379/health
  daemon kube-apiserver 1 "$HYPERKUBE" kube-apiserver \
    --etcd-servers=http://127.0.0.1:2379 \
    --bind-address="$(node_ip 1)" --advertise-address="$(node_ip 1)" --secure-port="$API_PORT" \
    --tls-cert-file="$p/apiserver.crt" --tls-private-key-file="$p/apiserver.key" \
    --client-ca-file="$p/ca.crt" --token-auth-file="$p/tokens.csv" \
    --authorization-mode=Node,RBAC \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$p/sa.pub" --service-account-signing-key-file="$p/sa.key" \
    --service-cluster-ip-range="$SERVICE_CIDR" \
    --kubelet-client-certificate="$p/kubelet-client.crt" --kubelet-client-key="$p/kubelet-client.key" \
    --kubelet-preferred-address-types=InternalIP \
    --allow-privileged=true --profiling=false
  wait_for kube-apiserver "the apiserver's /readyz" \
    innode 1 curl -sf --max-time 2 --cacert "$p/ca.crt" "https://$(node_ip 1):$API_PORT/readyz"
  # the host's clients (benchlib, tests) reach it on loopback
  daemon apiserver-forward - socat "TCP-LISTEN:$HOST_API_PORT,bind=127.0.0.1,reuseaddr,fork" \
    "SYSTEM:exec nsenter --net=/run/netns/$(netns 1) socat STDIO TCP\\:$(node_ip 1)\\:$API_PORT"
  # --kube-api-qps: the default 20 writes/s makes 5000 Services' EndpointSlices take minutes
  daemon kube-controller-manager 1 "$HYPERKUBE" kube-controller-manager \
    --kubeconfig="$STATE/cp.kubeconfig" --bind-address=127.0.0.1 --secure-port=10257 \
    --leader-elect=false --service-account-private-key-file="$p/sa.key" --root-ca-file="$p/ca.crt" \
    --use-service-account-credentials=false --kube-api-qps=500 --kube-api-burst=1000 \
    --allocate-node-cidrs=true --cluster-cidr="$CLUSTER_CIDR" --node-cidr-mask-size="$NODE_CIDR_PREFIX" \
    --service-cluster-ip-range="$SERVICE_CIDR" \
    --controllers='*,-cloud-node-lifecycle,-service-lb-controller,-node-route-controller'
  daemon kube-scheduler 1 "$HYPERKUBE" kube-scheduler --kubeconfig="$STATE/cp.kubeconfig" \
    --bind-address=127.0.0.1 --secure-port=10259 --leader-elect=false
  wait_for kube-controller-manager "the default ServiceAccount" kubectl get serviceaccount default
  kubectl apply -f pipelines/kubernetes/rbac.yaml >/dev/null
}
