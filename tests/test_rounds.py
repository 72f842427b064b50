"""Rounds on a target that switches scenarios: each block visits every pod network once, in a seeded
order, and each of its scenarios once there; the lab keeps its side-by-side blocks."""

import itertools
from types import SimpleNamespace

import pytest

from benchlib.measure import runner
from benchlib.measure.plan import plan_environment, schedule
from benchlib.settings.loading import load_params
from benchlib.targets.kubernetes import KubernetesTarget
from tests.conftest import REPO

PRESET = REPO / "pipelines/local-cilium/params-calico.yaml"  # three CNIs, across nodes and on one node


@pytest.fixture(scope="module")
def cluster_plan():
    params = load_params(PRESET)
    env = next(e for e in params.environments if e.startswith("local-cilium"))
    plan = plan_environment(params, env)
    target = KubernetesTarget(plan.environment, plan.scenarios)  # no cluster needed before prepare()
    return plan, target


def visits(runs):
    """Consecutive runs of one (block, scenario), as (block, scenario) in order."""
    return [key for key, _ in itertools.groupby(runs, key=lambda r: (r.block, r.scenario))]


def test_every_round_visits_each_pod_network_once_and_each_scenario_once(cluster_plan):
    plan, target = cluster_plan
    networks = {s: target.switch_of(s) for s in plan.scenarios}
    assert 1 < len(set(networks.values())) < len(plan.scenarios)  # the preset shares networks
    runs = schedule(plan, 4, seed=3, rounds_by=target.switch_of)
    assert [r.block for r in runs] == sorted(r.block for r in runs)  # rounds follow each other
    seen = visits(runs)
    assert len(seen) == len(set(seen)) == 4 * len(plan.scenarios)  # a scenario's runs of a round together
    for block in range(4):
        order = [networks[s] for b, s in seen if b == block]
        switches = [n for n, _ in itertools.groupby(order)]
        assert sorted(switches) == sorted(set(networks.values()))  # each network once, its scenarios together
    # the same runs as side by side, only in another order
    assert sorted(r.run_id for r in runs) == sorted(r.run_id for r in schedule(plan, 4, seed=3))


def test_the_round_order_is_seeded(cluster_plan):
    plan, target = cluster_plan
    first = schedule(plan, 6, seed=3, rounds_by=target.switch_of)
    assert first == schedule(plan, 6, seed=3, rounds_by=target.switch_of)
    networks = [[target.switch_of(s) for b, s in visits(first) if b == block] for block in range(6)]
    assert len({tuple(dict.fromkeys(n)) for n in networks}) > 1  # rounds differ in the order of networks
    assert visits(first) != visits(schedule(plan, 6, seed=4, rounds_by=target.switch_of))


def test_a_visit_orders_its_service_counts_so_that_each_activation_changes_few_fillers():
    params = load_params(REPO / "pipelines/local-cilium/params-calico-services.yaml")  # 4, 1000, 5000 Services
    plan = plan_environment(params, "local-cilium")
    target = KubernetesTarget(plan.environment, plan.scenarios)
    runs = runner.schedule_on(target, plan, 4, seed=3, profile_runs=0)
    order = [s for _, s in visits(runs)]
    fillers = [target.kept_objects(s) for s in order]
    assert sorted(set(fillers)) == [3, 999, 4999]
    changed = sum(abs(b - a) for a, b in itertools.pairwise([0, *fillers]))
    # each visit goes up or down once: about 5000 fillers created or deleted per pod network
    visits_made = 4 * len({target.switch_of(s) for s in order})
    assert changed == 4999 + (visits_made - 1) * 4996  # the first from none
    # the smallest count comes first in some visits and last in others
    firsts = {order[i] for i in range(0, len(order), 3)}
    assert any(s.endswith("-4") for s in firsts) and any(s.endswith("-5000") for s in firsts)
    # in another order, the same runs
    assert sorted(r.run_id for r in runs) == sorted(r.run_id for r in schedule(plan, 4, seed=3))


def test_profiled_runs_stay_in_their_round(cluster_plan):
    plan, target = cluster_plan
    runs = schedule(plan, 3, seed=1, rounds_by=target.switch_of, profile_runs=1)
    profiled = [r for r in runs if r.profiled]
    assert len(profiled) == len(plan.configurations()) and {r.block for r in profiled} == {0}
    assert len(visits(runs)) == 3 * len(plan.scenarios)


def test_the_lab_schedule_is_side_by_side():
    params = load_params(REPO / "params.yaml")
    plan = plan_environment(params, "local-lab")
    runs = schedule(plan, 2, seed=1)
    # scenarios alternate within a block: far more visits than scenarios
    assert len(visits(runs)) > 2 * len(plan.scenarios)


def test_a_round_that_returns_to_a_scenario_is_refused_and_a_repeated_scenario_not_reactivated(cluster_plan):
    plan, target = cluster_plan
    a, b = plan.scenarios[:2]
    runs = {
        (block, s): next(r for r in schedule(plan, 2, seed=1) if r.block == block and r.scenario == s)
        for block in (0, 1)
        for s in (a, b)
    }
    session = runner._Session(stack=None)
    assert runner._needs_activation(target, session, runs[0, a])
    assert not runner._needs_activation(target, session, runs[0, a])  # the same visit
    assert runner._needs_activation(target, session, runs[0, b])
    assert not runner._needs_activation(target, session, runs[1, b])  # the next round opens where it was
    assert runner._needs_activation(target, session, runs[1, a])
    with pytest.raises(RuntimeError, match=f"returns to scenario {b} in round 1"):
        runner._needs_activation(target, session, runs[1, b])
    side_by_side = SimpleNamespace(interleaves_scenarios=True, kind="lab")
    session = runner._Session(stack=None)
    assert [runner._needs_activation(side_by_side, session, runs[k]) for k in [(0, a), (0, b), (1, a)]] == [
        True,
        True,
        False,
    ]
