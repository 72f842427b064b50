"""params.yaml's analysis section: how scenarios are compared, each setting bounded, as one frozen model
that the analysis takes whole (DEFAULT_ANALYSIS where a params.yaml sets none).
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Literal

from pydantic import Field, field_validator

from ..collectors.base import Strict
from .names import Name

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
