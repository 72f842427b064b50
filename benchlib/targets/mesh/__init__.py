"""Service-mesh proxies as data, shared by the targets that run them: which
proxies stand where and what they listen on (`shapes`), the capture rules that
bring a pod's traffic to them, Envoy's bootstraps in the shapes of Istio's data
plane (`envoy`), and the certificates of their mutual TLS (`certificates`).
Everything here is pure but the certificate maker and Envoy's version probe:
the lab starts the proxies in its namespaces (targets/lab), the Kubernetes
target as sidecar containers (targets/kubernetes/sidecars.py).
"""
