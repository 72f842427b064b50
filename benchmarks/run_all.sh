#!/usr/bin/env bash
# Runs every benchmark in turn, each under the machine's measurement lock, and
# prints their figures (BENCHMARKS.md quotes this output). Takes ~33 minutes
# on 2 cores, plus ~2 minutes to generate the 100k-run synthetic campaign once.
# Usage: bash benchmarks/run_all.sh   (as root, from the repository root)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.tools/bin:$PATH"
run() { echo "== $*"; flock /tmp/quiet.lock uv run --frozen --group bench python "$@"; echo; }
run benchmarks/fidelity.py
run benchmarks/campaign.py
run benchmarks/pipeline.py
run benchmarks/scale.py   # 10k and 100k runs, parse and analysis; 1M: --runs 1000000 (BENCHMARKS.md, 5)
run benchmarks/peer.py
run benchmarks/placement.py   # CPU placement and run length: ~12 minutes
run benchmarks/cpu_profiles.py   # 1,000 CPU profiles: ~1 minute
run benchmarks/perf_overhead.py   # perf's overhead and profiled runs per configuration: ~5 minutes
