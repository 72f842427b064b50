#!/usr/bin/env bash
# The test suite: install everything, run the lint, format and type checks (scripts/lint.sh), then
# pytest on the real lab (root, network namespaces, real netperf). Extra arguments go to pytest.
# `--fast`: only the root-free unit tier (no lab, no cluster, no whole campaigns), in a couple of
# minutes, without root and without the system set-up (it needs uv, and the tools of a previous set-up
# for the tests that run them).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${1:-}" == -h || "${1:-}" == --help ]]; then  # the comment block above, without its #
  awk 'NR == 1 {next} !/^#/ {exit} {sub(/^# ?/, ""); print}' "$0"
  exit 0
fi
if [[ "${1:-}" == "--fast" ]]; then
  shift
  export PATH="$PWD/.tools/bin:$PATH"
  # --compile-bytecode: the venv's packages read from bytecode compiled once, not recompiled by every
  # python the tests start (as happens under PYTHONDONTWRITEBYTECODE)
  exec uv run --frozen --compile-bytecode pytest -m "unit and not slow" -n auto "$@"
fi
# The full suite: a test that cannot run here fails instead of skipping (tests/conftest.py cannot_run),
# so nothing silently stops being tested.
export BENCHLIB_TEST_REQUIRE_ALL=1
# How long each phase took, printed as the script ends, also when a phase fails and stops it
took=()
print_times() {
  local line
  ((${#took[@]})) || return 0
  printf -v line '%s, ' "${took[@]}"
  echo "test.sh: ${line%, }"
}
trap print_times EXIT
timed() {  # timed NAME COMMAND...: run it, note its time (and its exit code if it failed), return that code
  local name=$1 start=$SECONDS rc=0
  shift
  "$@" || rc=$?
  took+=("$name $((SECONDS - start)) s$( ((rc == 0)) || echo " (rc $rc)")")
  return "$rc"
}
timed setup bash scripts/setup.sh
export PATH="$PWD/.tools/bin:$PATH"
timed lint bash scripts/lint.sh
# the Kubernetes target's tests run a real local cluster, with the bridge CNI,
# Cilium and the AWS VPC CNI (each built once per machine and cached under ~/.cache/benchlib)
timed build bash scripts/k8s-local-cluster.sh build
timed "build cilium" bash scripts/k8s-local-cluster.sh build cilium
timed "build vpc" bash scripts/k8s-local-cluster.sh build vpc
# The unit tier measures nothing: it runs on every CPU (pytest-xdist hands out single tests; a fixture
# that takes a minute is made once for both workers, tests/support/once.py). The lab and cluster tiers
# measure: one test at a time, as a measurement beside anything else is noise. The second tier runs
# even when the first fails, so one run lists every failure.
unit=0 measured=0
start=$SECONDS
uv run --frozen pytest -m unit -n auto --durations=30 "$@" || unit=$?
took+=("unit tier $((SECONDS - start)) s (rc $unit)")
start=$SECONDS
uv run --frozen pytest -m "not unit" --durations=60 "$@" || measured=$?
took+=("measured tiers $((SECONDS - start)) s (rc $measured)")
# 5 is pytest's "no test selected": a path or -k given to this script may select one tier only
if [[ $unit == 5 && $measured == 5 ]]; then exit 5; fi
for rc in $unit $measured; do [[ $rc == 0 || $rc == 5 ]] || exit "$rc"; done
