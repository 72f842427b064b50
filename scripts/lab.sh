#!/usr/bin/env bash
# Explore the results in JupyterLab with the project's kernel (.venv).
# Analysis only: no root and no system package, just uv and the locked Python
# environment with the `lab` extra (the measuring tools come with
# scripts/setup.sh, which this does not need). The notebooks' source is
# notebooks/*.py (jupytext percent format); this creates or refreshes their
# paired .ipynb first, and saving in JupyterLab keeps both in step. Extra
# arguments go to `jupyter lab` (e.g. --no-browser, --port 8889, --version).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v uv >/dev/null 2>&1; then
  # Debian's and Ubuntu's python3 refuse `pip install --user` (PEP 668): a venv of its own holds uv
  echo "lab.sh: needs uv, which installs without root: python3 -m venv ~/.uv && ~/.uv/bin/pip install uv" \
       "&& export PATH=~/.uv/bin:\$PATH (or see https://docs.astral.sh/uv/getting-started/installation/)" >&2
  exit 2
fi
# --inexact: add JupyterLab without removing what a full set-up installed
uv sync --frozen --extra lab --inexact --quiet
uv run --frozen --no-sync jupytext --quiet --sync notebooks/*.py
root_flag=()
[ "$(id -u)" -eq 0 ] && root_flag=(--allow-root)
exec uv run --frozen --no-sync jupyter lab "${root_flag[@]}" --notebook-dir=notebooks "$@"
