"""Scenarios on several clusters at once: one campaign whose arms are clusters of their own.

A scenario's ``cluster:`` names one of ``kubernetes.clusters`` (a kubeconfig context: two EKS clusters,
one per CNI; several local clusters, one per pod network). Each cluster is a KubernetesTarget of its own
(its namespace, pods, CPU sampling and scenario commands); this target hands every call to the
scenario's one. Where every cluster holds one pod network (its scenarios share their switch) and none
needs what one namespace cannot hold twice (filler Services, node proxies, other namespace labels),
the scenarios stand side by side: each is activated once and the campaign interleaves every run of
every cluster in each block, as the lab does. Otherwise the runs go in rounds of switches, and one line
says why.

On clusters whose host daemons run on this machine (``quiet``), one set of quiet windows covers them
all: while a run measures one cluster, every other cluster's daemons are frozen too.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from ...base.errors import ConfigError
from ...collectors import Server
from ...settings.environment import Environment
from ...settings.scenarios import KubernetesSettings
from .. import Target
from ..mesh import shapes
from . import KubernetesTarget, quiet, render

_log = logging.getLogger(__name__)

DEFAULT = "default"  # how records and logs name the environment's own cluster
# what a cluster's nodes are made of, per scenario: where two compared scenarios' clusters differ in
# these, the comparison is between machines as well as datapaths
REACH_TIMEOUT_S = 5.0  # validate's look at each cluster's API server
MACHINE_FACTS = ("kernel", "kubelet", "container_runtime", "os_image", "instance_type")


def names_clusters(env: Environment, scenarios: Sequence[str]) -> bool:
    """Whether any of the scenarios runs on a cluster of kubernetes.clusters."""
    return any(getattr(env.scenarios[s], "cluster", None) for s in scenarios)


def cluster_settings(settings: KubernetesSettings, name: str) -> KubernetesSettings:
    """The settings of one cluster: the environment's, with the cluster's kubeconfig, context and
    quiet windows ("" is the environment's own cluster)."""
    if not name:
        return settings
    own = settings.clusters[name]
    return settings.model_copy(
        update={
            "kubeconfig": own.kubeconfig or settings.kubeconfig,
            "context": own.context or settings.context,
            "quiet": own.quiet,
        }
    )


def check_clusters(env: Environment, scenarios: Sequence[str], timeout: float = REACH_TIMEOUT_S) -> None:
    """ConfigError naming the scenario and its cluster's context where that context is not in its
    kubeconfig or its API server does not answer within ``timeout``: a campaign that interleaves the
    clusters needs every one of them from its first block."""
    from .api import reach

    assert env.kubernetes is not None
    problems = []
    for name in dict.fromkeys(env.scenarios[s].cluster or "" for s in scenarios):  # pyright: ignore[reportAttributeAccessIssue] (a KubernetesScenario)
        settings = cluster_settings(env.kubernetes, name)
        on = [s for s in scenarios if (env.scenarios[s].cluster or "") == name]  # pyright: ignore[reportAttributeAccessIssue] (a KubernetesScenario)
        where = (
            f"scenario(s) {', '.join(on)}: cluster {name or DEFAULT} (kubeconfig "
            f"{settings.kubeconfig or 'default'}, context {settings.context or 'current'})"
        )
        look = reach(settings.kubeconfig, settings.context, timeout)
        if look.failed == "missing":
            problems.append(f"{where}: the kubeconfig does not exist (is the cluster up?)")
        elif look.failed == "load":
            problems.append(f"{where}: cannot be loaded: {look.detail}")
        elif look.failed == "credentials":
            problems.append(f"{where}: its API server {look.host} refuses the credentials ({look.detail[:200]})")
        elif look.failed:
            problems.append(f"{where}: its API server {look.host} cannot be reached ({look.detail[:200]})")
    if problems:
        raise ConfigError(
            f"environment {env.name}: {len(problems)} cluster(s) cannot be used:\n  " + "\n  ".join(problems)
        )


def cluster_machine(nodes: dict[str, dict]) -> dict[str, str]:
    """The machine facts of a run's nodes (scenarios.node_facts), each the distinct values joined."""
    return {
        fact: " | ".join(sorted({str(n.get(fact)) for n in nodes.values() if n.get(fact) is not None}))
        for fact in MACHINE_FACTS
    }


class ClustersTarget(Target):
    kind = "kubernetes"
    can_profile = KubernetesTarget.can_profile
    render = staticmethod(render)

    def __init__(
        self,
        env: Environment,
        scenarios: list[str],
        servers: Sequence[Server] = (),
        commands: Sequence[str] = (),
        log=_log.info,
    ):
        super().__init__(env, scenarios, servers, commands, log)
        assert env.kubernetes is not None  # a kubernetes environment (registry)
        self.settings = env.kubernetes
        grouped: dict[str, list[str]] = {}
        for s in scenarios:
            grouped.setdefault(env.scenarios[s].cluster or "", []).append(s)  # pyright: ignore[reportAttributeAccessIssue] (a KubernetesScenario)
        self.clusters: dict[str, KubernetesTarget] = {}
        for name, names in grouped.items():
            own = cluster_settings(self.settings, name)
            # the quiet windows are this target's, over every cluster at once
            arm = KubernetesTarget(
                env.model_copy(update={"kubernetes": own.model_copy(update={"quiet": None})}),
                names,
                servers,
                commands,
                log,
            )
            arm.cluster_name = name
            self.clusters[name] = arm
        self._cluster_of = {s: name for name, names in grouped.items() for s in names}
        self.apart = self._why_not_side_by_side()
        self.interleaves_scenarios = self.apart is None
        for arm in self.clusters.values():
            arm.keeps_scenarios = self.interleaves_scenarios
        self._quiet: quiet.Quiet | None = None

    def _why_not_side_by_side(self) -> str | None:
        """Why the scenarios cannot stand side by side (then they go in rounds), or None."""
        for name, arm in self.clusters.items():
            shown = name or DEFAULT
            switches = {arm.switch_of(s) for s in arm.scenarios}
            if len(switches) > 1:
                return f"cluster {shown} switches between {len(switches)} pod networks ({', '.join(arm.scenarios)})"
            for s in arm.scenarios:
                sc = self.env.scenarios[s]
                if arm.kept_objects(s):
                    return f"scenario {s} needs {arm.kept_objects(s)} filler Services in its namespace"
                if sc.mesh in shapes.NODE_MESHES:
                    return f"scenario {s} runs node proxies, which capture every pod of its nodes"
            labels = {tuple(sorted(self.env.scenarios[s].namespace_labels.items())) for s in arm.scenarios}  # pyright: ignore[reportAttributeAccessIssue] (a KubernetesScenario)
            if len(labels) > 1:
                return f"the scenarios of cluster {shown} need different namespace labels"
        return None

    def _arm(self, scenario: str) -> KubernetesTarget:
        return self.clusters[self._cluster_of[scenario]]

    # -- life cycle ----------------------------------------------------------------
    def prepare(self) -> None:
        # an interleaved campaign needs every cluster from its first block: all are looked at before any run
        check_clusters(self.env, self.scenarios)
        if self.apart is not None:
            self.log(f"kubernetes: clusters' scenarios run in rounds, not side by side: {self.apart}")
        for arm in self.clusters.values():
            arm.prepare()

    def setup(self) -> None:
        for arm in self.clusters.values():
            arm.setup()
        settings = self._quiet_settings()
        if not settings:
            return
        dirs = {name: Path(q.pid_dir) for name, q in settings.items()}
        keep = {p: "kept running (kubernetes.quiet.keep)" for q in settings.values() for p in q.keep}
        longest = min(q.max_window_s for q in settings.values())
        self._quiet = quiet.Quiet(dirs.pop("", None), keep, longest, self.log, others=dirs)
        self._quiet.start()
        for arm in self.clusters.values():
            arm.share_quiet(self._quiet)

    def _quiet_settings(self) -> dict:
        """Each cluster's quiet settings, of those whose host daemons run on this machine."""
        found = {name: cluster_settings(self.settings, name).quiet for name in self.clusters}
        return {name: q for name, q in found.items() if q is not None}

    def teardown(self) -> None:
        try:
            for arm in self.clusters.values():
                arm.teardown()
        finally:
            if self._quiet is not None:
                self._quiet.close()
                self._quiet = None

    def clean_leftovers(self) -> list[str]:
        return [removed for arm in self.clusters.values() for removed in arm.clean_leftovers()]

    # -- scenarios -----------------------------------------------------------------
    def switch_of(self, scenario: str) -> str:
        return f"{self._cluster_of[scenario]}\n{self._arm(scenario).switch_of(scenario)}"

    def kept_objects(self, scenario: str) -> int:
        return self._arm(scenario).kept_objects(scenario)

    def activate(self, scenario: str) -> None:
        arm = self._arm(scenario)
        arm.activate(scenario)
        placed = arm.placements[scenario]
        placed.details["cluster"] = self._cluster_of[scenario] or DEFAULT
        placed.details["cluster_machine"] = cluster_machine(placed.details.get("nodes", {}))
        self.placements[scenario] = placed

    def placement_for(self, scenario: str, kind: str):
        return self._arm(scenario).placement_for(scenario, kind)

    def profile_unavailable(self, scenario: str) -> str | None:
        return self._arm(scenario).profile_unavailable(scenario)

    def start_server(self, scenario: str, server: Server, cpus: list[int]) -> None:
        self._arm(scenario).start_server(scenario, server, cpus)

    def spawn(self, scenario: str, side: str, argv: list[str]):
        return self._arm(scenario).spawn(scenario, side, argv)

    def datapath_usage(self, scenario: str, reset_peak: bool) -> dict[str, dict]:
        return self._arm(scenario).datapath_usage(scenario, reset_peak)

    def recover(self, scenario: str) -> list[str]:
        return self._arm(scenario).recover(scenario)

    def quiet_window(self, scenario: str, seconds: float, procs: Sequence):
        return self._arm(scenario).quiet_window(scenario, seconds, procs)

    def foreign_snapshot(self, scenario: str):
        return self._arm(scenario).foreign_snapshot(scenario)

    def cpu_snapshot(self, scenario: str, side: str):
        return self._arm(scenario).cpu_snapshot(scenario, side)

    def describe(self) -> dict:
        """The first cluster's facts (the environment's own where it runs scenarios), and every
        cluster's under ``clusters``."""
        described = {name or DEFAULT: arm.describe() for name, arm in self.clusters.items()}
        first = described[DEFAULT] if DEFAULT in described else next(iter(described.values()))
        return {**first, "clusters": described}
