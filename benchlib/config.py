"""params.yaml and the environment definitions -> typed, validated models.

Every error names the file and the key (e.g. ``params.yaml: tests.tcp_rr.duration_s``)
and, where the choice is closed, the allowed values.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator



def project_root() -> Path:
    """The project the command works on: the nearest directory holding dvc.yaml
    upwards from the working directory (dvc runs stages there), else the checkout
    this package lives in."""
    for d in (Path.cwd(), *Path.cwd().parents):
        if (d / "dvc.yaml").exists():
            return d
    return Path(__file__).resolve().parent.parent

NAME_RE = r"^[a-z0-9][a-z0-9_.-]*$"


class ConfigError(ValueError):
    """params.yaml or an environment definition is invalid."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TestSpec(_Strict):
    """One test: a tool invocation with its parameters."""

    tool: Literal["netperf"]
    kind: Literal["TCP_STREAM", "TCP_RR", "TCP_CRR"]
    duration_s: float = Field(gt=0, le=3600, description="length of one run")
    streams: int = Field(1, ge=1, le=256, description="parallel instances, results summed")
    message_size: int | None = Field(
        None, gt=0, description="TCP_STREAM send size, or RR/CRR request and response size (bytes)")
    timeout_s: float | None = Field(None, gt=0, description="kill the run after this; default duration + 30 s")

    @model_validator(mode="after")
    def _whole_seconds(self) -> "TestSpec":
        if self.tool == "netperf" and self.duration_s != int(self.duration_s):
            raise ValueError(f"duration_s: netperf runs whole seconds, got {self.duration_s}")
        return self

    @property
    def run_timeout_s(self) -> float:
        return self.timeout_s if self.timeout_s is not None else self.duration_s + 30


class Experiment(_Strict):
    campaign: str = Field(pattern=NAME_RE, description="names the raw data; change it to measure anew")
    environments: list[str] = Field(min_length=1)
    repetitions: int = Field(ge=1, le=1000, description="blocks: every configuration runs once per block")
    seed: int = 0
    cpu_trim_s: float = Field(0.5, ge=0, description="CPU window starts this long after the tool, ends this long before")
    retries: int = Field(1, ge=0, le=10, description="extra attempts for a failed run")


class EnvironmentOverride(_Strict):
    """Per-environment choice of scenarios and tests, in params.yaml."""

    scenarios: list[str] | None = None
    tests: list[str] | None = None


class Analysis(_Strict):
    """Parameters of the analysis notebooks (passed to papermill as they are)."""

    baseline: str = Field("host", description="scenario every other scenario is compared with")
    alpha: float = Field(0.05, gt=0, lt=1)
    correction: Literal["holm", "fdr_bh"] = Field("holm", description="holm for a report, fdr_bh (FDR) for sweeps")
    cpu_target_gbps: float = Field(100.0, gt=0, description="stream tests: CPU % needed for this throughput")
    rr_per_transactions: float = Field(10_000, gt=0, description="TCP_RR: CPU % per this many transactions/s")
    crr_per_connections: float = Field(10_000, gt=0, description="TCP_CRR: CPU % per this many connections/s")
    noise_band_pct: float | dict[str, float] = Field(
        2.0, description="changes inside +/- this % are 'negligible'; a number or {metric: %, default: %}")
    family_metrics: list[str] = Field(
        ["throughput", "transaction_rate", "connection_rate", "latency_p50", "latency_p99", "cpu_pct_at_target"],
        min_length=1, description="metrics whose comparisons form the corrected family")
    seed: int = Field(0, description="bootstrap seed")

    @field_validator("family_metrics")
    @classmethod
    def _known_metrics(cls, names: list[str]) -> list[str]:
        from .analysis.normalize import CPU_METRICS
        from .schema import METRICS
        unknown = [n for n in names if n not in METRICS and n not in CPU_METRICS]
        if unknown:
            raise ValueError(f"unknown metric(s) {unknown}; allowed: {sorted(METRICS) + sorted(CPU_METRICS)}")
        return names


class Report(_Strict):
    title: str = "Container network benchmark"


class Params(_Strict):
    experiment: Experiment
    tests: dict[str, TestSpec] = Field(min_length=1)
    environments: dict[str, EnvironmentOverride] = {}
    analysis: Analysis = Analysis()
    report: Report = Report()

    @field_validator("tests")
    @classmethod
    def _test_names(cls, tests: dict) -> dict:
        for name in tests:
            if not re.match(NAME_RE, name):
                raise ValueError(f"test name {name!r} must match {NAME_RE}")
        return tests

    @model_validator(mode="after")
    def _references(self) -> "Params":
        trim = self.experiment.cpu_trim_s
        for name, test in self.tests.items():
            if 2 * trim >= test.duration_s:
                raise ValueError(f"tests.{name}.duration_s: {test.duration_s} s leaves no CPU window "
                                 f"after trimming experiment.cpu_trim_s={trim} s at both ends")
        for env, override in self.environments.items():
            for t in override.tests or []:
                if t not in self.tests:
                    raise ValueError(
                        f"environments.{env}.tests: unknown test {t!r}; defined tests: {sorted(self.tests)}")
        return self


class Scenario(_Strict):
    description: str
    topology: Literal["host", "veth-routed", "bridge", "vxlan"] | None = None
    maps_to: str = ""
    mtu: int = Field(1500, ge=576, le=65535)


class CpuPlacement(_Strict):
    client: list[int] = Field(min_length=1)
    server: list[int] = Field(min_length=1)

    @model_validator(mode="after")
    def _disjoint(self) -> "CpuPlacement":
        if set(self.client) & set(self.server):
            raise ValueError(f"client CPUs {self.client} and server CPUs {self.server} overlap")
        return self


class Environment(_Strict):
    name: str
    description: str
    target: Literal["lab"]
    cpus: CpuPlacement | None = None
    scenarios: dict[str, Scenario] = Field(min_length=1)


def _format(exc: ValidationError, source: str) -> str:
    lines = [f"{source}: invalid"]
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        lines.append(f"  {key}: {msg}" if key else f"  {msg}")
    return "\n".join(lines)


def _load_yaml(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def load_params(path: Path | str | None = None) -> Params:
    path = Path(path) if path else project_root() / "params.yaml"
    try:
        return Params.model_validate(_load_yaml(path))
    except ValidationError as exc:
        raise ConfigError(_format(exc, path.name)) from None


def environment_dir(name: str) -> Path:
    return project_root() / "pipelines" / name


def load_environment(name: str) -> Environment:
    path = environment_dir(name) / "environment.yaml"
    if not path.exists():
        known = sorted(p.parent.name for p in (project_root() / "pipelines").glob("*/environment.yaml"))
        raise ConfigError(f"environment {name!r}: {path} not found; known environments: {known}")
    data = _load_yaml(path)
    try:
        return Environment.model_validate({"name": name, **data})
    except ValidationError as exc:
        raise ConfigError(_format(exc, str(path))) from None


class Plan(BaseModel):
    """What one environment will run: resolved scenarios and tests."""

    environment: Environment
    scenarios: list[str]
    tests: dict[str, TestSpec]


def plan_environment(params: Params, env_name: str) -> Plan:
    """Resolve an environment's scenarios and tests, failing with the offending key."""
    if env_name not in params.experiment.environments:
        raise ConfigError(
            f"params.yaml: experiment.environments: {env_name!r} is not listed; "
            f"listed: {params.experiment.environments}")
    env = load_environment(env_name)
    override = params.environments.get(env_name, EnvironmentOverride())
    scenarios = override.scenarios if override.scenarios is not None else list(env.scenarios)
    unknown = [s for s in scenarios if s not in env.scenarios]
    if unknown:
        raise ConfigError(
            f"params.yaml: environments.{env_name}.scenarios: unknown scenario(s) {unknown}; "
            f"allowed: {sorted(env.scenarios)}")
    test_names = override.tests if override.tests is not None else list(params.tests)
    return Plan(environment=env, scenarios=scenarios,
                tests={t: params.tests[t] for t in test_names})


def validate_all(params: Params) -> list[Plan]:
    plans = [plan_environment(params, env) for env in params.experiment.environments]
    if not any(params.analysis.baseline in p.scenarios for p in plans):
        raise ConfigError(f"params.yaml: analysis.baseline: {params.analysis.baseline!r} is not a scenario of any "
                          f"environment; scenarios: {sorted({s for p in plans for s in p.scenarios})}")
    return plans
