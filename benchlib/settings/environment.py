"""An environment (pipelines/<name>/environment.yaml): its target, CPUs and scenarios, as a validated model
(each target's scenario model: settings.scenarios).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from ..collectors import TOOLS, get
from ..collectors.base import Strict
from .names import Name, check_distinct
from .scenarios import (
    SCENARIOS,
    AnyScenario,
    KubernetesSettings,
    SshSettings,
    tagged,
)

MAX_CPU = 8191  # the highest CPU number Linux can have (NR_CPUS is at most 8192)


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
