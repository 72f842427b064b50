"""Benchmark 4: `dvc repro` with nothing changed, and what re-runs after an analysis change.

In a temporary copy of the project (what tests/conftest.py's project_copy
copies), with a small campaign (``--scenarios``, the four netperf tests at 1 s,
6 blocks, the statistics floor): one full `dvc repro` (measures on the lab),
then `dvc repro` with nothing changed (``--noop`` times, median reported),
then `dvc repro` after changing analysis.alpha, listing the stages that ran.

    uv run python benchmarks/pipeline.py [--scenarios host veth-routed] [--noop 5]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for tests.conftest
from common import figure, median  # noqa: E402

from tests.conftest import project_copy, venv_env  # noqa: E402


def dvc_repro(project: Path) -> tuple[float, list[str]]:
    """Wall time of one `dvc repro` and the stages it ran."""
    t0 = time.monotonic()
    proc = subprocess.run(["dvc", "repro"], cwd=project, env=venv_env(), capture_output=True, text=True)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"dvc repro failed:\n{proc.stdout}\n{proc.stderr}")
    return wall, re.findall(r"Running stage '([^']+)'", proc.stdout + proc.stderr)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenarios", nargs="+", default=["host", "veth-routed"])
    p.add_argument("--noop", type=int, default=5, help="no-change repetitions")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-pipeline-") as tmp:
        project = project_copy.__wrapped__(Path(tmp))
        params = yaml.safe_load((project / "params.yaml").read_text())
        params["experiment"].update(campaign="bench-pipeline", repetitions=6)
        params["environments"]["local-lab"]["scenarios"] = args.scenarios
        for test in params["tests"].values():
            test["duration_s"] = 1
        (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))

        first, ran_first = dvc_repro(project)
        noop = [dvc_repro(project) for _ in range(args.noop)]
        params["analysis"]["alpha"] = 0.01
        (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
        changed, ran_changed = dvc_repro(project)

    print(f"pipeline: {len(args.scenarios)} scenarios x 4 tests x 6 blocks of 1 s runs, in a copy of the project")
    figure("first dvc repro (collect+parse+report)", first, "s")
    print(f"  stages run: {', '.join(ran_first)}")
    figure("dvc repro, nothing changed (median)", median([w for w, _ in noop]), "s", "< 3 s")
    print(
        f"  runs: {' '.join(f'{w:.2f}' for w, _ in noop)} s; stages run: "
        f"{sorted({s for _, stages in noop for s in stages}) or 'none'}"
    )
    figure("dvc repro after analysis.alpha change", changed, "s")
    print(f"  stages run: {', '.join(ran_changed) or 'none'}")


if __name__ == "__main__":
    main()
