#!/usr/bin/env bash
# The test suite: install everything, run the lint, format and type checks (scripts/lint.sh), then
# pytest on the real lab (root, network namespaces, real netperf). Extra arguments go to pytest.
# `--fast`: only the root-free unit tier (no lab, no cluster, no whole campaigns), in a couple of
# minutes, without root and without the system set-up (it needs uv, and the tools of a previous set-up
# for the tests that run them).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${1:-}" == "--fast" ]]; then
  shift
  export PATH="$PWD/.tools/bin:$PATH"
  # --compile-bytecode: the venv's packages read from bytecode compiled once, not recompiled by every
  # python the tests start (as happens under PYTHONDONTWRITEBYTECODE)
  exec uv run --frozen --compile-bytecode pytest -m "unit and not slow" "$@"
fi
# The full suite: a test that cannot run here fails instead of skipping (tests/conftest.py cannot_run),
# so nothing silently stops being tested.
export BENCHLIB_TEST_REQUIRE_ALL=1
bash scripts/setup.sh
export PATH="$PWD/.tools/bin:$PATH"
# The Kubernetes target's tests run a real local cluster, with the bridge CNI and with Cilium, both built
# once per machine and cached under ~/.cache/benchlib. On a fresh machine the builds take about 17 minutes:
# they run in the background, at the lowest priority, while the lint and the tiers that need no cluster run
# (the cluster tier comes last, tests/conftest.py). Each cluster fixture runs `build` itself, which waits
# on the build's lock and then finds it built.
build_log=$(mktemp -t benchlib-cluster-build.XXXXXX)
# its own session (setsid), so that an interrupted test command stops the whole build
setsid nice -n 19 bash -c 'bash scripts/k8s-local-cluster.sh build && bash scripts/k8s-local-cluster.sh build cilium' \
  >"$build_log" 2>&1 &
build_pid=$!
trap 'kill -TERM -- "-$build_pid" 2>/dev/null || true' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP
echo "test.sh: the cluster's builds run in the background, their output in $build_log"
bash scripts/lint.sh
status=0
uv run --frozen pytest --durations=25 "$@" || status=$?
if ! wait "$build_pid"; then
  tail -n 30 "$build_log" >&2
  echo "test.sh: the cluster's build failed (all of its output in $build_log)" >&2
  [ "$status" -ne 0 ] || status=1
else
  rm -f "$build_log"
fi
trap - EXIT
exit "$status"
