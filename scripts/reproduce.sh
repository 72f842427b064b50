#!/usr/bin/env bash
# The main job: install everything, then run the pipeline (`dvc repro`) on
# the default params.yaml (the embedded two-node lab). Extra arguments go to
# `dvc repro`, e.g. `scripts/reproduce.sh parse` to run up to one stage.
# `--preset FILE` first makes FILE the params.yaml (dvc reads only
# params.yaml), e.g. `scripts/reproduce.sh --preset pipelines/local-lab/params-datapaths.yaml`;
# `--preset pipelines/local-k8s/params.yaml` runs on a real local cluster (brought up and down here).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${1:-}" == "--preset" ]]; then
  preset=${2:?--preset needs a params file, e.g. pipelines/local-lab/params-datapaths.yaml}
  [[ -f "$preset" ]] || { echo "reproduce.sh: --preset $preset: no such file" >&2; exit 2; }
  cp "$preset" params.yaml
  echo "reproduce.sh: params.yaml is now a copy of $preset (git checkout params.yaml restores the default)"
  shift 2
fi
bash scripts/setup.sh
export PATH="$PWD/.tools/bin:$PATH"
uv run --frozen benchlib validate
# A campaign on the local cluster (pipelines/local-k8s) brings it up first and
# takes it down at the end, also after a failure, Ctrl-C or SIGTERM.
if uv run --frozen python -c 'import sys, yaml
sys.exit("local-k8s" not in yaml.safe_load(open("params.yaml"))["experiment"]["environments"])'; then
  bash scripts/k8s-local-cluster.sh build
  # On a signal dvc exits at once while its `benchlib collect` still deletes
  # its namespace: let that finish (bounded) before the cluster goes away.
  cluster_down() {
    for _ in $(seq 300); do pgrep -f -- "$PWD/.venv/bin/benchlib collect" >/dev/null || break; sleep 1; done
    bash scripts/k8s-local-cluster.sh down
  }
  trap cluster_down EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  bash scripts/k8s-local-cluster.sh up
fi
uv run --frozen dvc repro "$@"
