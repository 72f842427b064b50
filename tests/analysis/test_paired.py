"""Comparisons paired by block, on a real recorded lab campaign: drift common to a block cancels in
them, and a comparison that cannot be paired stays unpaired."""

import numpy as np
import polars as pl

from benchlib.analysis import paired, stats
from benchlib.vocabulary import schema
from tests.conftest import FIXTURES

CAMPAIGN = FIXTURES / "tidy" / "lab-default-003"  # real lab runs: 4 scenarios x 4 tests x 10 blocks


def tables() -> tuple[pl.DataFrame, pl.DataFrame]:
    runs, metrics = schema.read_runs(CAMPAIGN / "runs.parquet"), schema.read_metrics(CAMPAIGN / "metrics.parquet")
    return runs, stats.compared_values(metrics, runs, [])  # the headline metrics: the primary family


def primary(runs: pl.DataFrame, metrics: pl.DataFrame, pair: bool) -> pl.DataFrame:
    keys = ["test", "scenario", "metric"]
    return stats.compare(metrics, runs, baseline="host", seed=1, paired=pair).sort(keys)


def with_drift(metrics: pl.DataFrame, sd: float) -> pl.DataFrame:
    """Every value of block b multiplied by one factor f_b: a drift that moves a whole round."""
    factor = np.exp(np.random.default_rng(7).normal(0, sd, 10))
    return metrics.with_columns(value=pl.col("value") * pl.col("block").map_elements(lambda b: factor[b], pl.Float64))


def half_widths(table: pl.DataFrame) -> np.ndarray:
    return ((table["delta_high"] - table["delta_low"]) / 2).to_numpy()


def test_drift_common_to_a_block_cancels_in_the_paired_comparison_and_widens_the_unpaired():
    runs, metrics = tables()
    calm, drifting = primary(runs, metrics, True), primary(runs, with_drift(metrics, 0.15), True)
    assert len(calm) == 12 and set(calm["test_method"]) == {paired.TEST}
    assert set(calm["delta_method"]) == {paired.INTERVAL} and set(calm["n"]) == {10}
    # each block's factor divides out of its ratios: the same tests, changes and intervals
    for column in ("p", "delta_pct", "delta_low", "delta_high", "mde_pct"):
        assert np.allclose(calm[column].to_numpy(), drifting[column].to_numpy(), equal_nan=True), column
    # run against run, the same drift widens the intervals and loses significance
    unpaired_calm, unpaired_drifting = primary(runs, metrics, False), primary(runs, with_drift(metrics, 0.15), False)
    assert "exact" in set(unpaired_calm["test_method"])
    assert np.nanmedian(half_widths(unpaired_drifting)) > 2 * np.nanmedian(half_widths(unpaired_calm))
    assert (unpaired_drifting["p_adj"] < 0.05).sum() < (drifting["p_adj"] < 0.05).sum()
    # paired and unpaired agree on the sign of every change the calm campaign calls significant
    both = (calm["p_adj"] < 0.05) & (unpaired_calm["p_adj"] < 0.05)
    assert both.sum() > 0
    assert (np.sign(calm.filter(both)["delta_pct"]) == np.sign(unpaired_calm.filter(both)["delta_pct"])).all()


def test_the_sign_test_and_its_interval_agree_and_are_scipys():
    runs, metrics = tables()
    table = primary(runs, metrics, True)
    row = table.filter((pl.col("test") == "tcp_rr") & (pl.col("scenario") == "vxlan")).row(0, named=True)
    ok = runs.filter(pl.col("outcome") == "ok").select("run_id")
    tcp_rr = metrics.join(ok, on="run_id").filter(pl.col("test") == "tcp_rr")

    def by_block(scenario: str) -> np.ndarray:
        return tcp_rr.filter(pl.col("scenario") == scenario).sort("block")["value"].to_numpy()

    d = np.log(by_block("vxlan")) - np.log(by_block("host"))
    assert row["p"] == stats_p(d)
    lo = 100 * np.expm1(np.sort(d))  # the interval's ends are per-block changes (order statistics)
    assert np.isclose(lo, row["delta_low"]).any() and np.isclose(lo, row["delta_high"]).any()
    assert row["delta_pct"] == 100 * np.expm1(np.median(d))
    excludes_0 = row["delta_low"] > 0 or row["delta_high"] < 0
    assert excludes_0 == (row["p_adj"] < 0.05)


def stats_p(d: np.ndarray) -> float:
    from scipy.stats import quantile_test

    return float(quantile_test(d, q=0, p=0.5).pvalue)


def test_a_comparison_without_enough_complete_blocks_stays_unpaired():
    runs, metrics = tables()
    # vxlan's tcp_rr lost its runs of blocks 0-4: 5 complete blocks against host, below MIN_N
    lost = runs.filter((pl.col("scenario") == "vxlan") & (pl.col("test") == "tcp_rr") & (pl.col("block") < 5))
    runs = runs.with_columns(
        outcome=pl.when(pl.col("run_id").is_in(lost["run_id"].implode())).then(pl.lit("failed")).otherwise("outcome")
    )
    table = primary(runs, metrics, True)
    vxlan_rr = table.filter((pl.col("test") == "tcp_rr") & (pl.col("scenario") == "vxlan"))
    assert vxlan_rr["test_method"].item() != paired.TEST and vxlan_rr["n"].item() == 5
    assert (table.filter(pl.col("scenario") != "vxlan")["test_method"] == paired.TEST).all()


def test_the_method_text_says_which_comparisons_were_paired():
    from benchlib.report import summary

    runs, metrics = tables()
    assert summary.paired_text(primary(runs, metrics, False)) == ""
    text = summary.paired_text(primary(runs, metrics, True))
    assert text.startswith("Paired by block: 12 of 12 comparisons") and "unpaired" not in text
    lost = runs.filter((pl.col("scenario") == "vxlan") & (pl.col("test") == "tcp_rr") & (pl.col("block") < 5))
    runs = runs.filter(~pl.col("run_id").is_in(lost["run_id"].implode()))
    assert "The other 1 (fewer than 6 complete blocks" in summary.paired_text(primary(runs, metrics, True))
