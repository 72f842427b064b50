"""What every target's scenario holds, and what a scenario with pods adds (its target's module: the rest)."""

from __future__ import annotations

from typing import ClassVar, Literal, Self

from pydantic import Field, model_validator

from ...collectors.base import Strict
from ...vocabulary import meshes

MAX_SERVICES = 100_000  # Services of one scenario: ten times the largest published service-scaling study


class Scenario(Strict):
    """A scenario of any target. Each target's model (lab, kubernetes, ssh) adds its own fields and
    a ``target`` that environment.yaml does not write: the environment's, set when it is read."""

    # what a key of this model says where another target's scenario gives it; unlisted keys:
    # "needs target <the targets that take it>; remove it". {n}: one scenario, {names}: all of them
    ELSEWHERE: ClassVar[dict[str, str]] = {}
    # the environment's section of the target's own settings (the cluster, the hosts), required there and
    # refused elsewhere; None: the target has none
    SETTINGS: ClassVar[str | None] = None
    # whether the target can honour the environment's cpu_placement: client and server on one machine's CPUs
    CPU_PLACEMENT: ClassVar[bool] = False

    description: str = Field(
        description=("what the scenario is, in one line, for readers (editing it changes no measurement)")
    )
    record: dict[str, str] = Field(
        default={},
        description="name -> shell command whose output every run records; a name "
        "ending in _status, _metrics or _entries is an observation, which "
        "`benchlib compare` does not list as a setup difference",
    )
    settings: dict[str, str | int | float | bool] = Field(default={}, description="key settings, recorded as given")
    maps_to: str = Field(
        default="",
        description=(
            'the real-world setup this scenario stands for, e.g. "Cilium eBPF host-routing", for readers '
            "(editing it changes no measurement)"
        ),
    )
    mtu: int = Field(
        default=1500,
        ge=576,
        le=65535,
        description=(
            "lab: MTU in bytes of the pods' veth pairs (and of a WireGuard tunnel), e.g. 1450 as under an "
            "overlay or 9000 for jumbo frames; other targets only record it"
        ),
    )

    @classmethod
    def of(cls, env, name: str) -> Self:
        """Scenario ``name`` of ``env``, an environment of this model's target."""
        sc = env.scenarios[name]
        if not isinstance(sc, cls):
            raise TypeError(f"scenario {name} of environment {env.name} is a {type(sc).__name__}, not a {cls.__name__}")
        return sc

    @classmethod
    def check(cls, env) -> None:
        """Raises ValueError naming the key if the environment's scenarios of this target do not go together
        with the rest of its settings."""


class PodScenario(Scenario):
    """A scenario whose client and server run in pods: a mesh can stand on their path, Services in front."""

    services: int | list[int] | None = Field(
        default=None,
        description=(
            "number of Services (the benchmark Service plus unused fillers); lab: with service_proxy; kubernetes: "
            "with placement service; a list expands into one scenario per number, named <name>-<n>"
        ),
    )
    mesh: meshes.Mesh | None = Field(
        default=None,
        description=(
            "service-mesh proxies on the pod path: server-sidecar (a sidecar on the server's pod), sidecars "
            "(on both pods, plaintext between them), sidecars-mtls (the same with mutual TLS), "
            "node-proxies-mtls (one proxy per node, mutual TLS between them, as Istio's ambient mode) or, lab "
            "only, node-proxies-waypoint (those node proxies with an L7 waypoint proxy between them; Envoy "
            "only). On kubernetes (proxy: envoy; the image must carry envoy and iptables) the "
            "sidecars are Envoy containers injected into the benchmark pods as Istio injects them, and "
            "node-proxies-mtls runs a host-network Envoy pod on each of the two nodes (placement pod-to-pod)"
        ),
    )
    proxy: Literal["haproxy", "envoy"] = Field(
        default="haproxy",
        description=(
            "the proxy that runs the mesh: haproxy (lab only), or envoy configured as Istio configures it "
            "(node proxies: HBONE)"
        ),
    )

    @model_validator(mode="after")
    def _service_counts(self) -> PodScenario:
        counts = self.services if isinstance(self.services, list) else [self.services]
        counts = [n for n in counts if n is not None]
        if any(not 1 <= n <= MAX_SERVICES for n in counts):
            raise ValueError(f"services: counts must be from 1 to {MAX_SERVICES:,}, got {self.services}")
        return self


def needs_pods(name: str, sc: PodScenario, topology: str | None = None) -> None:
    """ValueError if the scenario puts a mesh where there are no pods (client and server on the nodes)."""
    if sc.mesh and (topology or name) == "host":
        raise ValueError(f"scenarios.{name}.mesh: needs pods (a topology other than host)")
