"""target: kubernetes: the scenario of a cluster reached through its API (targets/kubernetes/), and the
cluster's settings."""

from __future__ import annotations

import re
from typing import ClassVar, Literal

from pydantic import Field, model_validator

from ...collectors.base import Strict
from ...vocabulary import meshes
from .base import PodScenario, needs_pods

# the mesh shapes target kubernetes runs, with Envoy: sidecars in its pods, or a node proxy pod per node
CLUSTER_MESHES = meshes.WITHOUT_WAYPOINT
CLUSTER_ONLY = "scenarios {names}: placement, helm, apply, ready and namespace_labels need target kubernetes"


class HelmRelease(Strict):
    """A `helm upgrade --install` that switches a cluster's CNI to a scenario."""

    release: str = Field(description="helm release name, e.g. cilium")
    chart: str = Field(description="chart reference, e.g. cilium/cilium or oci://...")
    version: str = Field(description="chart version, pinned (helm --version), e.g. 1.16.5")
    namespace: str = Field(default="kube-system", description="namespace the release goes into (helm --namespace)")
    repo: str | None = Field(default=None, description="chart repository URL (helm --repo)")
    values: str = Field(description="values file, relative to the environment folder")
    extra_args: list[str] = Field(default=[], description="appended as written; the shell expands them, e.g. $(...)")


class KubernetesScenario(PodScenario):
    target: Literal["kubernetes"] = Field(exclude=True)
    SETTINGS: ClassVar[str | None] = "kubernetes"
    # shared: both pods' processes on the client's CPUs, where the two nodes run on one kernel (the
    # local cluster); the target refuses it on nodes of their own machines
    CPU_PLACEMENT: ClassVar[bool] = True
    ELSEWHERE: ClassVar[dict[str, str]] = dict.fromkeys(
        ("placement", "helm", "apply", "ready", "programmed", "namespace_labels"), CLUSTER_ONLY
    )

    placement: Literal["pod-to-pod", "same-node", "host-network", "service"] | None = Field(
        default=None,
        description=(
            "kubernetes (required there): where the client and server pods go: pod-to-pod (on two nodes), "
            "same-node, host-network (on two nodes, in their network namespace) or service (the client reaches "
            "the server through a ClusterIP Service)"
        ),
    )
    helm: HelmRelease | None = Field(
        default=None,
        description=(
            "kubernetes: the helm release that switches the cluster to this scenario, installed after `apply`"
        ),
    )
    apply: list[str] = Field(default=[], description="shell commands run in the environment folder, before helm")
    ready: list[str] = Field(default=[], description="commands that must all succeed before measuring; retried")
    ready_timeout_s: float = Field(
        default=900,
        gt=0,
        le=86_400,
        description=(
            "kubernetes: seconds each apply or helm command may run, and that the `ready` and `programmed` checks "
            "are retried for before the scenario fails; raise it for slow rollouts"
        ),
    )
    programmed: list[str] = Field(
        default=[],
        description=(
            "commands retried, once the scenario's pods and Services exist, until each succeeds: the datapath "
            "has programmed them (e.g. kube-proxy has synced); bounded by ready_timeout_s"
        ),
    )
    keep_running: list[str] = Field(
        default=[],
        description=(
            "host daemons this scenario's datapath needs in user space while it is measured (names of "
            "kubernetes.quiet.pid_dir's pid files, shell globs such as cilium-agent*): never frozen in its quiet "
            "windows. A kernel or eBPF datapath runs without its agent; an agent that proxies traffic (an L7 "
            "proxy, a userspace load balancer) does not"
        ),
    )
    cluster: str | None = Field(
        default=None,
        description=(
            "kubernetes: the cluster this scenario runs on, a name of kubernetes.clusters (its kubeconfig "
            "context); default: the environment's own kubeconfig and context. Scenarios on different clusters "
            "stand side by side: a campaign interleaves their runs in every block"
        ),
    )
    namespace_labels: dict[str, str] = Field(
        default={},
        description=(
            "kubernetes: labels the campaign namespace carries while this scenario runs, set before its pods "
            "are created (a mesh's injection label: istio-injection: enabled, istio.io/dataplane-mode: ambient)"
        ),
    )

    @classmethod
    def check(cls, env) -> None:
        missing = [n for n, sc in env.scenarios.items() if sc.placement is None]
        if missing:
            raise ValueError(
                f"scenarios {missing}: target kubernetes needs placement "
                "(pod-to-pod, same-node, host-network or service)"
            )
        clusters = env.kubernetes.clusters if env.kubernetes else {}
        for n, sc in env.scenarios.items():
            if sc.cluster is not None and sc.cluster not in clusters:
                raise ValueError(
                    f"scenarios.{n}.cluster: {sc.cluster} is not a cluster of kubernetes.clusters "
                    f"({', '.join(sorted(clusters)) or 'none defined'})"
                )
            if sc.mesh:
                check_mesh(n, sc)
            needs_pods(n, sc)
            if sc.services is not None and sc.placement != "service":
                raise ValueError(
                    f"scenarios.{n}.services: needs placement: service (the client goes through "
                    f"the benchmark Service), got placement: {sc.placement}"
                )


def check_mesh(n: str, sc: KubernetesScenario) -> None:
    """ValueError naming the key if a cluster cannot run the scenario's mesh: it injects Envoy sidecars
    into the benchmark pods or runs one Envoy per node (no waypoint)."""
    if sc.mesh not in CLUSTER_MESHES:
        raise ValueError(
            f"scenarios.{n}.mesh: {sc.mesh} runs in the lab only; target kubernetes runs {', '.join(CLUSTER_MESHES)}"
        )
    if sc.proxy != "envoy":
        raise ValueError(f"scenarios.{n}.proxy: target kubernetes runs its sidecars with envoy; set proxy: envoy")
    if sc.placement == "host-network":
        raise ValueError(
            f"scenarios.{n}.mesh: needs pods with a network of their own (placement pod-to-pod, "
            "same-node or service), got placement: host-network"
        )
    if sc.mesh in meshes.NODE_MESHES and sc.placement != "pod-to-pod":
        raise ValueError(
            f"scenarios.{n}.mesh: {sc.mesh} needs placement pod-to-pod (the node proxies carry "
            f"traffic between the two nodes' pods), got placement: {sc.placement}"
        )


class QuietSettings(Strict):
    """target kubernetes: the nodes' host daemons to freeze over each run's CPU window (quiet windows)."""

    pid_dir: str = Field(
        description=(
            "directory of <daemon>.pid files of the nodes' host daemons (control plane, kubelets, containerd, "
            "kube-proxy, CNI agents), on the machine benchlib runs on; the local cluster's: "
            "/var/lib/benchlib-k8s/run"
        ),
    )
    keep: list[str] = Field(
        default=["apiserver-forward"],
        description=(
            "daemons never frozen, as shell globs over the pid files' names; by default the local cluster's "
            "forward of the API server to this machine, which carries benchlib's own connections"
        ),
    )
    service_proxies: list[str] = Field(
        default=[],
        description=(
            "daemons that program Services (kube-proxy, a CNI agent that replaces it), as shell globs over "
            "the pid files' names: frozen while a scenario's filler Services are created or deleted, and "
            "thawed before its programmed check, so each programs the thousands of changes once instead of "
            "competing with the API server after every few; none by default"
        ),
    )
    max_window_s: float = Field(
        default=30,
        gt=0,
        le=300,
        description=(
            "a CPU window longer than this is not quieted (recorded so): a frozen kubelet renews no node lease, "
            "and the controller-manager marks a node whose lease (40 s) expired NotReady once thawed"
        ),
    )


class ClusterSettings(Strict):
    """target kubernetes: one more cluster a campaign measures side by side with the others (an arm of its
    comparisons): what differs from the environment's own cluster. Unset keys are the environment's."""

    kubeconfig: str | None = Field(default=None, description="default: the environment's kubernetes.kubeconfig")
    context: str | None = Field(
        default=None, description="kubeconfig context of this cluster; default: the environment's kubernetes.context"
    )
    quiet: QuietSettings | None = Field(
        default=None,
        description=(
            "this cluster's host daemons, where they run on this machine (a local cluster: "
            "/var/lib/benchlib-k8s-<name>/run): frozen over every run's CPU window, its own runs' included "
            "(but for what the scenario keeps running)"
        ),
    )


CLUSTER_NAME = r"^[a-z][a-z0-9]{0,7}$"  # the local cluster script's names (k8s-local-cluster.sh --cluster)


class KubernetesSettings(Strict):
    """target: kubernetes: which cluster, which image, which nodes."""

    kubeconfig: str | None = Field(default=None, description="default: $KUBECONFIG, else ~/.kube/config")
    context: str | None = Field(default=None, description="kubeconfig context; default: the current one")
    image: str = Field(description="benchmark image (pipelines/images/Containerfile)")
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field(
        default="IfNotPresent", description="Never for images imported by hand (no registry)"
    )
    namespace_prefix: str = Field(
        default="benchlib",
        pattern=r"^[a-z0-9]([a-z0-9-]{0,40}[a-z0-9])?$",
        description=("each collect creates its pods in a namespace named <prefix>-<environment>-<random suffix>"),
    )
    client_node: str | None = Field(default=None, description="node name for the client; with server_node")
    server_node: str | None = Field(default=None, description="node name for the server; with client_node")
    node_selector: dict[str, str] = Field(default={}, description="labels both pods' nodes must carry")
    pod_ready_timeout_s: float = Field(
        default=180,
        gt=0,
        le=86_400,
        description=(
            "wait this long for pods to be ready, and for the EndpointSlices of a scenario's Services "
            "(from the last one created)"
        ),
    )
    cni_agent: dict[str, str] | None = Field(
        default=None, description="{namespace, selector} of the CNI agent pods, for CPU/memory from the metrics API"
    )
    quiet: QuietSettings | None = Field(
        default=None,
        description=(
            "where the nodes' host daemons run on this machine (a local cluster): freeze them over each run's CPU "
            "window (cgroup freezer), thawed before the window's last reading; unset: no quiet windows. "
            "experiment.quiet_windows turns them off for a campaign"
        ),
    )

    clusters: dict[str, ClusterSettings] = Field(
        default={},
        description=(
            "more clusters, by name (lowercase letters and digits, up to 8, a letter first): a scenario's "
            "cluster: names one. Each scenario's commands run with BENCHLIB_K8S_CLUSTER set to its cluster's "
            "name (the local cluster script's --cluster). Two EKS clusters, one per CNI, are two names with "
            "their contexts"
        ),
    )

    @model_validator(mode="after")
    def _nodes_together(self) -> KubernetesSettings:
        bad = [n for n in self.clusters if not re.match(CLUSTER_NAME, n)]
        if bad:
            raise ValueError(
                f"clusters: {', '.join(bad)}: a cluster's name is 1-8 lowercase letters and digits, a letter first"
            )
        if (self.client_node is None) != (self.server_node is None):
            raise ValueError("client_node and server_node go together")
        if self.cni_agent is not None and set(self.cni_agent) != {"namespace", "selector"}:
            raise ValueError(f"cni_agent: needs exactly the keys namespace and selector, got {sorted(self.cni_agent)}")
        return self
