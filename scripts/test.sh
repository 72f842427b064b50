#!/usr/bin/env bash
# The test suite: install everything, then run pytest on the real lab
# (root, network namespaces, real netperf). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.tools/bin:$PATH"
# the Kubernetes target's tests run a real local cluster, with the bridge CNI
# and with Cilium (both built once per machine and cached under ~/.cache/benchlib)
bash scripts/k8s-local-cluster.sh build
bash scripts/k8s-local-cluster.sh build cilium
exec uv run --frozen pytest "$@"
