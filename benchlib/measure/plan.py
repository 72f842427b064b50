"""Planning: what each environment of a campaign runs (its scenarios and tests), checked against
params.yaml and the environment definitions; its runs in blocks, and the campaign's identity (every
run's test parameters and scenario definition), which records and tables are checked against."""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel

from ..base.errors import ConfigError
from ..collectors import TestSpec
from ..records import layout, survey
from ..settings.campaign import EnvironmentOverride, Params
from ..settings.environment import Environment
from ..settings.identity import scenario_definition
from ..settings.loading import load_environment


class Plan(BaseModel):
    """What one environment will run: resolved scenarios and tests."""

    environment: Environment
    scenarios: list[str]
    tests: dict[str, TestSpec]
    pairs: set[tuple[str, str]] | None = None  # (scenario, test) to run; None: every scenario x every test

    def configurations(self, scenarios: list[str] | None = None) -> list[tuple[str, str]]:
        """(scenario, test) pairs to run, scenario by scenario in plan order."""
        return [
            (s, t)
            for s in (scenarios or self.scenarios)
            for t in self.tests
            if self.pairs is None or (s, t) in self.pairs
        ]

    def tools(self) -> list[str]:
        """The tools the plan's tests run, sorted."""
        return sorted({t.tool for t in self.tests.values()})


def plan_environment(params: Params, env_name: str) -> Plan:
    """Resolve an environment's scenarios and tests, failing with the offending key."""
    if env_name not in params.experiment.environments:
        raise ConfigError(
            f"{params.source}: experiment.environments: {env_name!r} is not listed; "
            f"listed: {params.experiment.environments}"
        )
    env = load_environment(env_name)
    override = params.environments.get(env_name, EnvironmentOverride())
    if override.matrix is not None:
        named = [(f"matrix[{i}].scenarios", e.scenarios) for i, e in enumerate(override.matrix)]
        scenarios = list(dict.fromkeys(s for e in override.matrix for s in e.scenarios))
        test_names = list(dict.fromkeys(t for e in override.matrix for t in e.tests))
        pairs = {(s, t) for e in override.matrix for s in e.scenarios for t in e.tests}
    else:
        scenarios = override.scenarios if override.scenarios is not None else list(env.scenarios)
        named = [("scenarios", scenarios)]
        test_names = override.tests if override.tests is not None else list(params.tests)
        pairs = None
    for key, names in named:
        unknown = [s for s in names if s not in env.scenarios]
        if unknown:
            raise ConfigError(
                f"{params.source}: environments.{env_name}.{key}: unknown scenario(s) {unknown}; "
                f"allowed: {sorted(env.scenarios)}"
            )
    if override.cpu_placement is not None:
        env = env.model_copy(update={"cpu_placement": override.cpu_placement})
        try:
            env.check_cpu_placement()
        except ValueError as exc:
            raise ConfigError(f"{params.source}: environments.{env_name}.{exc}") from None
    return Plan(environment=env, scenarios=scenarios, tests={t: params.tests[t] for t in test_names}, pairs=pairs)


def validate_all(params: Params) -> list[Plan]:
    plans = [plan_environment(params, env) for env in params.experiment.environments]
    scenarios = sorted({s for p in plans for s in p.scenarios})
    if params.analysis.baseline not in scenarios:
        raise ConfigError(
            f"{params.source}: analysis.baseline: {params.analysis.baseline!r} is not a scenario of any "
            f"environment; scenarios: {scenarios}"
        )
    for i, pair in enumerate(params.analysis.contrasts):
        unknown = [s for s in pair if s not in scenarios]
        if unknown:
            raise ConfigError(
                f"{params.source}: analysis.contrasts[{i}]: {unknown} not a scenario of any environment; "
                f"scenarios: {scenarios}"
            )
    for study, ours in params.analysis.reference_scenarios.items():
        # the kube-proxy side stands for a series: ours with the study's 4 and 1000 Services
        needed = [f"{ours}-4", f"{ours}-1000"] if study == "kube-proxy-iptables" else [ours]
        unknown = [s for s in needed if s not in scenarios]
        if unknown:
            raise ConfigError(
                f"{params.source}: analysis.reference_scenarios.{study}: {unknown} not a scenario of any "
                f"environment; scenarios: {scenarios}"
            )
    return plans


@dataclass(frozen=True)
class RunSpec:
    environment: str
    scenario: str
    test: str
    spec: TestSpec
    block: int  # 0-based; every configuration runs once per block
    order: int  # position in the environment's whole schedule
    # the scenario as the environment defines it (config.scenario_definition), kept in the record
    definition: dict | None = field(default=None, compare=False, repr=False)
    profiled: bool = False  # a CPU profile is recorded; never one of the measured runs

    @property
    def run_id(self) -> str:
        return layout.run_id(self.environment, self.scenario, self.test, self.block, self.profiled)


def schedule(
    plan: Plan,
    repetitions: int,
    seed: int,
    rounds_by: Callable[[str], str] | None = None,
    profile_runs: int = 0,
    kept_by: Callable[[str], int] | None = None,
) -> list[RunSpec]:
    """All runs of an environment in blocks: each block runs every configuration once, in a seeded order.

    Profiled run k of each configuration goes into block k (k < ``profile_runs``), shuffled among
    that block's measured runs, so that it sees the machine as they do while perf's load stays
    out of their numbers.

    Where scenarios stand side by side (the lab, ``rounds_by`` None), a block spans all of them in
    one shuffled order. Where switching costs minutes (a pod network on a cluster), ``rounds_by``
    names each scenario's switch (scenarios with the same one share it) and a block is a round: it
    visits every switch once, in a seeded order, and each of its scenarios once there, that
    scenario's tests shuffled. Drift then spreads over every comparison instead of falling between
    scenarios measured one after another.

    ``kept_by`` (with ``rounds_by``) counts the objects a scenario needs that outlive it (filler
    Services): a visit takes its scenarios in order of that count, up or down, whichever starts
    nearer the count the last visit ended on, so that each activation adds or deletes few. The
    direction then alternates from visit to visit, and no scenario keeps one place in them.
    """
    rng = random.Random(f"{seed}/{plan.environment.name}")
    definitions = {s: scenario_definition(plan.environment, s) for s in plan.scenarios}
    switches: dict[str, list[str]] = {}
    for s in plan.scenarios:
        switches.setdefault(rounds_by(s) if rounds_by else "", []).append(s)
    runs: list[RunSpec] = []
    kept = 0  # what the previous visit left (kept_by)
    for block in range(repetitions):
        visits = [plan.scenarios]
        if rounds_by is not None:
            keys = list(switches)
            rng.shuffle(keys)
            visits = []
            for key in keys:
                here = list(switches[key])
                rng.shuffle(here)
                if kept_by is not None:
                    here.sort(key=kept_by)  # stable: scenarios of one count stay shuffled
                    if abs(kept_by(here[-1]) - kept) < abs(kept_by(here[0]) - kept):
                        here.reverse()
                    kept = kept_by(here[-1])
                visits += [[s] for s in here]
        for scenarios in visits:
            configs = plan.configurations(scenarios)
            order = [(s, t, False) for s, t in configs]
            if block < profile_runs:
                order += [(s, t, True) for s, t in configs]
            rng.shuffle(order)
            for scenario, test, profiled in order:
                runs.append(
                    RunSpec(
                        plan.environment.name,
                        scenario,
                        test,
                        plan.tests[test],
                        block,
                        len(runs),
                        definitions[scenario],
                        profiled,
                    )
                )
    return runs


# Run until precise (experiment.precision): the blocks a campaign may add are fixed before any run
# (Experiment.looks); which of them run depends on the data. The plan holds them all (a campaign's
# identity does not change as it adds blocks); the runs expected are those up to the look the records
# reached.
def recorded_blocks(cdir: Path, runs: list[RunSpec]) -> int:
    """The blocks the records of ``runs`` reach: the highest recorded block + 1 (0 if none)."""
    return max((r.block + 1 for r in runs if layout.exists(cdir, r.run_id)), default=0)


def expected_runs(params: Params, runs: list[RunSpec], cdir: Path) -> list[RunSpec]:
    """The runs of one environment's schedule that its records should hold: every block up to the look
    its records reached (all of them without precision)."""
    exp = params.experiment
    if exp.precision is None:
        return runs
    horizon = exp.looks()[exp.look_of(recorded_blocks(cdir, runs)) - 1]
    return [r for r in runs if r.block < horizon]


def campaign_schedule(params: Params, plans: list[Plan] | None = None) -> list[RunSpec]:
    """Every run the campaign may hold, of every environment (with precision, up to the budget)."""
    e = params.experiment
    return [
        r
        for plan in (plans if plans is not None else validate_all(params))
        for r in schedule(plan, e.blocks_planned(), e.seed, profile_runs=e.profile_runs)
    ]


def planned_params(params: Params) -> dict[str, dict]:
    """Run id -> its test parameters, for every run of every environment: a campaign's identity."""
    return {r.run_id: r.spec.test_params() for r in campaign_schedule(params)}


def planned_definitions(params: Params) -> dict[str, dict]:
    """Run id -> the definition of its scenario, for every run of every environment: the rest of a
    campaign's identity."""
    return {r.run_id: r.definition for r in campaign_schedule(params) if r.definition is not None}


def plan_digest(params: Params) -> str:
    """A digest of the campaign's plan (every run's test parameters and scenario definition): which
    plan the tidy tables were parsed with, so that the analysis refuses tables of another plan."""
    plan = {"params": planned_params(params), "definitions": planned_definitions(params)}
    return hashlib.sha256(json.dumps(plan, sort_keys=True, default=str).encode()).hexdigest()


def check_same_plan(params: Params, runs: list[RunSpec], cdir: Path) -> int:
    """Refuse to resume a campaign whose tests or scenarios changed: its records would mix two settings.
    Returns how many of its records predate recorded scenario definitions (not compared)."""
    unchecked = 0
    for run in runs:
        meta = survey.recorded_meta(cdir, run.run_id) if layout.exists(cdir, run.run_id) else None
        if meta is None:
            continue
        recorded = meta.get("test_params")
        changes = survey.param_changes(recorded, run.spec.test_params()) if isinstance(recorded, dict) else []
        if changes:
            raise ConfigError(
                f"{params.source}: tests.{run.test}: campaign {params.experiment.campaign} recorded it with other "
                f"parameters ({cdir / run.run_id}): {'; '.join(changes)}. A changed test is a new campaign: "
                "set a new experiment.campaign (or restore the test)"
            )
        definition = survey.recorded_definition(meta)
        if definition is None or run.definition is None:
            unchecked += 1
            continue
        changes = survey.definition_changes(definition, run.definition, run.scenario)
        if changes:
            raise ConfigError(
                f"{survey.environment_file(run.environment)}: scenarios.{run.scenario}: campaign "
                f"{params.experiment.campaign} recorded it with another definition ({cdir / run.run_id}): "
                f"{'; '.join(changes)}. A changed scenario is a new campaign: set a new experiment.campaign "
                "(or restore the scenario)"
            )
    return unchecked
