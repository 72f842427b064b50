"""params.yaml's campaign: the experiment, its tests, the environments' choices and the report's title, as
validated models (the analysis section: settings.analysis).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PrivateAttr, field_validator, model_validator

from ..collectors import TestSpec
from ..collectors.base import Strict
from .analysis import Analysis, check_band, percent_for
from .names import Name, check_distinct

MAX_BLOCKS = 1000  # experiment.repetitions' cap: the last look of a campaign run until precise within minutes
MAX_MINUTES = 60 * 24 * 365  # experiment.max_minutes' cap: a year of measurement


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
