"""Each target's scenario model, by the name environment.yaml's ``target`` gives (the targets themselves:
targets/). A scenario of environment.yaml does not say its target: reading the file tags each scenario
with the environment's, which picks the model, as a test's ``tool`` picks its collector's model.

Adding a target: its module here (its scenario, with its fields, `check`, `SETTINGS` and `CPU_PLACEMENT`),
listed in SCENARIOS.
"""

from __future__ import annotations

import typing
from typing import Annotated

from pydantic import Discriminator, Tag, TypeAdapter

from .base import PodScenario, Scenario
from .kubernetes import HelmRelease, KubernetesScenario, KubernetesSettings
from .lab import LabScenario
from .ssh import SshHost, SshScenario, SshSettings

SCENARIOS: dict[str, type[Scenario]] = {"lab": LabScenario, "kubernetes": KubernetesScenario, "ssh": SshScenario}


def _target(value) -> str | None:
    return value.get("target") if isinstance(value, dict) else getattr(value, "target", None)


# A scenario as the environment gives it: its target picks the model, as collectors.TestSpec's tool does
# (and by a function for the same reason). Written out so that type checkers read it too.
AnyScenario = Annotated[
    Annotated[LabScenario, Tag("lab")]
    | Annotated[KubernetesScenario, Tag("kubernetes")]
    | Annotated[SshScenario, Tag("ssh")],
    Discriminator(_target),
]

# every target's scenario fields at their defaults, as JSON: what a scenario definition records besides
# the scenario's own fields, so that a definition reads the same whatever the target
DEFAULTS: dict[str, object] = {
    name: TypeAdapter(typing.cast(typing.Any, field.annotation)).dump_python(field.default, mode="json")
    for model in SCENARIOS.values()
    for name, field in model.model_fields.items()
    if not field.is_required()
}


def tagged(target: str, scenarios: dict) -> dict:
    """The scenarios of environment.yaml, each tagged with ``target``. A key only another target's
    scenarios take is dropped if left at its default, else refused: ValueError naming the key."""
    own = SCENARIOS[target].model_fields
    refused: dict[str, list[str]] = {}  # message -> the scenarios that give the key
    out = {}
    for name, sc in scenarios.items():
        if not isinstance(sc, dict):
            out[name] = sc  # the model says what it expected
            continue
        if "target" in sc:
            raise ValueError(f"scenarios.{name}.target: Extra inputs are not permitted")
        kept = {}
        for key, value in sc.items():
            owners = [t for t, model in SCENARIOS.items() if key in model.model_fields and t != target]
            if key in own or not owners:
                kept[key] = value  # the model checks it, and refuses a key no target takes
            elif value != SCENARIOS[owners[0]].model_fields[key].default:
                message = next((SCENARIOS[t].ELSEWHERE[key] for t in owners if key in SCENARIOS[t].ELSEWHERE), None)
                message = message or f"scenarios.{{n}}.{key}: needs target {' or '.join(owners)}; remove it"
                refused.setdefault(message, []).append(name)
        out[name] = {**kept, "target": target}
    for message, names in sorted(refused.items(), key=lambda item: "{names}" not in item[0]):
        raise ValueError(message.format(n=names[0], names=names))
    return out


__all__ = [
    "AnyScenario",
    "HelmRelease",
    "KubernetesScenario",
    "KubernetesSettings",
    "LabScenario",
    "PodScenario",
    "Scenario",
    "SshHost",
    "SshScenario",
    "SshSettings",
]
