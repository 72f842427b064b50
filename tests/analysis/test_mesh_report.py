"""The mesh section of the report on a real campaign: tests/fixtures/tidy/lab-mesh-short-001/ holds the tidy
tables `benchlib parse` wrote for a short run of the mesh preset's scenarios on this machine's lab (n = 6;
fortio at 1000 req/s with keep-alive and Connection: close, netperf TCP_RR), the machine shared and loaded."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from statsmodels.stats.multitest import multipletests

from benchlib.analysis import load_tables, mesh, normalize, stats
from benchlib.report import format as fmt, mesh as mesh_figures, render as report
from tests.support.analysis_tables import analysed, settings

FIXTURE = "tests/fixtures/tidy/lab-mesh-short-001"
PRESET = "pipelines/local-lab/params-mesh.yaml"


@pytest.fixture(scope="module")
def campaign():
    s = settings(PRESET)
    p = s.model_dump()
    runs, metrics = load_tables(f"{FIXTURE}/runs.parquet", f"{FIXTURE}/metrics.parquet")
    values = normalize.with_cpu_at_target(
        metrics, runs, per_transactions=p["rr_per_transactions"], per_requests=p["http_per_requests"]
    )
    summary = stats.summarize(values, runs, alpha=p["alpha"])
    compared = mesh.comparisons(values, runs, s)
    return {
        "p": p,
        "runs": runs,
        "values": values,
        "summary": summary,
        "compared": compared,
        "ok": stats.ok_values(values, runs),
    }


def test_the_section_is_there_only_with_proxies_on_the_path(campaign):
    assert mesh.has_mesh(campaign["runs"])
    default_runs, _ = load_tables(
        "tests/fixtures/tidy/lab-default-002/runs.parquet", "tests/fixtures/tidy/lab-default-002/metrics.parquet"
    )
    assert not mesh.has_mesh(default_runs)
    hops = dict(mesh.paths(campaign["runs"]).select("scenario", "proxy_hops").iter_rows())
    assert hops == {"veth-routed": 0, "proxy-server": 1, "proxy-both": 2, "proxy-both-mtls": 2, "node-proxy-mtls": 2}


def test_ladder_has_each_percentile_with_its_ci_and_the_p99_range(campaign):
    ladder = mesh.ladder(campaign["summary"], campaign["runs"], campaign["values"])
    ok = campaign["ok"]
    for (test, scenario), g in ladder.group_by("test", "scenario"):
        http = test.startswith("http")
        assert g["percentile"].to_list() == (["p50", "p90", "p99", "p99.9"] if http else ["p50", "p90", "p99"])
        # each run's percentiles rise with the percentile, so their medians over runs do too
        assert g["median"].is_sorted()
        assert (g["ci_low"] <= g["median"]).all() and (g["median"] <= g["ci_high"]).all()
        p99 = g.filter(pl.col("metric").is_in(mesh.P99)).row(0, named=True)
        x = ok.filter(test=test, scenario=scenario, metric=p99["metric"])["value"].to_numpy()
        assert (p99["range_min"], p99["range_max"]) == (x.min(), x.max())
        assert p99["median"] == np.median(x) and p99["n"] == len(x) == 6
        assert g.filter(~pl.col("metric").is_in(mesh.P99))["range_min"].is_null().all()


def test_comparisons_are_a_family_of_their_own_corrected_by_fdr(campaign):
    c, p = campaign["compared"], campaign["p"]
    assert set(c["correction"]) == {"FDR (Benjamini-Hochberg)"}
    tested = c.filter(pl.col("p").is_not_nan())
    assert tested["p_adj"].to_numpy() == pytest.approx(multipletests(tested["p"].to_numpy(), method="fdr_bh")[1])
    latency = c.filter(pl.col("metric").is_in(mesh.LADDER_METRICS))
    pairs = set(latency.select("scenario", "baseline").unique().iter_rows())
    proxied = {"proxy-server", "proxy-both", "proxy-both-mtls", "node-proxy-mtls"}
    assert pairs == {(s, p["baseline"]) for s in proxied} | {tuple(x) for x in p["contrasts"]}
    # the baseline has no proxy: its proxy CPU is compared only in the contrasts
    cpu = c.filter(metric=normalize.PROXY_CPU_AT_TARGET)
    assert set(cpu.select("scenario", "baseline").unique().iter_rows()) == {tuple(x) for x in p["contrasts"]}
    assert set(cpu["side"]) == {"total"}


def test_cost_per_hop_is_what_each_scenario_adds_over_its_reference(campaign):
    s, p = campaign["summary"], campaign["p"]
    cost = mesh.cost_per_hop(s, campaign["compared"], campaign["runs"], p["baseline"], p["contrasts"])

    def median(scenario, test, metric):
        side = "total" if metric == normalize.PROXY_CPU_AT_TARGET else "none"
        return s.filter(scenario=scenario, test=test, metric=metric, side=side)["median"].item()

    assert set(cost.select("scenario", "reference").unique().iter_rows()) == {
        (x, p["baseline"]) for x in ("proxy-server", "proxy-both", "proxy-both-mtls", "node-proxy-mtls")
    } | {tuple(x) for x in p["contrasts"]}
    for r in cost.iter_rows(named=True):
        ref = (
            0.0
            if r["hops_reference"] == 0 and r["metric"] == normalize.PROXY_CPU_AT_TARGET
            else median(r["reference"], r["test"], r["metric"])
        )
        assert r["added"] == pytest.approx(median(r["scenario"], r["test"], r["metric"]) - ref)
        if r["hops"] == r["hops_reference"]:
            assert r["added_per_hop"] is None
        else:
            assert r["added_per_hop"] == pytest.approx(r["added"] / (r["hops"] - r["hops_reference"]))
        assert r["verdict"]  # every row says what the comparison found
    # proxies cost CPU: every proxied scenario adds some over 0 hops
    assert (cost.filter(metric=normalize.PROXY_CPU_AT_TARGET, reference=p["baseline"])["added"] > 0).all()


def test_load_shortfall_flags_runs_below_95_percent_of_the_offered_rate(campaign):
    load = mesh.load_shortfall(campaign["values"], campaign["runs"])
    runs, ok = campaign["runs"], campaign["ok"]
    assert set(load["test"]) == {"http_1000", "http_1000_close"}  # paced HTTP tests only
    for r in load.iter_rows(named=True):
        achieved = ok.filter(test=r["test"], scenario=r["scenario"], metric="http_qps")["value"].to_numpy()
        offered = runs.filter(test=r["test"])["offered_qps"].unique().item()
        short = int((achieved < 0.95 * offered).sum())
        assert (r["offered_qps"], r["short_runs"], r["n"]) == (offered, short, len(achieved))
        assert (r["flag"] != "") == (short > 0)


def test_figures_show_every_scenario(campaign):
    ladder = mesh.ladder(campaign["summary"], campaign["runs"], campaign["values"])
    fig = mesh_figures.ladder_figure(ladder, "http_1000")
    assert len(fig.data) == 5 and all(len(t.y) == 4 for t in fig.data)
    assert any("(2 hops, mTLS)" in t.name for t in fig.data)
    bars = mesh_figures.proxy_cpu_figure(campaign["summary"], campaign["runs"], "http_1000")
    assert [t.name for t in bars.data] == ["client", "server"] and len(bars.data[0].x) == 4
    with pytest.raises(ValueError, match="no proxy CPU"):
        mesh_figures.proxy_cpu_figure(campaign["summary"], campaign["runs"], "no-such-test")


def test_figure_captions_state_the_medians_intervals_n_and_correction(campaign):
    """A caption a post can take as it is: every point's median with its 95 % CI and n, and how many
    of the mesh family's comparisons of the drawn values are significant after its correction."""
    ladder = mesh.ladder(campaign["summary"], campaign["runs"], campaign["values"])
    compared, alpha = campaign["compared"], campaign["p"]["alpha"]
    for test in ("http_1000", "tcp_rr"):
        caption = mesh_figures.ladder_figure(ladder, test, compared).layout.meta["caption"]
        for r in ladder.filter(test=test).iter_rows(named=True):
            point = f"{r['percentile']} {fmt.caption(r['median'])} [{fmt.caption(r['ci_low'])}, "
            assert point + f"{fmt.caption(r['ci_high'])}]" in caption, (point, caption)
            assert f"{r['path']}: " in caption
        assert "n = 6" in caption and "95 % CI" in caption
        rows = compared.filter(pl.col("test") == test, pl.col("metric").is_in(mesh.LADDER_METRICS))
        significant = rows.filter(pl.col("p_adj") < alpha, pl.col("verdict").str.contains(r"(better|worse)$"))
        assert f"{len(significant)} of the {len(rows)} comparisons" in caption
        assert "significant after FDR (Benjamini-Hochberg)" in caption
    cpu = mesh_figures.proxy_cpu_figure(campaign["summary"], campaign["runs"], "http_1000", compared).layout.meta[
        "caption"
    ]
    server = campaign["summary"].filter(
        test="http_1000", scenario="proxy-server", metric=normalize.PROXY_CPU_AT_TARGET, side="server"
    )
    assert f"proxy-server (1 hop): client 0 [0, 0], server {fmt.caption(server['median'][0])} [" in cpu
    assert "after FDR (Benjamini-Hochberg)" in cpu
    # without comparisons, the values alone
    assert "significant" not in mesh_figures.ladder_figure(ladder, "tcp_rr").layout.meta["caption"]


@pytest.mark.slow
def test_the_report_has_the_mesh_section(tmp_path):
    runs, metrics = load_tables(f"{FIXTURE}/runs.parquet", f"{FIXTURE}/metrics.parquet")
    analysis_dir, result = analysed(runs, metrics, tmp_path, settings(PRESET))
    out = tmp_path / "reports"
    html = report.build_report(
        [f"notebooks/{n}" for n in report.NOTEBOOKS], out, {"analysis_dir": str(analysis_dir), "out_dir": str(out)}
    ).read_text()
    assert '"ename"' not in "".join(p.read_text() for p in (out / "notebooks").glob("*.ipynb"))
    for heading in ("Service-mesh proxy hops", "Latency percentiles per hop count", "Cost per hop"):
        assert f'id="{heading.replace(" ", "-")}"' in html
    assert "FDR (Benjamini-Hochberg)" in html
    for name in ("mesh_ladder_http_1000", "mesh_ladder_tcp_rr", "mesh_proxy_cpu_http_1000"):
        assert (out / "figures" / f"{name}.svg").stat().st_size > 1000
    assert result.metrics_json()["baseline"] == "veth-routed"


def test_sized_paths_only_where_a_scenario_set_sizes(campaign):
    runs = campaign["runs"]
    assert not mesh.has_sized_datapath(runs)
    big = runs.with_columns(
        gso_gro_max_size=pl.when(pl.col("scenario") == "proxy-server").then(pl.lit(185000)),
        big_tcp=pl.col("scenario") == "proxy-server",
    )
    assert mesh.has_sized_datapath(big)
    assert mesh.sized_paths(big).filter(big_tcp=True)["scenario"].to_list() == ["proxy-server"]


def test_proxy_cpu_per_proxy_stands_beside_istios_published_figure(campaign):
    from benchlib.analysis import reference

    s, p, runs = campaign["summary"], campaign["p"], campaign["runs"]
    istio = reference.load_istio_proxy_cpu()
    assert dict(istio.select("proxy", "vcpu_per_1000_rps").iter_rows()) == {
        "sidecar": 0.20,
        "waypoint": 0.25,
        "ztunnel": 0.06,
    }
    beside = mesh.beside_istio(s, runs, istio, p["http_per_requests"])
    assert set(beside["test"]) == {"http_1000", "http_1000_close"}  # HTTP only, the kind Istio published
    for r in beside.iter_rows(named=True):
        total = s.filter(test=r["test"], scenario=r["scenario"], metric=normalize.PROXY_CPU_AT_TARGET, side="total")[
            "median"
        ].item()
        # % of a core per http_per_requests req/s, over the scenario's proxies -> vCPU per proxy per 1000 req/s
        assert r["vcpu_per_proxy"] == pytest.approx(total / 100 * 1000 / p["http_per_requests"] / r["proxy_hops"])
        assert r["ci_low"] <= r["vcpu_per_proxy"] <= r["ci_high"]
        assert r["istio_vcpu"] == (0.06 if r["scenario"] == "node-proxy-mtls" else 0.20)
