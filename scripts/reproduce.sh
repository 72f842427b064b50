#!/usr/bin/env bash
# The main job: install everything, then run the pipeline (`dvc repro`) on
# the default params.yaml (the embedded two-node lab). Extra arguments go to
# `dvc repro`, e.g. `scripts/reproduce.sh parse` to run up to one stage.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.tools/bin:$PATH"
uv run --frozen benchlib validate
exec uv run --frozen dvc repro "$@"
