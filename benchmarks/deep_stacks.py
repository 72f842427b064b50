"""Benchmark 10: the profile analysis' memory against stack depth.

The captured `perf script` output of tests/fixtures/perf (host, a netperf TCP_RR in the lab) as the
baseline, and as the scenario the same profile plus distinct stacks of a given depth and samples each (every
stack's frames distinct from the others'; with 1 sample each, a stack is under the share the tables keep). Each case runs `benchlib.analysis.profiles.analyse` in a
fresh process and prints its peak RSS and time, and the rows of profile_frames.

    uv run python benchmarks/deep_stacks.py [--cases 1x1000,1x4000,50x1000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from benchlib.settings.project import project_root


def case(stacks: int, depth: int, samples: int) -> dict:
    """Peak RSS (GiB), seconds and profile_frames rows of the analysis, measured in this process."""
    import resource

    import polars as pl

    sys.path.insert(0, str(project_root() / "tests" / "analysis"))
    sys.path.insert(0, str(project_root()))
    from profile_tables import profile_tables

    from benchlib.analysis import profiles

    p, r = profile_tables({"host": "host", "deep": "host"})
    key = p.filter(scenario="deep").row(0, named=True)
    deep = [
        {**key, "comm": "deep", "stack": ";".join(f"frame_{s}_{d:05d}" for d in range(depth)), "samples": samples}
        for s in range(stacks)
    ]
    p = pl.concat([p, pl.DataFrame(deep, schema=p.schema)])
    t = time.monotonic()
    out = profiles.analyse(p, r, "host")
    seconds = time.monotonic() - t
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    return {"seconds": seconds, "rss_gib": rss, "frames_rows": len(out["profile_frames"])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--cases", default="0x0x1,1x1024x1000,1x4000x1000,100x1000x1000,200x1000x1", help="STACKSxDEPTHxSAMPLES, ..."
    )
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        stacks, depth, samples = map(int, args.one.split("x"))
        print(json.dumps(case(stacks, depth, samples)))
        return
    print(f"{'stacks':<32}{'peak RSS':>12}{'time':>10}{'frames rows':>14}")
    for c in args.cases.split(","):
        out = subprocess.run([sys.executable, __file__, "--one", c], capture_output=True, text=True, check=True)
        m = json.loads(out.stdout)
        stacks, depth, samples = c.split("x")
        label = f"{stacks} x {depth} frames, {samples} sample(s)"
        print(f"{label:<32}{m['rss_gib']:>10.2f} G{m['seconds']:>8.1f} s{m['frames_rows']:>14}")


if __name__ == "__main__":
    main()
