"""Comparisons between arms on different machines (benchlib.analysis.machines), on a real campaign
(tests/fixtures/tidy/lab-default-003) whose runs are told apart as a campaign over two clusters would
record them."""

from __future__ import annotations

import polars as pl

from benchlib.analysis import machines
from benchlib.report import summary
from tests.support.analysis_tables import report_comparisons

DEFAULT = "tests/fixtures/tidy/lab-default-003"


def test_only_comparisons_with_an_arm_on_other_machines_say_so_and_the_caveats_count_them():
    _, runs, _, comparisons = report_comparisons(DEFAULT)
    same = machines.annotate(comparisons, runs)
    assert same["machines_differ"].is_null().all() and same.drop("machines_differ").equals(comparisons)
    assert "Different machines" not in summary.caveats_markdown(same)

    kernel = runs["kernel"][0]
    other = runs.with_columns(
        kernel=pl.when(pl.col("scenario") == "vxlan").then(pl.lit("6.18.0-other")).otherwise(pl.col("kernel"))
    )
    found = machines.annotate(comparisons, other)
    flagged = found.filter(pl.col("machines_differ").is_not_null())
    # vxlan against the baseline, and any comparison whose baseline is vxlan (a contrast)
    assert set(flagged["scenario"]) | set(flagged["baseline"]) >= {"vxlan"}
    assert all("vxlan" in (s, b) for s, b in zip(flagged["scenario"], flagged["baseline"], strict=True))
    assert len(flagged) == len(comparisons.filter((pl.col("scenario") == "vxlan") | (pl.col("baseline") == "vxlan")))
    row = flagged.filter(pl.col("scenario") == "vxlan").row(0, named=True)
    assert row["machines_differ"] == f"kernel 6.18.0-other vs {kernel}"
    text = summary.caveats_markdown(found)
    assert f"**Different machines:** in {len(flagged)} of {len(found)} comparisons" in text
