"""pipelines/own-cluster, the template for a cluster a user already has, taken as docs/how-to/own-cluster.md
tells a user to; and `benchlib doctor` against a live API.

The cluster tests treat the local cluster (scripts/k8s-local-cluster.sh) as the user's: they reach it only
through a kubeconfig, the runner's, whose token has just the rights of pipelines/kubernetes/rbac.yaml, and
the image `up` imported on its nodes stands for the user's preloaded image.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from benchlib.tables import tidy
from tests.conftest import REPO, venv_env
from tests.local_cluster import bridge_cluster

TEMPLATE = REPO / "pipelines" / "own-cluster"
LOCAL_IMAGE = "localhost/benchlib/bench:1"  # what `up` imports on the local cluster's nodes
FIX_RBAC = "apply pipelines/kubernetes/rbac.yaml and bind ClusterRole benchlib-runner to your identity"


def edit(path: Path, replacements: list[tuple[str, str]]) -> None:
    text = path.read_text()
    for old, new in replacements:
        assert old in text, f"{path.name} no longer has {old!r}"
        text = text.replace(old, new)
    path.write_text(text)


def users_project(root: Path, image: str = LOCAL_IMAGE, name: str = "my-cluster") -> Path:
    """A project with the user's copy of the template, its SET lines set: the params file."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "dvc.yaml").write_text("stages: {}\n")
    shutil.copytree(REPO / "pipelines", root / "pipelines")
    env_dir = root / "pipelines" / name
    shutil.copytree(TEMPLATE, env_dir)
    edit(
        env_dir / "environment.yaml",
        [
            ("SET: your cluster in one line", "The local cluster, as if it were mine"),
            ("image: registry.example.com/benchlib/bench:1", f"image: {image}"),
            ("image_pull_policy: IfNotPresent", "image_pull_policy: Never"),  # preloaded, no registry
            ("cni: as-installed", "cni: bridge"),
            ("kube_proxy: as-installed", "kube_proxy: iptables"),
        ],
    )
    edit(
        env_dir / "params.yaml",
        [
            ("campaign: own-cluster-001", "campaign: mine-001"),
            ("environments: [own-cluster]", f"environments: [{name}]"),
            ("  own-cluster:", f"  {name}:"),
            ("repetitions: 10", "repetitions: 1"),  # one short collect
            ("duration_s: 10", "duration_s: 2"),
        ],
    )
    return env_dir / "params.yaml"


def benchlib(project: Path, params: Path, *args: str, kubeconfig: Path | str, timeout: float = 600):
    return subprocess.run(
        ["benchlib", "--params", str(params), *args],
        cwd=project,
        env={**venv_env(), "KUBECONFIG": str(kubeconfig)},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# -- the template, without a cluster ---------------------------------------------------------------
def test_the_template_validates_and_renders_as_shipped():
    params = TEMPLATE / "params.yaml"
    validate = subprocess.run(
        ["benchlib", "--params", str(params), "validate"], cwd=REPO, env=venv_env(), capture_output=True, text=True
    )
    assert validate.returncode == 0, validate.stderr
    assert "own-cluster: 2 scenarios ['host-network', 'pod-to-pod'], 3 tests" in validate.stdout, validate.stdout
    render = subprocess.run(
        ["benchlib", "render", "--env", "own-cluster"], cwd=REPO, env=venv_env(), capture_output=True, text=True
    )
    assert render.returncode == 0, render.stderr
    assert "image: registry.example.com/benchlib/bench:1" in render.stdout


def test_every_line_a_user_must_set_is_marked():
    env = (TEMPLATE / "environment.yaml").read_text()
    params = (TEMPLATE / "params.yaml").read_text()
    marked = [line for line in (env + params).splitlines() if "SET" in line]
    for what in (
        "your cluster in one line",
        "kubeconfig",
        "image",
        "what your cluster runs",
        "campaign",
        "environments",
    ):
        assert any(what in line for line in marked), f"no SET comment for {what}: {marked}"
    assert yaml.safe_load(env)["kubernetes"].get("kubeconfig") is None  # unset: $KUBECONFIG, as the user has it


def test_a_users_copy_validates(tmp_path):
    params = users_project(tmp_path / "project")
    proc = benchlib(tmp_path / "project", params, "validate", kubeconfig=tmp_path / "unused")
    assert proc.returncode == 0, proc.stderr
    assert "my-cluster: 2 scenarios" in proc.stdout and "= 6 runs" in proc.stdout, proc.stdout


# -- against the local cluster -----------------------------------------------------------------------
cluster = pytest.fixture(scope="module", name="cluster")(bridge_cluster)


def test_the_users_copy_passes_doctor_and_collects_on_their_cluster(cluster, tmp_path):
    project = tmp_path / "project"
    params = users_project(project)
    runner_kubeconfig = cluster / "runner.kubeconfig"
    doctor = benchlib(project, params, "doctor", kubeconfig=runner_kubeconfig, timeout=120)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    lines = doctor.stdout.splitlines()
    assert f"ok    kubeconfig {runner_kubeconfig}: loads; API server https://127.0.0.1:16443" in lines, lines
    assert any(ln.startswith("ok    RBAC: may create namespaces") for ln in lines), lines
    assert any(ln.startswith("ok    nodes: 2 ready with any labels") for ln in lines), lines
    assert any(ln.startswith(f"ok    image {LOCAL_IMAGE}: present on ") for ln in lines), lines
    collect = benchlib(project, params, "collect", "--env", "my-cluster", kubeconfig=runner_kubeconfig)
    assert collect.returncode == 0, collect.stderr[-3000:]
    assert (
        collect.stderr.splitlines()[-1]
        == "collect: my-cluster: 6 ok, 0 failed, 0 disturbed by steal; other processes' CPU not measured in 6 run(s) "
        "(this target cannot tell them apart), 0 recorded before, 6 planned"
    )
    runs, _ = tidy.build_tables(project / "data" / "raw" / "mine-001")
    assert set(runs["scenario"]) == {"host-network", "pod-to-pod"} and set(runs["outcome"]) == {"ok"}
    # the nodes' processes are out of sight through the API; the steal is read from their counters
    metas = [json.loads(p.read_text()) for p in (project / "data" / "raw" / "mine-001").rglob("meta.json")]
    assert len(metas) == 6 and all(m["foreign_cpu"]["measured_cores"] is None for m in metas), metas
    assert all(m["foreign_cpu"]["steal_cores"] >= 0 for m in metas) and runs["foreign_cpu"].is_null().all()


def kubeconfig_with_token(cluster: Path, path: Path, token: str) -> Path:
    """The runner's kubeconfig (server, CA) with another identity's bearer token."""
    config = yaml.safe_load((cluster / "runner.kubeconfig").read_text())
    config["users"][0]["user"] = {"token": token}
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def test_doctor_names_an_identity_without_the_rbac_with_the_fix(cluster, tmp_path):
    """A ServiceAccount nothing is bound to: what the runner is before rbac.yaml is applied."""
    import kubernetes

    admin = kubernetes.client.CoreV1Api(
        kubernetes.config.new_client_from_config(config_file=str(cluster / "admin.kubeconfig"))
    )
    name = "benchlib-doctor-nobody"
    admin.create_namespaced_service_account("default", {"metadata": {"name": name}})
    try:
        token = admin.create_namespaced_service_account_token(
            name, "default", {"spec": {"audiences": [], "expirationSeconds": 600}}
        ).status.token
        params = users_project(tmp_path / "project")
        doctor = benchlib(
            tmp_path / "project", params, "doctor", kubeconfig=kubeconfig_with_token(cluster, tmp_path / "kc", token)
        )
    finally:
        admin.delete_namespaced_service_account(name, "default")
    assert doctor.returncode == 2, doctor.stdout + doctor.stderr
    lines = doctor.stdout.splitlines()
    rbac = next((ln for ln in lines if ln.startswith("FAIL  RBAC: ")), None)
    assert rbac == (
        "FAIL  RBAC: denied: create namespaces, delete namespaces, list namespaces, get nodes, list nodes, "
        f"create rolebindings, bind clusterroles benchlib-workload: {FIX_RBAC}"
    ), lines
    assert any(ln.startswith("FAIL  nodes: cannot list them (403 ") for ln in lines), lines
    assert lines[-1].startswith("doctor: ") and "fix the" in lines[-1], lines


def test_doctor_names_a_token_the_api_refuses(cluster, tmp_path):
    params = users_project(tmp_path / "project")
    kubeconfig = kubeconfig_with_token(cluster, tmp_path / "kc", "not-a-token-of-this-cluster")
    doctor = benchlib(tmp_path / "project", params, "doctor", kubeconfig=kubeconfig, timeout=120)
    assert doctor.returncode == 2, doctor.stdout + doctor.stderr
    line = next((ln for ln in doctor.stdout.splitlines() if ln.startswith("FAIL  API server ")), None)
    assert line is not None and "refuses the kubeconfig's credentials (401 Unauthorized): renew the token" in line, (
        doctor.stdout
    )


def test_doctor_names_an_image_the_nodes_lack_under_policy_never(cluster, tmp_path):
    params = users_project(tmp_path / "project", image="localhost/benchlib/absent:1")
    doctor = benchlib(tmp_path / "project", params, "doctor", kubeconfig=cluster / "runner.kubeconfig", timeout=120)
    assert doctor.returncode == 2, doctor.stdout + doctor.stderr
    line = next(ln for ln in doctor.stdout.splitlines() if ln.startswith("FAIL  image localhost/benchlib/absent:1"))
    assert "image_pull_policy is Never: import it there" in line, line
