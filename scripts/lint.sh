#!/usr/bin/env bash
# Lint, format and type checks, configured in pyproject.toml: ruff (lint, then the formatter in check
# mode), pyright on benchlib/, shellcheck on every shell script. Runs every check, prints one line per
# tool, and exits 1 if any of them found something. Needs the dev environment (`uv sync`) and the
# Debian package shellcheck (scripts/setup.sh installs it).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

# the project's own tools first: the locked versions
export PATH="$PWD/.venv/bin:$PATH"
failed=()

check() {  # check NAME COMMAND...: run it, show its output only when it finds something
  local name=$1 out
  shift
  if out=$("$@" 2>&1); then
    printf 'lint: %-10s ok\n' "$name"
  else
    printf '%s\n' "$out"
    printf 'lint: %-10s FAILED (%s)\n' "$name" "$*"
    failed+=("$name")
  fi
}

# every shell script of the project, committed or not
mapfile -t shell_scripts < <(find scripts benchmarks pipelines -name '*.sh' -type f | sort)

check ruff ruff check --output-format concise .
check format ruff format --check --output-format concise .
check pyright pyright
if command -v shellcheck >/dev/null 2>&1; then
  check shellcheck shellcheck "${shell_scripts[@]}"
else
  echo "lint: shellcheck not found (apt-get install shellcheck, or run scripts/setup.sh)"
  failed+=(shellcheck)
fi

if [ ${#failed[@]} -gt 0 ]; then
  echo "lint: failed: ${failed[*]}"
  exit 1
fi
