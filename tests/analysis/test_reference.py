"""Published reference data and its derived claims."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchlib.analysis import project_root, reference
from tests.support.analysis_tables import make_tables


@pytest.fixture(scope="module")
def scenarios():
    return reference.load_eks_scenarios()


def test_reference_data_keeps_provenance():
    readme = (project_root() / "data/reference/README.md").read_text()
    assert "VPC CNI vs Cilium CNI Performance Comparison Benchmark" in readme
    assert "Individual repetitions were not" in readme


def test_every_reference_metric_has_a_direction(scenarios):
    assert set(scenarios["metric"]) <= set(reference.EKS_HIGHER_IS_BETTER)


def test_relative_changes_vs_a(scenarios):
    changes = reference.eks_relative_changes(scenarios)
    ch = {(r["scenario"], r["metric"]): r for r in changes.iter_rows(named=True)}
    assert ch[("B", "tcp_throughput")]["change_pct"] == pytest.approx(100 * (12.34 / 12.41 - 1))
    assert ch[("B", "tcp_throughput")]["direction"] == "worse"
    assert ch[("E", "pod_rtt")]["change_pct"] == pytest.approx(100 * (3135 / 4894 - 1))
    assert ch[("E", "pod_rtt")]["direction"] == "better"
    assert ch[("D", "udp_throughput")]["direction"] == "same"
    assert "agent_memory" not in set(changes["metric"])  # A has no agent
    assert len(ch) == len(changes) == 4 * 12


def test_service_scaling_growth():
    g = reference.eks_service_scaling_growth(reference.load_eks_service_scaling())
    row = g.filter(datapath="kube-proxy-iptables", metric="iptables_nat_rules", services_to=1000)
    assert row["change_pct"].item() == pytest.approx(100 * (10059 / 99 - 1))
    cil = g.filter(datapath="cilium-ebpf", metric="http_p99_at_1000qps")
    assert cil["services_to"].to_list() == [104]  # not published for 1000 services
    assert cil["change_pct"].item() == pytest.approx(100 * (3.64 / 3.94 - 1))


def test_side_by_side_ours_next_to_theirs(scenarios):
    base = np.linspace(39.5, 40.5, 8)
    runs, metrics = make_tables(
        {
            ("veth-routed", "tcp_stream_1"): {("throughput", "none"): base},
            ("vxlan", "tcp_stream_1"): {("throughput", "none"): base * 0.9},
        }
    )
    both = reference.side_by_side(metrics, runs, reference.eks_relative_changes(scenarios))
    both = {r["claim"]: r for r in both.iter_rows(named=True)}
    tput = both["TCP throughput: VXLAN overlay vs routed pods"]
    assert tput["ours_delta_pct"] == pytest.approx(-10.0)
    assert tput["ours_verdict"].endswith("worse")
    assert tput["theirs_change_pct"] == pytest.approx(100 * (12.34 / 12.41 - 1))
    rtt = both["Round-trip latency: VXLAN overlay vs routed pods"]
    assert rtt["ours_verdict"] == "not measured" and math.isnan(rtt["ours_delta_pct"])
    assert rtt["theirs_change_pct"] == pytest.approx(100 * (4955 / 4894 - 1))


def test_scaling_growth_pairs_with_our_kube_proxy_scenarios():
    from benchlib.analysis import reference

    changes = reference.eks_scaling_changes(reference.load_eks_service_scaling())
    row = changes.filter(metric="conn_setup_time_connection_close").row(0, named=True)
    assert (row["scenario"], row["baseline"]) == ("kube-proxy-iptables-1000", "kube-proxy-iptables-4")
    assert row["change_pct"] == pytest.approx(100 * (190 / 164 - 1))
    assert row["direction"] == "worse"


def test_every_claim_names_what_the_study_published_and_what_a_shipped_campaign_measures():
    """A claim with a misspelt scenario, test or metric would read "not measured" for ever."""
    import yaml

    from benchlib.settings.loading import load_environment
    from benchlib.vocabulary.schema import METRICS

    published = reference.published_changes()
    presets = list((project_root() / "pipelines").glob("*/params*.yaml")) + [project_root() / "params.yaml"]
    campaigns = []  # (scenarios, tests) each preset measures
    for preset in presets:
        params = yaml.safe_load(preset.read_text())
        for env_name in params["experiment"]["environments"]:
            scenarios = set(load_environment(env_name).scenarios)
            campaigns.append((scenarios, set(params["tests"])))
    for pair in reference.LIKE_FOR_LIKE:
        theirs = published.filter(
            metric=pair["theirs_metric"], scenario=pair["theirs_scenario"], baseline=pair["theirs_baseline"]
        )
        assert len(theirs) == 1, pair["claim"]
        assert pair["ours_metric"] in METRICS, pair["claim"]
        assert any(
            {pair["ours_scenario"], pair["ours_baseline"]} <= scenarios and pair["ours_test"] in tests
            for scenarios, tests in campaigns
        ), f"{pair['claim']}: no shipped preset measures it"


def test_a_presets_stand_ins_name_published_changes_and_scenarios_it_measures():
    """A preset's own stand-ins (analysis.reference_scenarios) replace the local Cilium claims, and
    each claim of a test the preset runs pairs two scenarios it plans with a published change."""
    from benchlib.measure.plan import validate_all
    from benchlib.settings.loading import load_params

    published = reference.published_changes()
    presets = [
        (path, load_params(path))
        for path in sorted((project_root() / "pipelines").glob("*/params*.yaml"))
        if "reference_scenarios" in path.read_text()
    ]
    assert presets, "no preset names reference stand-ins"
    for path, params in presets:
        planned = {(s, t) for plan in validate_all(params) for s, t in plan.configurations()}
        claims = reference.like_for_like(params.analysis.reference_scenarios)
        assert not [c for c in claims if c in reference.LOCAL_CILIUM_CLAIMS], path
        own = [c for c in claims if c["claim"].endswith("(this campaign)")]
        assert own, path
        for c in own:
            theirs = published.filter(
                metric=c["theirs_metric"], scenario=c["theirs_scenario"], baseline=c["theirs_baseline"]
            )
            assert len(theirs) == 1, c["claim"]
        measured = [
            c for c in own if {(c["ours_scenario"], c["ours_test"]), (c["ours_baseline"], c["ours_test"])} <= planned
        ]
        assert measured, f"{path}: none of its reference claims is measured"
