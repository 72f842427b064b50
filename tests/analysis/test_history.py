"""History across campaigns, on real recorded lab runs: three campaigns cut from one real campaign, the
third with one scenario made slower; only that change is marked, whatever order they are given in."""

import datetime as dt

import polars as pl

from benchlib.analysis import history
from benchlib.analysis.compare import Campaign
from benchlib.report import history as output
from benchlib.vocabulary import schema
from tests.conftest import FIXTURES

CAMPAIGN = FIXTURES / "tidy" / "lab-default-003"  # real lab runs: 4 scenarios x 4 tests x 10 blocks


def campaign(name: str, blocks: range, days: int, slower: str | None = None) -> Campaign:
    """The real campaign's runs of ``blocks`` as campaign ``name``, ``days`` later; ``slower``: that
    scenario's rates 20 % lower."""
    runs, metrics = schema.read_runs(CAMPAIGN / "runs.parquet"), schema.read_metrics(CAMPAIGN / "metrics.parquet")
    runs = runs.filter(pl.col("block").is_in(list(blocks))).with_columns(
        campaign=pl.lit(name), started_at=pl.col("started_at") + dt.timedelta(days=days)
    )
    metrics = metrics.filter(pl.col("run_id").is_in(runs["run_id"].implode())).with_columns(campaign=pl.lit(name))
    if slower:
        hit = (pl.col("scenario") == slower) & pl.col("metric").is_in(["transaction_rate", "connection_rate"])
        metrics = metrics.with_columns(value=pl.when(hit).then(pl.col("value") * 0.8).otherwise("value"))
    return Campaign(name, runs, metrics, pl.DataFrame())


def test_a_change_is_marked_where_one_campaign_differs_from_the_one_before():
    one, two, three = (
        campaign("c1", range(0, 10), 0),
        campaign("c2", range(0, 10), 1),
        campaign("c3", range(0, 10), 2, slower="vxlan"),
    )
    table = history.line_up([three, one, two])  # any order in: the order measured out
    assert table.columns == history.COLUMNS
    order = table.unique("campaign").sort("started_at")["campaign"].to_list()
    assert order == ["c1", "c2", "c3"]
    assert len(table) == 3 * 16  # 4 scenarios x 4 tests, one headline metric each, per campaign
    assert table.filter(pl.col("campaign") == "c1")["previous"].is_null().all()
    assert set(table.filter(pl.col("campaign") == "c3")["previous"]) == {"c2"}
    # the same runs again: nothing changed; then vxlan's rates, 20 % lower: changed, and only they
    assert not table.filter(pl.col("campaign") == "c2")["changed"].any()
    changed = table.filter(pl.col("changed"))
    assert set(changed["campaign"]) == {"c3"} and set(changed["scenario"]) == {"vxlan"}
    assert set(changed["test"]) == {"tcp_rr", "tcp_crr"}
    assert ((changed["delta_pct"] + 20).abs() < 1e-6).all() and (changed["delta_high"] < 0).all()
    # the environment filter: another environment has nothing
    assert history.line_up([one, two], environment="elsewhere").is_empty()


def test_the_text_lines_up_the_campaigns_and_points_at_the_changes():
    table = history.line_up([campaign("c1", range(0, 10), 0), campaign("c2", range(0, 10), 1, slower="bridge")])
    text = output.text(table)
    assert text.startswith("benchlib history: 2 campaign(s), in the order measured: c1 (")
    assert "Changes against the campaign before (significant and beyond the threshold): 2\n" in text
    block = text.split("local-lab tcp_rr bridge: transaction_rate")[1].split("\n\n")[0]
    assert "vs c1: -20.0 % [" in block and "worse" in block and output.CHANGED in block
    assert output.CHANGED not in text.split("local-lab tcp_rr host: ")[1].split("\n\n")[0]
    rows = output.to_json(table)
    assert len(rows) == 32 and rows[0]["started_at"].endswith("+0000")
