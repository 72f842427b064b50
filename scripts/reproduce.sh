#!/usr/bin/env bash
# The main job: install everything, then run the pipeline (`dvc repro`) on
# the default params.yaml (the embedded two-node lab). Extra arguments go to
# `dvc repro`, e.g. `scripts/reproduce.sh parse` to run up to one stage.
# `--preset FILE` first makes FILE the params.yaml (dvc reads only
# params.yaml), e.g. `scripts/reproduce.sh --preset pipelines/local-lab/params-datapaths.yaml`.
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
exec uv run --frozen dvc repro "$@"
