#!/usr/bin/env bash
# Explore the results in JupyterLab with the project's kernel (.venv).
# The notebooks' source is notebooks/*.py (jupytext percent format); this
# creates or refreshes their paired .ipynb first, and saving in JupyterLab
# keeps both in step. Extra arguments go to `jupyter lab`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
uv run --frozen jupytext --sync notebooks/*.py
root_flag=()
[ "$(id -u)" -eq 0 ] && root_flag=(--allow-root)
exec uv run --frozen jupyter lab "${root_flag[@]}" --notebook-dir=notebooks "$@"
