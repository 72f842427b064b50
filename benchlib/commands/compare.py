"""`benchlib compare`: campaign B against campaign A, what differs and what changed; a CI gate."""

from __future__ import annotations

import json
from pathlib import Path

from ..base.errors import ConfigError
from ..records import store
from ..settings.analysis import check_band
from ..settings.project import project_root
from ..tables import tidy
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


def load_campaign(spec: str):
    """Campaign ``spec`` (an id under data/raw/, or REV:ID through DVC) as compare's tidy tables."""
    from benchlib.analysis.compare import Campaign

    return Campaign(spec, *tidy.campaign_tables(store.campaign_records(spec, project_root()), spec))


def run(args) -> int:
    from benchlib.analysis import compare
    from benchlib.report import compare as output  # not render: --no-html loads no notebook stack

    analysis = params(args).analysis
    try:
        threshold = analysis.compare_threshold() if args.threshold is None else check_band(args.threshold)
    except ValueError as exc:
        raise ConfigError(f"--threshold: {exc}") from None
    a, b = load_campaign(args.a), load_campaign(args.b)
    if args.correction:
        analysis = analysis.model_copy(update={"correction": args.correction})
    res = compare.run(a, b, analysis, threshold)
    out(json.dumps(output.to_json(res), indent=1) if args.json else output.text(res))
    if args.junit:
        log.info(f"compare: JUnit -> {output.write_junit(res, Path(args.junit), strict_setup=args.strict_setup)}")
    if not args.no_html:
        from benchlib.report import render as report

        root = project_root()
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
