"""Planning: what each environment of a campaign runs (its scenarios and tests), checked against
params.yaml and the environment definitions."""

from __future__ import annotations

from pydantic import BaseModel

from .collectors import TestSpec
from .config import Environment, EnvironmentOverride, Params, load_environment
from .errors import ConfigError


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
    return plans
