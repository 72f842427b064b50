"""`benchlib doctor` names what is missing, with the fix, and exits 2; a dead cluster is named quickly."""

import os
import shutil
import socket
import subprocess
import time
from contextlib import contextmanager

import yaml

from benchlib import doctor
from tests.conftest import REPO, require_root, venv_env

LAB_PARAMS = {
    "experiment": {"campaign": "doctor-test", "environments": ["local-lab"], "repetitions": 1},
    "tests": {"tcp_rr": {"tool": "netperf", "kind": "TCP_RR", "duration_s": 2, "message_size": 1}},
    "environments": {"local-lab": {"scenarios": ["host"]}},
    "analysis": {"baseline": "host"},
}


def run_doctor(params, env: dict, timeout: float = 120) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    proc = subprocess.run(
        ["benchlib", "--params", str(params), "doctor"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return proc, time.monotonic() - start


def test_a_missing_tool_is_named_with_its_fix(tmp_path):
    """PATH without netperf (everything else the lab's host scenario runs is there)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("ip", "sysctl", "ss", "taskset", "netserver", "git"):
        found = shutil.which(name, path=os.environ["PATH"] + ":/usr/sbin:/sbin")
        assert found, f"{name} is needed for this test"
        (bin_dir / name).symlink_to(found)
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(LAB_PARAMS))
    env = {**venv_env(), "PATH": f"{REPO / '.venv' / 'bin'}:{bin_dir}"}
    proc, _ = run_doctor(params, env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert (
        "FAIL  netperf: `netperf` is not on PATH: run scripts/setup.sh as root (Debian's non-free package "
        "netperf)" in lines
    ), proc.stdout
    assert f"ok    server `netserver`: {bin_dir / 'netserver'}" in lines, proc.stdout
    assert lines[-1].startswith("doctor: ") and "fix the" in lines[-1]


def test_every_check_passes_with_the_tools_on_path(tmp_path):
    require_root()  # the lab's checks need network namespaces
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(LAB_PARAMS))
    proc, _ = run_doctor(params, venv_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert any(line.startswith("ok    netperf: 2.") for line in proc.stdout.splitlines()), proc.stdout


def kubeconfig(path, server: str) -> str:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "dead",
                "clusters": [{"name": "dead", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
                "users": [{"name": "u", "user": {"token": "not-a-token"}}],
                "contexts": [{"name": "dead", "context": {"cluster": "dead", "user": "u"}}],
            }
        )
    )
    return str(path)


@contextmanager
def closed_port():
    """A loopback port nobody listens on (bound, so nothing else takes it meanwhile): connections are refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


@contextmanager
def silent_port():
    """A loopback port that accepts connections (the kernel's backlog) and never says a word."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield s.getsockname()[1]


def test_an_unreachable_cluster_is_named_with_its_fix(tmp_path):
    """eks-m6i takes its kubeconfig from KUBECONFIG: here one whose API server port is closed."""
    with closed_port() as port:
        env = {**venv_env(), "KUBECONFIG": kubeconfig(tmp_path / "kubeconfig", f"https://127.0.0.1:{port}")}
        proc, took = run_doctor(REPO / "pipelines" / "eks-m6i" / "params.yaml", env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = next(
        (ln for ln in proc.stdout.splitlines() if ln.startswith(f"FAIL  API server https://127.0.0.1:{port}")), None
    )
    assert line, proc.stdout
    assert "Connection refused" in line and "start the cluster" in line and "eks-m6i/environment.yaml" in line, line
    assert f"ok    kubeconfig {tmp_path / 'kubeconfig'}: loads" in proc.stdout
    assert took < 30, took


def test_a_silent_api_server_is_given_up_on_after_the_timeout(tmp_path):
    with silent_port() as port:
        env = {**venv_env(), "KUBECONFIG": kubeconfig(tmp_path / "kubeconfig", f"https://127.0.0.1:{port}")}
        proc, took = run_doctor(REPO / "pipelines" / "eks-m6i" / "params.yaml", env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert (
        f"FAIL  API server https://127.0.0.1:{port}: cannot be reached (timeout {doctor.API_TIMEOUT_S:g} s: "
        in proc.stdout
    )
    assert "timed out" in proc.stdout.lower(), proc.stdout
    assert took < doctor.API_TIMEOUT_S + 25, took  # one attempt, not urllib3's retries


def test_a_missing_kubeconfig_is_named(tmp_path):
    env = {**venv_env(), "KUBECONFIG": str(tmp_path / "nowhere")}
    proc, _ = run_doctor(REPO / "pipelines" / "eks-m6i" / "params.yaml", env)
    assert proc.returncode == 2
    assert f"FAIL  kubeconfig {tmp_path / 'nowhere'}: does not exist" in proc.stdout, proc.stdout


def node(name: str, labels: dict, images: list[str], ready: bool = True):
    from kubernetes.client import V1ContainerImage, V1Node, V1NodeCondition, V1NodeStatus, V1ObjectMeta

    return V1Node(
        metadata=V1ObjectMeta(name=name, labels=labels),
        status=V1NodeStatus(
            conditions=[V1NodeCondition(type="Ready", status="True" if ready else "False")],
            images=[V1ContainerImage(names=images)],
        ),
    )


def local_k8s_plan():
    from benchlib import config
    from benchlib.plan import plan_environment

    return plan_environment(config.load_params(REPO / "pipelines" / "local-k8s" / "params.yaml"), "local-k8s")


def test_the_placements_need_two_ready_nodes_and_the_image_on_them():
    plan = local_k8s_plan()  # image_pull_policy Never, no node_selector
    image = plan.environment.kubernetes.image
    good = [node("n1", {}, [image]), node("n2", {}, [f"docker.io/library/{image}", "busybox"])]
    assert [c.ok for c in doctor.node_checks(plan, good)] == [True, True]
    checks = list(doctor.node_checks(plan, [node("n1", {}, [image]), node("n2", {}, [image], ready=False)]))
    assert not checks[0].ok and "1 ready with any labels (n1)" in checks[0].text and "need 2" in checks[0].text
    lacking = list(doctor.node_checks(plan, [node("n1", {}, [image]), node("n2", {}, ["other:1"])]))
    assert lacking[1].what == f"image {image}" and not lacking[1].ok
    assert lacking[1].text.startswith("not on n2 and image_pull_policy is Never")
