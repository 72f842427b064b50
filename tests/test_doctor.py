"""`benchlib doctor` names what is missing, with the fix, and exits 2; a dead cluster is named quickly."""

import os
import shutil
import socket
import subprocess
import time
from contextlib import contextmanager

import yaml

from benchlib.measure import doctor
from benchlib.settings.loading import load_params
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
        "FAIL  netperf: `netperf` is not on PATH: run scripts/setup.sh lab as root (Debian's non-free package "
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
    from benchlib.measure.plan import plan_environment

    return plan_environment(load_params(REPO / "pipelines" / "local-k8s" / "params.yaml"), "local-k8s")


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


# -- set-up profiles: what scripts/setup.sh installs for a campaign ----------------------------------
def shipped_profiles(params: str) -> list[str]:

    return doctor.setup_profiles(load_params(REPO / params))


def test_each_shipped_campaign_needs_the_set_up_profiles_of_its_tools_and_cluster():
    assert shipped_profiles("params.yaml") == ["lab"]  # the README's main command: the lab alone
    assert shipped_profiles("pipelines/local-lab/params-bigtcp.yaml") == ["lab"]
    assert shipped_profiles("pipelines/local-lab/params-mesh.yaml") == ["lab", "mesh"]  # haproxy, fortio
    assert shipped_profiles("pipelines/local-k8s/params.yaml") == ["lab", "mesh", "cluster"]
    assert shipped_profiles("pipelines/local-cilium/params.yaml") == ["lab", "mesh", "cluster", "cilium"]
    # the CNIs built from source that the clusters side by side switch to
    assert shipped_profiles("pipelines/local-clusters/params.yaml") == ["lab", "cluster", "cilium", "vpc"]
    assert "cluster" not in shipped_profiles("pipelines/eks-m6i/params.yaml")  # a cluster of its own


def test_a_local_calico_scenario_needs_the_calico_profile(tmp_path, monkeypatch):
    from benchlib.settings.campaign import Params
    from tests.conftest import project_with_environment

    project_with_environment(
        tmp_path,
        monkeypatch,
        "local-calico",
        "description: Calico on the local cluster\ntarget: kubernetes\ncpus: {client: [0], server: [1]}\n"
        "kubernetes: {kubeconfig: /nowhere, image: bench:1}\n"
        "scenarios:\n  calico:\n    description: pod to pod\n    placement: pod-to-pod\n"
        "    apply: [bash ../../scripts/k8s-local-cluster.sh cni calico]\n    settings: {cni: calico}\n",
    )
    params = Params.model_validate(
        {
            "experiment": {"campaign": "c", "environments": ["local-calico"], "repetitions": 1},
            "tests": LAB_PARAMS["tests"],
            "environments": {"local-calico": {"scenarios": ["calico"]}},
            "analysis": {"baseline": "calico"},
        }
    )
    assert doctor.setup_profiles(params) == ["lab", "cluster", "calico"]


def test_doctor_profiles_prints_them_for_setup_sh():
    proc = subprocess.run(
        ["benchlib", "--params", "pipelines/local-cilium/params.yaml", "doctor", "--profiles"],
        cwd=REPO,
        env=venv_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and proc.stdout == "lab mesh cluster cilium\n", proc.stdout + proc.stderr


def test_setup_sh_names_its_profiles_and_refuses_an_unknown_one():
    usage = subprocess.run(["bash", "scripts/setup.sh", "--help"], cwd=REPO, capture_output=True, text=True)
    assert usage.returncode == 0
    for profile in ("lab", "mesh", "cluster", "bridge", "calico", "cilium", "vpc", "test"):
        assert any(line.startswith(f"  {profile} ") for line in usage.stdout.splitlines()), usage.stdout
    bad = subprocess.run(["bash", "scripts/setup.sh", "clutser"], cwd=REPO, capture_output=True, text=True)
    assert bad.returncode == 2
    assert (
        bad.stderr
        == "setup.sh: unknown profile 'clutser' (one of: lab mesh cluster bridge calico cilium vpc test all)\n"
    )


def test_setup_sh_for_the_default_campaign_installs_the_lab_profile_alone():
    """On this set-up machine: the campaign's profiles read from params.yaml, nothing left to install."""
    require_root()
    proc = subprocess.run(
        ["bash", "scripts/setup.sh", "--params", "params.yaml"],
        cwd=REPO,
        env=venv_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    assert "[setup] profiles for params.yaml: lab\n" in proc.stderr
    assert proc.stderr.endswith("[setup] done (profiles: lab)\n"), proc.stderr
    assert "apt-get install" not in proc.stderr and "go install" not in proc.stderr, proc.stderr


def test_setup_sh_stops_on_an_invalid_params_file_with_its_error(tmp_path):
    require_root()
    bad = tmp_path / "params.yaml"
    bad.write_text("experiment: {campaign: x}\n")
    proc = subprocess.run(
        ["bash", "scripts/setup.sh", "--params", str(bad)],
        cwd=REPO,
        env=venv_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 2, proc.stderr
    assert f"benchlib: error: {bad}: invalid" in proc.stderr and "[setup] done" not in proc.stderr, proc.stderr


def test_every_check_runs_after_one_that_could_not_be_made(tmp_path, monkeypatch):
    """A check that raises fails with its whole message, and the next environment is still checked."""
    fix = "a fix that is longer than any terminal line, " * 5 + "and ends here"

    def broken(plan):
        yield doctor.Check(True, "before", "found")
        raise doctor.TargetError(fix)

    monkeypatch.setitem(doctor.TARGET_CHECKS, "lab", broken)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "nowhere"))
    params = tmp_path / "params.yaml"
    params.write_text(
        yaml.safe_dump(
            {**LAB_PARAMS, "experiment": {**LAB_PARAMS["experiment"], "environments": ["local-lab", "eks-m6i"]}}
        )
    )

    checks = list(doctor.run(load_params(params)))
    assert [c.line() for c in checks[:2]] == ["ok    before: found", f"FAIL  environment local-lab: {fix}"]
    assert any(c.line().startswith(f"FAIL  kubeconfig {tmp_path / 'nowhere'}: does not exist") for c in checks)


def test_each_cni_built_from_source_has_its_build_and_what_its_switch_runs_checked(tmp_path, monkeypatch):
    """The checks come from the plugins' own declarations (k8s-local-cluster.sh cnis), none from a list."""
    from benchlib.targets.kubernetes import local_cluster

    monkeypatch.setenv("BENCHLIB_CACHE", str(tmp_path / "cache"))  # a machine that never built them
    cnis = local_cluster.cnis()
    assert set(cnis) == {p.stem for p in (REPO / "scripts/cluster/cni").glob("*.sh") if "-" not in p.stem}
    assert {n for n, c in cnis.items() if c.built_from_source} == {"calico", "cilium", "vpc"}
    checks = {c.what: c for c in doctor.local_cni_checks(cnis["vpc"])}
    build = checks["the vpc CNI build"]
    assert not build.ok and build.text.startswith(f"no VPC CNI build at {tmp_path}/cache/vpc-cni/bin-vpc1.23.2")
    assert "build vpc" in build.text
    assert {"the vpc CNI build's `go`", "the vpc CNI's `nft`", "the vpc CNI's `unshare`"} <= set(checks)
    cilium = {c.what: c for c in doctor.local_cni_checks(cnis["cilium"])}
    assert not cilium["the cilium CNI build"].ok and "build cilium" in cilium["the cilium CNI build"].text
    assert "the cilium CNI's `bpftool`" in cilium
    assert list(doctor.local_cni_checks(cnis["bridge"])) == []  # nothing beyond the cluster's
