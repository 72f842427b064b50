"""`benchlib compare`: campaign B against campaign A, what differs and what changed; a CI gate."""

from __future__ import annotations

import json
import os
from pathlib import Path

from .. import config, record, tidy
from ..errors import BenchlibError
from .common import EXIT_REGRESSION, add, log, out, params


def add_parser(subparsers) -> None:
    s = add(
        subparsers,
        "compare",
        help="compare campaign B against campaign A: what differs, what changed; a CI gate",
        description="Compare two campaigns measured with this project (ids under data/raw/), B against A.\n\n"
        "1. Metadata first: what the raw records of A and B say differently about the configurations "
        "measured in both (kernel, tool versions, target facts, CNI/kube-proxy settings, MTU, CPU "
        "placement, test parameters), leaving out session identifiers (lab ids, namespace and pod "
        "names, addresses, timestamps). A configuration measured with different test parameters is "
        "refused (exit 2), naming it and the fields.\n"
        "2. Per configuration (environment, scenario, test and its parameters, metric, side): both "
        "medians with distribution-free 95 % CIs, the change in % with its CI, two-sided Mann-Whitney "
        "U, the p-value corrected within its family (the primary family, each test's headline metric: "
        "--correction, Holm by default; every other metric: the Benjamini-Hochberg family of its kind, "
        "labelled FDR), the change's CI at the level that correction decided at, the minimum "
        "detectable effect, and a verdict by the metric's direction: '~ within noise', 'negligible' "
        "(significant, but the CI lies inside +/- the threshold), 'inconclusive' (test and CI "
        "disagree) or '+x % [lo, hi] better/worse' (where a value is <= 0, e.g. a rate fallen to 0, "
        "the change of the medians without a CI); a configuration whose every run failed in one "
        "campaign reads 'every run failed in A/B (k of n: reasons)', and failed runs are counted "
        "per configuration; a geometric mean of the changes per test.\n"
        "3. reports/compare-A-vs-B.html (papermill runs notebooks/compare.py; opens offline).",
        examples=[
            "benchlib compare lab-default-002 lab-default-003",
            "benchlib compare HEAD~3:lab-default-002 lab-default-003 --junit compare.xml --no-html",
        ],
        exit_codes="0 no regression; 1 at least one regression: a significant 'worse' change beyond "
        "the threshold (a collapse to 0 included), or a configuration measured in A whose every run "
        "failed in B; 2 an error, one line on stderr: an unknown, empty, unparseable or copied campaign, "
        "a REV:ID whose records are in neither the DVC cache nor a remote, changed test parameters, or "
        "with --strict-setup a setup difference (after the output is written). The threshold is "
        "--threshold, else analysis.threshold_pct of params.yaml (a number or {metric: %, default: %}), "
        "else analysis.noise_band_pct.",
    )
    s.add_argument(
        "a",
        metavar="A",
        help="the reference campaign (e.g. the one before an upgrade): an id under "
        "data/raw/, or REV:ID to take it from git revision REV through DVC "
        "(its cache or remote, as `dvc pull` would)",
    )
    s.add_argument("b", metavar="B", help="the campaign compared against it (the same forms)")
    s.add_argument(
        "--threshold",
        type=float,
        metavar="PCT",
        help="practical threshold in %% for every metric: a significant change whose CI lies inside "
        "+/- PCT reads 'negligible' and fails no gate",
    )
    s.add_argument(
        "--correction",
        choices=["holm", "fdr_bh"],
        help="correction of the headline family (default: analysis.correction; fdr_bh for large sweeps)",
    )
    s.add_argument(
        "--junit",
        metavar="FILE",
        help="write a JUnit XML file: one test case per configuration "
        "and metric, failing on a regression; the setup "
        "differences as properties of the suite",
    )
    s.add_argument(
        "--strict-setup",
        action="store_true",
        help="treat a setup difference (kernel, tool versions, MTU, CNI config, ...: what step 1 lists) "
        "as a failure: one failing JUnit case per differing field (class 'setup') and exit 2 "
        "after the output is written. Without it the differences are listed (text, JSON, and "
        "JUnit properties setup.<field> of the test suite) but fail nothing",
    )
    s.add_argument("--json", action="store_true", help="print the result as JSON instead of tables")
    s.add_argument("--no-html", action="store_true", help="skip the HTML page (faster, e.g. in CI)")
    s.add_argument("--out-dir", help="where compare-A-vs-B.html goes (default: reports)")
    s.set_defaults(func=run)


def _from_revision(rev: str, name: str) -> Path:
    """A raw root holding campaign ``name`` as git revision ``rev`` of the project had it, fetched
    through DVC (its cache or remote) into a temporary directory that lives as long as this process."""
    import atexit
    import shutil
    import tempfile

    from dvc.api import DVCFileSystem
    from dvc.exceptions import DvcException
    from dvc_data.index import DataIndexError
    from scmrepo.exceptions import SCMError

    from benchlib.analysis.compare import CompareError

    tmp = Path(tempfile.mkdtemp(prefix="benchlib-compare-"))
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    try:
        fs = DVCFileSystem(str(config.project_root()), rev=rev)
        src = f"data/raw/{name}"
        if not fs.isdir(src):
            raise CompareError(f"campaign {rev}:{name}: revision {rev} has no {src}")
        try:
            fs.get(src, str(tmp / name), recursive=True)
        except (DataIndexError, FileNotFoundError):  # a .dir manifest or a file in neither cache nor remote
            raise CompareError(f"campaign {rev}:{name}: {src} of revision {rev} {_not_fetched()}") from None
        tracked = [os.path.relpath(out.fs_path, fs.repo.root_dir) for out in fs.repo.index.outs]
    except (DvcException, SCMError, DataIndexError) as exc:
        raise CompareError(f"campaign {rev}:{name}: {type(exc).__name__}: {' '.join(str(exc).split())}") from None
    if not any(p == src or p.startswith(src + "/") or src.startswith(p + "/") for p in tracked):
        # git has the directory (DVC's .gitignore in it), but that revision's dvc.lock tracks another campaign
        raise CompareError(
            f"campaign {rev}:{name}: revision {rev} has {src} but DVC tracks no records there (its dvc.lock "
            f"and .dvc files track {', '.join(p for p in tracked if p.startswith('data/raw/')) or 'no raw records'}): "
            "give the revision that measured it (`git log -- dvc.lock`)"
        )
    return tmp


def _not_fetched() -> str:
    """Where the records of a revision were looked for, and how to fetch them (one line): the remotes
    of the project's DVC config, as `dvc pull` would use them."""
    from dvc.repo import Repo

    try:
        with Repo(str(config.project_root())) as repo:
            names, default = sorted(repo.config.get("remote", {})), repo.config.get("core", {}).get("remote")
    except Exception:  # only the hint depends on it: a config DVC cannot read names no remote
        names, default = [], None
    if not names:
        return (
            "is not in the DVC cache and no DVC remote is configured: add the remote it was pushed to "
            "(`dvc remote add -d NAME URL`), then `dvc fetch --all-commits` (or `dvc pull` on that revision)"
        )
    if default:
        return (
            f"is in neither the DVC cache nor the default remote {default!r}: `dvc push` it where it was "
            "measured, or fetch it from the remote that has it (`dvc fetch -r NAME --all-commits`)"
        )
    return (
        f"is not in the DVC cache and no default remote is set (remotes: {', '.join(names)}): "
        "`dvc fetch -r NAME --all-commits` (or `dvc pull -r NAME` on that revision)"
    )


def load_campaign(spec: str):
    """Campaign ``spec`` (an id under data/raw/, or rev:id through DVC) as compare's tidy tables."""
    import polars as pl

    from benchlib.analysis.compare import Campaign, CompareError

    rev, _, name = spec.rpartition(":")
    config.require_name(name, f"campaign {spec!r}")
    raw_root = _from_revision(rev, name) if rev else config.project_root() / "data" / "raw"
    cdir = record.campaign_dir(name, raw_root)
    if not cdir.is_dir():
        known = sorted(p.name for p in raw_root.iterdir() if p.is_dir()) if raw_root.is_dir() else []
        raise CompareError(f"campaign {spec}: no raw records in {cdir} (campaigns there: {', '.join(known) or 'none'})")
    # No plan to check another campaign against, but what `parse` would name regardless (an
    # incomplete record, a copy, a file where a record should be) is refused, not skipped.
    problems = record.survey(cdir, None)[1]
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise CompareError(f"campaign {spec}: {problems[0]}{more}")
    try:
        runs, metrics = tidy.build_tables(cdir)
    except BenchlibError as exc:
        raise CompareError(f"campaign {spec}: {exc}") from None
    # Records say which campaign measured them: another campaign's records copied here would
    # compare a campaign with itself (a byte copy of A as B: nothing differs, nothing changed).
    foreign = runs.filter(pl.col("campaign") != name)
    if len(foreign):
        owners = ", ".join(sorted(set(foreign["campaign"])))
        more = f" and {len(foreign) - 1} more" if len(foreign) > 1 else ""
        raise CompareError(
            f"campaign {spec}: {len(foreign)} of {len(runs)} records were measured by campaign "
            f"{owners} ({record.META} 'campaign'), not {name}, e.g. {foreign['record'][0]}{more}: "
            "copied records are refused; compare the campaign that measured them"
        )
    return Campaign(spec, runs, metrics, tidy.build_facts(runs))


def run(args) -> int:
    from benchlib.analysis import analyse, compare
    from benchlib.report import compare as output, render as report

    analysis = params(args).analysis
    try:
        threshold = analysis.compare_threshold() if args.threshold is None else config.check_band(args.threshold)
    except ValueError as exc:
        raise config.ConfigError(f"--threshold: {exc}") from None
    a, b = load_campaign(args.a), load_campaign(args.b)
    res = compare.run(
        a,
        b,
        alpha=analysis.alpha,
        correction=args.correction or analysis.correction,
        threshold_pct=threshold,
        seed=analysis.seed,
        targets=analyse.work_rates(analysis),
    )
    out(json.dumps(output.to_json(res), indent=1) if args.json else output.text(res))
    if args.junit:
        log.info(f"compare: JUnit -> {output.write_junit(res, Path(args.junit), strict_setup=args.strict_setup)}")
    if not args.no_html:
        root = config.project_root()
        out_dir = Path(args.out_dir) if args.out_dir else root / "reports"
        html = report.build_compare(res, out_dir)
        log.info(f"compare: report -> {html}")
    if args.strict_setup and len(res.differences):
        # not exit 1: that says "regression"; the campaigns' setups differ, which --strict-setup refuses
        fields = ", ".join(dict.fromkeys(res.differences["field"]))
        raise compare.CompareError(
            f"{res.a} vs {res.b}: the setup differs (--strict-setup): {fields}"
            + (f"; also {len(res.regressions)} regression(s)" if len(res.regressions) else "")
        )
    return EXIT_REGRESSION if len(res.regressions) else 0
