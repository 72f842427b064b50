"""params.yaml and the environment definitions -> typed, validated models.

Every error names the file and the key (e.g. ``params.yaml: tests.tcp_rr.duration_s``)
and, where the choice is closed, the allowed values.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import AfterValidator, Field, PrivateAttr, ValidationError, field_validator, model_validator
from pydantic_core import ErrorDetails

from ..base import limits
from ..base.errors import ConfigError  # noqa: F401 (callers catch config.ConfigError)
from ..collectors import TOOLS, TestSpec, get
from ..collectors.base import Strict
from ..vocabulary.schema import NAME_MAX, NAME_RE, NAME_RULE, check_name  # noqa: F401 (the name rule; callers use config's)
from .scenarios import (  # noqa: F401 (the settings' models: callers use config's)
    DEFAULTS as SCENARIO_DEFAULTS,
    SCENARIOS,
    AnyScenario,
    HelmRelease,
    KubernetesSettings,
    Scenario,
    SshHost,
    SshSettings,
    tagged,
)
from .scenarios.kubernetes import CLUSTER_MESHES  # noqa: F401


def project_root() -> Path:
    """The project a command or notebook works on (find_project)."""
    return find_project()[0]


def find_project() -> tuple[Path, bool]:
    """(root, found): the nearest directory holding dvc.yaml at or above the working directory
    (dvc and papermill run at the root, JupyterLab runs notebooks in notebooks/), found True; else
    the checkout this package lives in, found False (a command says so: it may not be the
    project the user meant)."""
    here = Path.cwd().resolve()
    for d in (here, *here.parents):
        if (d / "dvc.yaml").exists():
            return d, True
    return Path(__file__).resolve().parents[2], False


# Every name that becomes a path or a key column follows schema.NAME_RULE: checked where it enters, by the
# models below (Name) and by require_name for a name given on the command line.


def require_name(name: str, what: str) -> str:
    """``name`` given by ``what`` (a command-line argument, say), checked before it becomes a path."""
    try:
        return check_name(name)
    except ValueError as exc:
        raise ConfigError(f"{what}: {exc}") from None


def check_distinct(names: typing.Iterable[str]) -> None:
    """ValueError if two names differ only in case: on a case-insensitive file system (macOS,
    Windows) their records would share one directory."""
    seen: dict[str, str] = {}
    for name in names:
        other = seen.setdefault(name.casefold(), name)
        if other != name:
            raise ValueError(f"{other!r} and {name!r} differ only in case (one directory where case is ignored)")


Name = Annotated[str, AfterValidator(check_name)]


MAX_BLOCKS = 1000  # experiment.repetitions' cap: the last look of a campaign run until precise within minutes
MAX_MINUTES = 60 * 24 * 365  # experiment.max_minutes' cap: a year of measurement
MAX_CPU = 8191  # the highest CPU number Linux can have (NR_CPUS is at most 8192)


class Experiment(Strict):
    campaign: Name = Field(description="names the raw data (data/raw/<campaign>/); change it to measure anew")
    environments: list[Name] = Field(
        min_length=1,
        description=(
            "the environments this campaign runs in: folder names under pipelines/, each holding an "
            "environment.yaml, e.g. [local-lab]; each once"
        ),
    )
    repetitions: int = Field(ge=1, le=MAX_BLOCKS, description="blocks: every configuration runs once per block")
    seed: int = Field(
        default=0,
        ge=-(2**63),
        le=2**63 - 1,
        description=(
            "seed of the run order: each block runs every configuration once, in an order drawn from this seed and "
            "the environment's name; any 64-bit integer, the same seed gives the same order"
        ),
    )
    cpu_trim_s: float = Field(
        default=0.5, ge=0, le=600, description="CPU window starts this long after the tool, ends this long before"
    )
    retries: int = Field(default=1, ge=0, le=10, description="extra attempts for a failed run")
    foreign_cpu_max: float = Field(
        default=0.1,
        gt=0,
        le=1024,
        description=(
            "a run whose CPUs gave more than this to other processes over its CPU window (in cores: 0.1 is a "
            "tenth of one CPU; the measurement's tools, servers, proxies and kernel network work are not "
            "others) is disturbed: kept with that outcome, left out of the analysis and measured again "
            "within `retries`"
        ),
    )
    steal_max: float = Field(
        default=0.3,
        gt=0,
        le=1024,
        description=(
            "a run whose CPUs the hypervisor gave more than this to other guests over its CPU window (steal, in "
            "cores) is disturbed, as for foreign_cpu_max. Higher than that default: a VM whose CPUs are all busy "
            "can lose a few hundredths to a tenth of a core to steal in every run, while a run that lost half a "
            "core measured a slower machine"
        ),
    )
    quiet_wait_s: float = Field(
        default=60,
        ge=0,
        le=3600,
        description=(
            "before a disturbed run is measured again, wait up to this many seconds until its CPUs are quiet (a "
            "1 s probe as a run measures them: other processes within foreign_cpu_max, steal within steal_max), "
            "printing who takes them every few seconds; 0: measure again at once, as targets that cannot see "
            "the nodes' processes always do. The time waited is in collect's closing line"
        ),
    )
    quiet_windows: bool = Field(
        default=True,
        description=(
            "target kubernetes: freeze the nodes' host daemons over each run's CPU window where the environment "
            "names them (kubernetes.quiet); false: never. Each record's quiet says what was frozen, kept and "
            "could not be"
        ),
    )
    profile_runs: int = Field(
        default=0,
        ge=0,
        le=1000,
        description=(
            "profiled runs per configuration (a CPU profile with perf, never among the measured runs); 0: none"
        ),
    )
    profile_hz: int = Field(
        default=499,
        ge=1,
        le=10000,
        description=(
            "perf's sampling frequency per CPU; not a multiple of the timer tick, so samples do not lock onto it"
        ),
    )

    precision: float | dict[str, float] | None = Field(
        default=None,
        description=(
            "run until precise: the target half-width, in %, of every primary comparison's interval of the change "
            "(analysis.baseline and the contrasts), in (0, 100); or {headline metric: %, default: %}, e.g. "
            "{default: 3, throughput: 5}; repetitions is the first look, and collect adds look_blocks "
            "blocks at each further look until every primary comparison meets it or the budget (max_repetitions, "
            "max_minutes) is spent; alpha is spent across the looks (docs: statistics, run until precise); "
            "unset: exactly repetitions blocks"
        ),
    )
    max_repetitions: int | None = Field(
        default=None,
        ge=1,
        le=MAX_BLOCKS,
        description=(
            "with precision: the most blocks collect runs, at least repetitions; its looks are then fixed in "
            "advance and share alpha equally"
        ),
    )
    max_minutes: float | None = Field(
        default=None,
        le=MAX_MINUTES,
        description=(
            "with precision: no further look starts once the recorded runs of the environment, with the look's "
            "estimated time, would exceed this many minutes of measurement"
        ),
    )
    look_blocks: int | None = Field(
        default=None,
        ge=1,
        le=1000,
        description="with precision: the blocks added at each look after the first; unset: repetitions",
    )

    def blocks_planned(self) -> int:
        """The most blocks the campaign can run: repetitions, or with precision the budget's last look."""
        if self.precision is None:
            return self.repetitions
        return self.max_repetitions if self.max_repetitions is not None else MAX_BLOCKS

    def looks(self) -> list[int]:
        """The block counts at which a campaign run until precise looks at its primary comparisons, fixed
        before any run: repetitions, then every look_blocks blocks, the budget's last block count last."""
        last = self.blocks_planned()
        return [*range(self.repetitions, last, self.look_blocks or self.repetitions), last]

    def look_of(self, blocks: int) -> int:
        """The look (1-based) that ``blocks`` recorded blocks belong to: the first at or after them (a look
        interrupted part way counts as the look it was collecting)."""
        marks = self.looks()
        return next((j for j, b in enumerate(marks, 1) if b >= blocks), len(marks))

    @field_validator("max_repetitions")
    @classmethod
    def _max_repetitions(cls, value: int | None, info) -> int | None:
        repetitions = info.data.get("repetitions")
        if value is not None and repetitions is not None and value < repetitions:
            raise ValueError(f"{value} is below repetitions ({repetitions}), the first look")
        return value

    @field_validator("precision", mode="before")
    @classmethod
    def _precision(cls, value: object) -> object:
        return value if value is None else check_band(value, positive=True)

    def precision_for(self, metric: str) -> float:
        """The target half-width of a primary comparison of ``metric`` (with precision set)."""
        assert self.precision is not None
        return percent_for(metric, self.precision)

    @field_validator("max_minutes")
    @classmethod
    def _max_minutes(cls, value: float | None) -> float | None:
        if value is not None and not value > 0:
            raise ValueError(f"{value} is no time budget: give minutes above 0")
        return value

    @model_validator(mode="after")
    def _budget(self) -> Experiment:
        budget = [k for k in ("max_repetitions", "max_minutes", "look_blocks") if getattr(self, k) is not None]
        if self.precision is None and budget:
            raise ValueError(f"{budget[0]}: only used with precision (run until precise): set precision or remove it")
        if self.precision is not None and self.max_repetitions is None and self.max_minutes is None:
            raise ValueError("precision: needs a budget: set max_repetitions and/or max_minutes")
        return self

    @field_validator("environments")
    @classmethod
    def _environments_once(cls, names: list[str]) -> list[str]:
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"{twice} listed more than once")
        check_distinct(names)
        return names

    @field_validator("profile_runs")
    @classmethod
    def _profile_runs(cls, value: int, info) -> int:
        repetitions = info.data.get("repetitions")
        if repetitions is not None and value > repetitions:
            raise ValueError(f"{value} is more than repetitions ({repetitions}): profiled run k goes into block k")
        return value


class MatrixEntry(Strict):
    """Every one of these tests in every one of these scenarios."""

    scenarios: list[str] = Field(min_length=1, description="scenarios of the environment, by name")
    tests: list[str] = Field(min_length=1, description="tests of params.yaml's `tests`, by name")


class EnvironmentOverride(Strict):
    """Per-environment choice of scenarios and tests, in params.yaml."""

    scenarios: list[str] | None = Field(
        default=None,
        description=(
            "scenarios of the environment to run, by name (a cluster visits their pod networks in rounds); "
            "unset: every scenario, in the file's order"
        ),
    )
    tests: list[str] | None = Field(
        default=None, description=("tests of params.yaml's `tests` to run here, by name; unset: every test")
    )
    matrix: list[MatrixEntry] | None = Field(
        default=None,
        min_length=1,
        description=(
            "instead of scenarios x tests: a union of smaller products, so that e.g. UDP tests run "
            "in two scenarios while TCP_CRR runs in all"
        ),
    )
    cpu_placement: dict[str, Literal["split", "shared"]] | None = Field(
        default=None,
        description=(
            "lab and kubernetes: replaces the environment's cpu_placement for this campaign ({} = every kind split), e.g. "
            "when its scenarios with proxies (always split) are compared with scenarios without"
        ),
    )

    @model_validator(mode="after")
    def _matrix_alone(self) -> EnvironmentOverride:
        if self.matrix is not None and (self.scenarios is not None or self.tests is not None):
            raise ValueError("give either matrix or scenarios/tests, not both")
        lists = [("scenarios", self.scenarios), ("tests", self.tests)] + [
            (f"matrix[{i}].{key}", getattr(e, key))
            for i, e in enumerate(self.matrix or [])
            for key in ("scenarios", "tests")
        ]
        for key, names in lists:
            twice = sorted({n for n in names or [] if (names or []).count(n) > 1})
            if twice:
                raise ValueError(f"{key}: {twice} listed more than once")
        return self

    def test_names(self) -> list[tuple[str, str]]:
        """(key, test name) of every test this override names, for error messages."""
        if self.matrix is None:
            return [("tests", t) for t in self.tests or []]
        return [(f"matrix[{i}].tests", t) for i, entry in enumerate(self.matrix) for t in entry.tests]


# Bounds of the analysis parameters: each decides verdicts, so a value outside them is refused, not
# analysed. Numbers are YAML numbers (a quoted "5" is refused), finite and in these ranges.
ALPHA_MAX = 0.2  # a larger level calls one chance difference in five significant: no verdict to report
GBPS_MAX = 10_000.0  # 10 Tbit/s: beyond any host's links today
RATE_MAX = 1e9  # transactions, connections or requests per second: beyond any host today
BAND_MAX = 100.0  # % : a band of 100 or more calls a fall to zero negligible and lets it pass compare's gate
SEED_MAX = 2**32 - 1  # the seeds every random generator takes (numpy refuses a negative one)


def check_band(value: object, positive: bool = False) -> float | dict[str, float]:
    """A noise band or compare threshold (or, ``positive``, a precision target: above 0): a % in
    [0, BAND_MAX), or {metric: %} with a 'default' for the metrics not named; else ValueError naming
    what is wrong."""
    if not isinstance(value, dict):
        return _percent(value, "", positive)
    from ..vocabulary.schema import DERIVED_METRICS, METRICS

    known = sorted(METRICS) + sorted(DERIVED_METRICS)
    unknown = sorted(str(m) for m in value if m not in known and m != "default")
    if unknown:
        raise ValueError(f"unknown metric(s) {unknown}; allowed: 'default', {known}")
    if "default" not in value:  # every compared metric needs one
        raise ValueError(f"per-metric percentages need a 'default' for the other metrics, got {sorted(value)}")
    return {metric: _percent(pct, f"{metric}: ", positive) for metric, pct in value.items()}


def _percent(value: object, where: str, positive: bool = False) -> float:
    # type(): a boolean is no number here; a NaN fails the comparison
    number = type(value) in (int, float)
    if not number or not ((value > 0 if positive else value >= 0) and value < BAND_MAX):  # type: ignore[operator]
        bounds = f"(0, {BAND_MAX:g})" if positive else f"[0, {BAND_MAX:g})"
        raise ValueError(f"{where}{value!r} is not a percentage in {bounds}")
    return float(value)  # type: ignore[arg-type]


def percent_for(metric: str, value: float | Mapping[str, float]) -> float:
    """The percentage a per-metric setting (check_band) gives ``metric``: its own, else the default."""
    if not isinstance(value, Mapping):
        return float(value)
    return float(value.get(metric, value["default"]))


def percent_text(value: float | Mapping[str, float]) -> str:
    """A per-metric setting as one phrase: "3 %", or "3 % (throughput 5 %, latency_p50 5 %)"."""
    if not isinstance(value, Mapping):
        return f"{value:g} %"
    named = ", ".join(f"{m} {v:g} %" for m, v in value.items() if m != "default")
    return f"{value['default']:g} % ({named})" if named else f"{value['default']:g} %"


def _number(gt: float, le: float, **kw) -> typing.Any:
    """A finite YAML number in (gt, le]."""
    return Field(strict=True, allow_inf_nan=False, gt=gt, le=le, **kw)


# The 2026 EKS m6i study's names a preset may give a stand-in of its own (analysis.reference_scenarios):
# its scenarios, and the kube-proxy side of its service scaling (ours: that scenario with -<count> Services).
EKS_STUDY_NAMES = ("A", "B", "C", "D", "E", "kube-proxy-iptables")


class Analysis(Strict):
    """Parameters of the analysis notebooks (passed to papermill as they are)."""

    baseline: Name = Field(default="host", description="scenario every other scenario is compared with")
    alpha: float = _number(
        0,
        ALPHA_MAX,
        default=0.05,
        description=(
            "significance level of each family of comparisons, after its correction; 0.05 is usual, 0.01 for "
            "fewer false positives at the cost of missing small changes"
        ),
    )
    correction: Literal["holm", "fdr_bh"] = Field(
        default="holm", description="holm for a report, fdr_bh (FDR) for sweeps"
    )
    cpu_target_gbps: float = _number(
        0, GBPS_MAX, default=100.0, description="stream tests: CPU % needed for this throughput"
    )
    rr_per_transactions: float = _number(
        0, RATE_MAX, default=10_000, description="TCP_RR: CPU % per this many transactions/s"
    )
    crr_per_connections: float = _number(
        0, RATE_MAX, default=10_000, description="TCP_CRR: CPU % per this many connections/s"
    )
    http_per_requests: float = _number(
        0, RATE_MAX, default=1_000, description="HTTP (fortio): CPU % per this many requests/s"
    )
    noise_band_pct: float | dict[str, float] = Field(
        default=2.0,
        description=(
            f"changes inside +/- this % are 'negligible'; a number in [0, {BAND_MAX:g}) or {{metric: %, default: %}}"
        ),
    )
    family_metrics: list[str] = Field(
        default=["latency_p50", "latency_p99", "cpu_pct_at_target"],
        description=(
            "secondary metrics compared besides each test's headline metric (the primary family, always "
            "compared, under `correction`); each in the Benjamini-Hochberg family of its kind (latency, CPU, "
            "other), labelled FDR; each once"
        ),
    )
    seed: int = Field(default=0, strict=True, ge=0, le=SEED_MAX, description="bootstrap seed")
    threshold_pct: float | dict[str, float] | None = Field(
        default=None,
        description=(
            "benchlib compare: a significant change whose CI lies inside +/- this % reads 'negligible' and fails "
            f"no gate; a number in [0, {BAND_MAX:g}) or {{metric: %, default: %}}; unset: noise_band_pct"
        ),
    )
    paired: bool = Field(
        default=False,
        description=(
            "compare each scenario with its reference within the blocks (a cluster's rounds) where both ran: the "
            "sign test of the per-block ratios and the median ratio's distribution-free interval, so that drift "
            "between blocks cancels; a comparison with fewer than 6 such blocks stays unpaired; off: Mann-Whitney "
            "on the runs"
        ),
    )
    contrasts: list[tuple[Name, Name]] = Field(
        default=[],
        description=(
            "extra comparisons [scenario, reference], e.g. [notrack, conntrack]: of the headline metric in the "
            "primary family, of the others in their secondary families; two different scenarios, each pair once"
        ),
    )

    reference_scenarios: dict[str, Name] = Field(
        default={},
        description=(
            "the 2026 EKS m6i study's scenario (A, B, C, D, E, or kube-proxy-iptables: its service scaling's "
            "kube-proxy side) -> our scenario standing for it, e.g. {A: vpc-cni, B: cilium-vxlan-iptables}: the "
            "report's reference section sets ours beside each of its changes vs A (B-E need A), and for "
            "kube-proxy-iptables ours with -4 and -1000 Services; unset: the local Cilium campaign's "
            "(A bridge-iptables, B cilium-vxlan-iptables, C cilium-vxlan-ebpf, D cilium-native-ebpf)"
        ),
    )

    @field_validator("reference_scenarios")
    @classmethod
    def _study_names(cls, stand_ins: dict[str, str]) -> dict[str, str]:
        unknown = sorted(set(stand_ins) - set(EKS_STUDY_NAMES))
        if unknown:
            raise ValueError(f"{unknown}: not a scenario of the EKS study; choose from {list(EKS_STUDY_NAMES)}")
        if "A" not in stand_ins and set(stand_ins) & set("BCDE"):
            raise ValueError("B-E are compared with A: name a stand-in for A too")
        return stand_ins

    @field_validator("family_metrics")
    @classmethod
    def _known_metrics(cls, names: list[str]) -> list[str]:
        from ..vocabulary.schema import DERIVED_METRICS, METRICS

        unknown = [n for n in names if n not in METRICS and n not in DERIVED_METRICS]
        if unknown:
            raise ValueError(f"unknown metric(s) {unknown}; allowed: {sorted(METRICS) + sorted(DERIVED_METRICS)}")
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"{twice} listed more than once")
        return names

    @field_validator("noise_band_pct", "threshold_pct", mode="before")
    @classmethod
    def _band(cls, value: object) -> object:
        return value if value is None else check_band(value)

    @field_validator("contrasts")
    @classmethod
    def _contrasts(cls, pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
        for i, (scenario, reference) in enumerate(pairs):
            if scenario == reference:
                raise ValueError(f"[{i}]: {scenario!r} compared with itself")
            if pairs.index((scenario, reference)) < i:
                raise ValueError(f"[{i}]: {[scenario, reference]} listed more than once")
        return pairs

    def compare_threshold(self) -> float | dict[str, float]:
        """The threshold `benchlib compare` applies: threshold_pct, else the noise band."""
        return self.noise_band_pct if self.threshold_pct is None else self.threshold_pct


DEFAULT_ANALYSIS = Analysis()  # the analysis settings of a params.yaml that sets none (frozen: safe to share)


class Report(Strict):
    title: str = Field(default="Container network benchmark", description="the report's title")


class Params(Strict):
    experiment: Experiment = Field(description=("the campaign: its name, environments, repetitions and run order"))
    tests: dict[Name, TestSpec] = Field(
        min_length=1, description="name -> test; its tool's collector defines its fields"
    )
    environments: dict[Name, EnvironmentOverride] = Field(
        default={},
        description=(
            "environment name (from experiment.environments) -> which of its scenarios and tests run; an "
            "environment not listed runs every scenario with every test"
        ),
    )
    analysis: Analysis = Field(default=Analysis(), description="how the analysis compares scenarios")
    report: Report = Field(default=Report(), description="how the report presents them")
    _source: str = PrivateAttr("params.yaml")

    @property
    def source(self) -> str:
        """The file these parameters were read from, for messages."""
        return self._source

    @field_validator("tests")
    @classmethod
    def _test_names(cls, tests: dict) -> dict:
        check_distinct(tests)
        return tests

    @model_validator(mode="after")
    def _references(self) -> Params:
        trim = self.experiment.cpu_trim_s
        for name, test in self.tests.items():
            if 2 * trim >= test.duration_s:
                raise ValueError(
                    f"tests.{name}.duration_s: {test.duration_s} s leaves no CPU window "
                    f"after trimming experiment.cpu_trim_s={trim} s at both ends"
                )
        for env, override in self.environments.items():
            if env not in self.experiment.environments:  # a typo would run every scenario, silently
                raise ValueError(f"environments.{env}: not in experiment.environments {self.experiment.environments}")
            for key, t in override.test_names():
                if t not in self.tests:
                    raise ValueError(
                        f"environments.{env}.{key}: unknown test {t!r}; defined tests: {sorted(self.tests)}"
                    )
        return self


def _expand_service_counts(scenarios: dict) -> dict:
    """``services: [4, 1000]`` on scenario X becomes scenarios X-4 and X-1000."""
    out = {}
    for name, sc in (scenarios or {}).items():
        counts = sc.get("services") if isinstance(sc, dict) else None
        if isinstance(counts, list):
            for n in counts:
                out[f"{name}-{n}"] = {**sc, "services": n}
        else:
            out[name] = sc
    return out


class CpuPlacement(Strict):
    client: list[Annotated[int, Field(ge=0, le=MAX_CPU)]] = Field(
        min_length=1, description="CPU numbers the client is pinned to, e.g. [0, 1]"
    )
    server: list[Annotated[int, Field(ge=0, le=MAX_CPU)]] = Field(
        min_length=1, description="CPU numbers the server is pinned to, none of the client's"
    )

    @model_validator(mode="after")
    def _disjoint(self) -> CpuPlacement:
        if set(self.client) & set(self.server):
            raise ValueError(f"client CPUs {self.client} and server CPUs {self.server} overlap")
        return self


class Environment(Strict):
    name: Name = Field(description="the environment's folder name under pipelines/ (not a key of the file)")
    description: str = Field(description="what this environment is, in one line, for readers")
    target: Literal["lab", "kubernetes", "ssh"] = Field(  # the names of SCENARIOS and targets.TARGETS
        description=(
            "where the runs happen: lab (network namespaces on this machine; needs root), kubernetes (a cluster, "
            "through its API) or ssh (two hosts, over OpenSSH)"
        )
    )
    cpus: CpuPlacement | None = Field(
        default=None,
        description=(
            "the CPUs client and server are pinned to; unset: lab splits the CPUs benchlib may use in halves "
            "(client first), kubernetes and ssh use every CPU of each side's node"
        ),
    )
    cpu_placement: dict[str, Literal["split", "shared"]] = Field(
        default={},
        description=(
            "lab, and kubernetes where both nodes run on one kernel (the local cluster): per test kind "
            "(TCP_RR, TCP_CRR, ...), split (client and server on different CPUs, the default: per-side CPU as "
            "on two machines) or shared (both on the client's CPUs: less noise, and the CPU measured is the "
            "whole path's; scenarios with mesh proxies always run split); see docs/concepts/cpu.md"
        ),
    )
    kubernetes: KubernetesSettings | None = Field(
        default=None, description="target kubernetes (required there): the cluster"
    )
    ssh: SshSettings | None = Field(default=None, description="target ssh (required there): the two hosts")
    scenarios: dict[Name, AnyScenario] = Field(
        min_length=1,
        description=(
            "scenario name -> scenario: the configurations this environment can measure (a cluster runs them one "
            "after another, in this order)"
        ),
    )

    @field_validator("scenarios")
    @classmethod
    def _scenario_names(cls, scenarios: dict) -> dict:
        check_distinct(scenarios)
        return scenarios

    @model_validator(mode="before")
    @classmethod
    def _tag_scenarios(cls, data: object) -> object:
        # each scenario's model is its target's (scenarios.SCENARIOS); a target not known is refused as such
        if isinstance(data, dict) and data.get("target") in SCENARIOS and isinstance(data.get("scenarios"), dict):
            return {**data, "scenarios": tagged(data["target"], data["scenarios"])}
        return data

    @model_validator(mode="after")
    def _target_settings(self) -> Environment:
        own = SCENARIOS[self.target].SETTINGS
        for section in (model.SETTINGS for model in SCENARIOS.values() if model.SETTINGS):
            if (getattr(self, section) is not None) != (own == section):
                raise ValueError(f"{section}: this section is required for, and only for, target: {section}")
        self.check_cpu_placement()
        SCENARIOS[self.target].check(self)
        return self

    def check_cpu_placement(self) -> None:
        """Raises ValueError naming the key if cpu_placement is not one this environment can honour."""
        if self.cpu_placement and not SCENARIOS[self.target].CPU_PLACEMENT:
            able = " or ".join(t for t, model in SCENARIOS.items() if model.CPU_PLACEMENT)
            raise ValueError(
                f"cpu_placement: {able} only (a target {self.target} places client and server on "
                "their own nodes); remove it"
            )
        kinds = {k for tool in TOOLS for k in get(tool).KINDS}
        unknown = sorted(set(self.cpu_placement) - kinds)
        if unknown:
            raise ValueError(f"cpu_placement: unknown test kind(s) {unknown}; allowed: {sorted(kinds)}")


def _format(exc: ValidationError, source: str) -> str:
    """One line naming the file and the key; several errors: a line per key below the file's."""
    lines = []
    for err in exc.errors():
        loc = [_key(p) for p in err["loc"] if p != "[key]"]  # a bad key: named by itself
        msg = err["msg"].removeprefix("Value error, ")
        if loc[:1] == ["tests"] and len(loc) >= 2:
            loc, msg = _test_error(loc, msg, err)
        if loc[:1] == ["scenarios"] and len(loc) > 2 and loc[2] in SCENARIOS:
            loc.pop(2)  # the model the environment's target picked: not a key of the file
        if err["type"].startswith("union_tag") and loc[:1] == ["scenarios"]:
            if not isinstance(err["input"], dict):
                msg = "Input should be a valid dictionary or instance of Scenario"
            elif len(exc.errors()) > 1:
                continue  # no scenario model for a target that is not one: the target's error says so
        key = ".".join(loc)
        lines.append(f"{key}: {msg}" if key else msg)
    if len(lines) == 1:
        return f"{source}: {lines[0]}"
    return "\n  ".join([f"{source}: invalid", *lines])


def _key(part: str | int) -> str:
    """A part of a key as the message shows it: a name as written, unless it hides characters or runs long."""
    text = str(part)
    if not text.isprintable():
        text = repr(text)
    return text if len(text) <= 60 else text[:57] + "..."


def _test_error(loc: list[str], msg: str, err: ErrorDetails) -> tuple[list[str], str]:
    """The key and message of an error in tests.<name>, in the words of params.yaml: pydantic puts
    the tool whose model was picked into the location (tests.x.netperf.kind), and names the
    picking function, not the key `tool`."""
    allowed = f"allowed: {list(TOOLS)}"
    if err["type"] == "union_tag_invalid":
        return loc + ["tool"], f"{err['input']['tool']!r} is not a tool; {allowed}"
    if err["type"] == "union_tag_not_found":
        if isinstance(err["input"], dict):
            return loc + ["tool"], f"Field required; {allowed}"
        return loc, f"expected a mapping with a tool, got {err['input']!r}"
    if len(loc) > 2 and loc[2] in TOOLS:
        tool = loc.pop(2)
        if err["type"] == "extra_forbidden":
            settings = [f for f in get(tool).Spec.model_fields if f != "tool"]
            msg = f"not used by {tool}; remove it ({tool} takes {', '.join(settings)})"
    return loc, msg


class _DuplicateKey(yaml.YAMLError):
    pass


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML with every mapping key once: otherwise the last of two silently wins."""

    def construct_mapping(self, node, deep=False):
        seen = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *anchor`: keys written here override the merged ones, as they should
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, typing.Hashable):
                continue  # the base loader reports it
            if key in seen:
                raise _DuplicateKey(
                    f"line {key_node.start_mark.line + 1}: duplicate key {key!r} (first at line {seen[key] + 1})"
                )
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)


def _load_yaml(path: Path) -> dict:
    try:  # a ConfigError of the cap is a ValueError too: read before YAML's errors are caught
        text = limits.read_text(path, limits.CONFIG_BYTES, ConfigError)
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)
    except _DuplicateKey as exc:
        raise ConfigError(f"{path}: {exc}") from None
    except (yaml.YAMLError, ValueError) as exc:  # ValueError: an integer of more than 4300 digits
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def load_params(path: Path | str | None = None) -> Params:
    path = Path(path) if path else project_root() / "params.yaml"
    try:
        params = Params.model_validate(_load_yaml(path))
    except ValidationError as exc:
        raise ConfigError(_format(exc, str(path))) from None
    params._source = str(path)
    return params


def environment_dir(name: str) -> Path:
    return project_root() / "pipelines" / name


def load_environment(name: str) -> Environment:
    path = environment_dir(require_name(name, "environment")) / "environment.yaml"
    if not path.exists():
        known = sorted(p.parent.name for p in (project_root() / "pipelines").glob("*/environment.yaml"))
        raise ConfigError(f"environment {name!r}: {path} not found; known environments: {known}")
    data = _load_yaml(path)
    if isinstance(data.get("scenarios"), dict):
        data["scenarios"] = _expand_service_counts(data["scenarios"])
    try:
        return Environment.model_validate({"name": name, **data})
    except ValidationError as exc:
        raise ConfigError(_format(exc, str(path))) from None


# Prose: editing it changes nothing a scenario measures, so it is no part of a campaign's identity
PROSE_KEYS = ("description", "maps_to")


def scenario_definition(env: Environment, scenario: str) -> dict:
    """What defines the measurements of ``scenario``, as each of its records keeps it: the scenario's
    every field (and every other target's scenario field, at its default) (its topology, settings, apply steps, helm release, checks, ...), the environment's own
    settings (target, CPUs, CPU placement as the campaign has it, cluster or hosts) and the sha256 of
    every file of the project the scenario names by a path relative to the environment folder (helm
    values, manifests, scripts such as ./cilium-synced.sh)."""
    spec = {**copy.deepcopy(SCENARIO_DEFAULTS), **env.scenarios[scenario].model_dump(mode="json")}
    return {
        "scenario": spec,
        "environment": env.model_dump(mode="json", exclude={"name", "scenarios"}),
        "files": _named_files(environment_dir(env.name), spec),
    }


def _named_files(folder: Path, spec: dict) -> dict[str, str]:
    """path as named -> sha256 of each file of the project below ``folder``'s parent that ``spec`` names."""
    root = project_root().resolve()
    files = {}
    for token in sorted(set(re.findall(r"[A-Za-z0-9_.+@/-]+", json.dumps(spec)))):
        if "/" not in token and "." not in token.strip("."):
            continue
        try:
            path = (folder / token).resolve()
            if path.is_file() and path.is_relative_to(root):
                files[os.path.normpath(token)] = "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
        except (OSError, ValueError):
            continue  # not a file name after all
    return files
