"""Shared fixtures: the real lab (root, network namespaces, real netperf)."""

from __future__ import annotations

import gc
import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
import yaml

from benchlib import collectors
from benchlib.measure import runner
from benchlib.settings.loading import load_environment
from benchlib.targets.lab import LabTarget, list_namespaces

# fixtures that several test modules use, kept with their concern's helpers in tests/support
pytest_plugins = ["tests.support.records"]

REPO = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"


# Set by CI (and scripts/test.sh without --fast): a test that cannot run here fails instead of skipping,
# so nothing silently stops being tested.
REQUIRE_ALL = os.environ.get("BENCHLIB_TEST_REQUIRE_ALL") == "1"


def cannot_run(reason: str) -> None:
    """Skip a test that this machine or user cannot run, saying why; fail under BENCHLIB_TEST_REQUIRE_ALL."""
    if REQUIRE_ALL:
        pytest.fail(f"{reason} (BENCHLIB_TEST_REQUIRE_ALL=1: every test must run)")
    pytest.skip(reason)


def cpu_hog(cpus: list[int]) -> int:
    """A real CPU hog on ``cpus`` (sha256sum of /dev/zero), started through a shell that exits at once:
    not the harness's child. Returns its pid; the caller kills it."""
    cpu_list = ",".join(map(str, cpus))
    out = subprocess.run(
        ["sh", "-c", f"taskset -c {cpu_list} sha256sum /dev/zero >/dev/null 2>&1 & echo $!"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout)


def require_root() -> None:
    # The lab measures real kernel datapaths: without root (network namespaces) there is nothing honest
    # to test.
    if os.geteuid() != 0:
        cannot_run("needs root (network namespaces, the lab); run scripts/test.sh as root")


# Test tiers, from the fixtures a test uses: cluster (the local Kubernetes cluster), lab (root and the
# network-namespace lab, or a whole campaign), else unit (root-free, seconds). `scripts/test.sh --fast`
# runs the unit tier.
CLUSTER_FIXTURES = {"cluster", "admin", "cilium", "calico", "vpc"}
LAB_FIXTURES = {"lab", "lab_env", "mesh_lab", "envoy_lab", "service_lab", "short_campaign", "project_copy"}
SLOW_FIXTURES = {"short_campaign", "project_copy", "default_report"}


# The cluster modules run after every other test (a cluster's idle daemons would be foreign CPU in a lab
# run's window), in this order: the bridge cluster's modules first, sharing one bring-up
# (tests/local_cluster.bridge_cluster), test_kubernetes last of them as its last test takes the cluster
# down; then those that bring up a pod network of their own and end with a test of its `down`.
CLUSTER_MODULES = ["test_k8s_mesh", "test_own_cluster", "test_kubernetes", "test_cilium", "test_vpc", "test_calico"]


def pytest_collection_modifyitems(config, items):
    # stable: each module's tests stay together and in their order
    items.sort(key=lambda i: CLUSTER_MODULES.index(i.path.stem) if i.path.stem in CLUSTER_MODULES else -1)
    for item in items:
        names = set(item.fixturenames)
        marked = {m.name for m in item.iter_markers()} & {"cluster", "lab"}  # a tier the test names itself
        tier = "cluster" if names & CLUSTER_FIXTURES else "lab" if names & LAB_FIXTURES or marked else "unit"
        item.add_marker(tier)
        if names & SLOW_FIXTURES:
            item.add_marker("slow")


def pytest_collection_finish(session):
    # statsmodels' Holm correction runs a full gc.collect() on every call (each analysis makes several):
    # with the session's modules and collected tests frozen out of the collector's sight, such a call
    # scans what the running test made, not the whole session (measured: 0.2-0.5 s a call otherwise)
    gc.freeze()


@pytest.fixture(scope="session")
def local_cluster_left_up():
    """Takes the local cluster down at the session's end: the modules that share it leave it up for the next."""
    yield
    from tests.local_cluster import cluster_script

    down = cluster_script("down")
    assert down.returncode == 0, down.stderr


@pytest.fixture(scope="session")
def lab_env():
    return load_environment("local-lab")


BASIC_SCENARIOS = ["host", "veth-routed", "bridge", "vxlan"]


@pytest.fixture(scope="session")
def lab(lab_env):
    """The four datapath scenarios, built once for the session and torn down after."""
    require_root()
    with serving_lab(lab_env, BASIC_SCENARIOS, ["netperf"]) as target:
        yield target


def lab_target(env, scenarios: list[str], tools: list[str] = ("netperf",)) -> LabTarget:
    """A lab told the servers and client commands of ``tools``, as `benchlib collect` builds it."""
    return LabTarget(
        env,
        scenarios,
        servers=collectors.servers(tools),
        commands=collectors.client_commands(tools),
        log=lambda m: None,
    )


def serving_lab(env, scenarios: list[str], tools: list[str] = ("netperf",)):
    """The lab entered with the tools' servers running in every scenario (a context manager)."""
    return runner.serving(lab_target(env, scenarios, tools))


@pytest.fixture
def intruder_certificate(tmp_path) -> tuple[Path, Path]:
    """A self-signed certificate and its key, of no CA the lab knows: what a mutual-TLS listener must refuse."""
    cert, key = tmp_path / "intruder.crt", tmp_path / "intruder.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        + ["-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=intruder"],
        check=True,
        capture_output=True,
    )
    return cert, key


def lab_namespaces(lab_id: str) -> list[str]:
    return [ns for ns in list_namespaces() if ns.startswith(lab_id + "-")]


@pytest.fixture
def project_copy(tmp_path) -> Path:
    """A copy of the project (code, pipelines, dvc.yaml) to run campaigns in."""
    return copy_project(tmp_path / "project")


def copy_project(dst: Path) -> Path:
    """A copy of the project in ``dst`` (code, pipelines, dvc.yaml, DVC's config), a git repository."""
    dst.mkdir()
    for name in (
        "benchlib",
        "pipelines",
        "notebooks",
        "scripts",
        "data/reference",
        "dvc.yaml",
        "params.yaml",
        "pyproject.toml",
        ".dvcignore",
    ):
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, dst / name, ignore=shutil.ignore_patterns("__pycache__", "*.ipynb"))
        else:
            shutil.copy2(src, dst / name)
    (dst / ".dvc").mkdir()
    shutil.copy2(REPO / ".dvc" / "config", dst / ".dvc" / "config")
    subprocess.run(["git", "init", "-q"], cwd=dst, check=True)
    return dst


REAL_RAW = REPO / "tests/fixtures/raw/local-cilium-demo-001"  # real records of a local-cilium campaign


def real_campaign(project: Path) -> Path:
    """``project`` holding the real records of REAL_RAW under data/raw/ and the plan they were measured
    with in params.yaml (their scenarios, tests and blocks); returns the campaign directory."""
    cdir = project / "data/raw" / REAL_RAW.name
    shutil.copytree(REAL_RAW, cdir)
    metas = [json.loads(p.read_text()) for p in sorted(cdir.glob("*/*/*/*/meta.json"))]
    (project / "params.yaml").write_text(
        yaml.safe_dump(
            {
                "experiment": {
                    "campaign": REAL_RAW.name,
                    "environments": ["local-cilium"],
                    "repetitions": 1 + max(m["block"] for m in metas),
                },
                # a record's test_params carry every tool's keys; the params file names those of its tool
                "tests": {
                    m["test"]: {
                        k: v
                        for k, v in m["test_params"].items()
                        if v is not None and k in collectors.MODULES[m["test_params"]["tool"]].Spec.model_fields
                    }
                    for m in metas
                },
                "environments": {"local-cilium": {"scenarios": sorted({m["scenario"] for m in metas})}},
                "analysis": {"baseline": "bridge-iptables"},
            }
        )
    )
    return cdir


@pytest.fixture(scope="module")
def real_project(tmp_path_factory) -> Path:
    """A project holding REAL_RAW's records and their plan (real_campaign), made once per module."""
    project = copy_project(tmp_path_factory.mktemp("real") / "project")
    real_campaign(project)
    return project


@pytest.fixture
def real_project_copy(real_project, tmp_path) -> Path:
    """A copy of real_project of the test's own, to damage."""
    return Path(shutil.copytree(real_project, tmp_path / "project", symlinks=True))


def venv_env() -> dict:
    """The environment for subprocesses: this venv's commands first on PATH."""
    env = dict(os.environ)
    env["PATH"] = f"{REPO / '.venv' / 'bin'}:{env['PATH']}"
    return env


def pytest_configure(config):
    # Tests signal their children as a terminal would. Whoever started pytest (nohup, a CI runner's
    # background job) may have left SIGHUP ignored, and a child inherits an ignored signal.
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


RR = {"tool": "netperf", "kind": "TCP_RR", "duration_s": 1, "message_size": 1}

# The experiment settings of a campaign that tests plumbing rather than quiet: other processes' CPU is
# still sampled and recorded, but never makes a run disturbed, so an editor, a build or a niced hog
# beside the suite cannot turn the runs such a test counts into retries and 60 s quiet waits.
# tests/test_disturbance.py measures with the product's thresholds and makes its own disturbance.
TOLERANT = {"foreign_cpu_max": 1024.0, "quiet_wait_s": 0.0}
TOLERANT_YAML = ", ".join(f"{key}: {value}" for key, value in TOLERANT.items())  # inside a params.yaml mapping


def write_params(project: Path, campaign: str, repetitions: int, name: str = "params.yaml") -> Path:
    """A params file in ``project``: one 1 s TCP_RR on the lab's host scenario, the rest defaults."""
    path = project / name
    path.write_text(
        yaml.safe_dump(
            {
                "experiment": {
                    "campaign": campaign,
                    "environments": ["local-lab"],
                    "repetitions": repetitions,
                    "seed": 1,
                    "cpu_trim_s": 0.2,
                    "retries": 0,
                    **TOLERANT,
                },
                "tests": {"rr": RR},
                "environments": {"local-lab": {"scenarios": ["host"]}},
            }
        )
    )
    return path


def unrecorded_default_params(tmp_path: Path) -> Path:
    """The shipped params.yaml under a campaign name with nothing recorded: the plan validate prints
    whether or not the main command has already run in this checkout (as it has in CI)."""
    path = tmp_path / "params.yaml"
    doc = yaml.safe_load((REPO / "params.yaml").read_text())
    doc["experiment"]["campaign"] = f"unrecorded-{tmp_path.name}"
    path.write_text(yaml.safe_dump(doc))
    return path


def short_params(
    campaign: str, scenarios: list[str], tests: dict, repetitions: int = 2, retries: int = 1, tolerant: bool = True
):
    """A short lab campaign's settings; ``tolerant``: other processes' CPU disturbs no run (TOLERANT),
    else the product's thresholds apply."""
    from benchlib.settings.campaign import Params

    return Params.model_validate(
        {
            "experiment": {
                "campaign": campaign,
                "environments": ["local-lab"],
                "repetitions": repetitions,
                "seed": 7,
                "cpu_trim_s": 0.2,
                "retries": retries,
                **(TOLERANT if tolerant else {}),
            },
            "tests": tests,
            "environments": {"local-lab": {"scenarios": scenarios}},
        }
    )


SHORT_TESTS = {
    "stream": {"tool": "netperf", "kind": "TCP_STREAM", "duration_s": 1, "streams": 2, "message_size": 65536},
    "rr": {"tool": "netperf", "kind": "TCP_RR", "duration_s": 1, "message_size": 1},
}


@pytest.fixture(scope="session")
def short_campaign(tmp_path_factory, lab_env):
    """A real two-block campaign (host and bridge, a stream and an RR test) in a temporary raw root."""
    require_root()
    from benchlib.measure.plan import plan_environment
    from benchlib.records import layout

    raw = tmp_path_factory.mktemp("raw")
    params = short_params("short", ["host", "bridge"], SHORT_TESTS)
    plan = plan_environment(params, "local-lab")
    counts = runner.run_environment(params, plan, lab_target(lab_env, plan.scenarios), raw_root=raw, log=lambda m: None)
    return {"raw": raw, "params": params, "plan": plan, "counts": counts, "dir": layout.campaign_dir("short", raw)}


def project_with_environment(tmp_path, monkeypatch, name: str, environment_yaml: str) -> Path:
    """A bare project in tmp_path (cwd) holding one environment, pipelines/<name>/environment.yaml."""
    env_dir = tmp_path / "pipelines" / name
    env_dir.mkdir(parents=True)
    (env_dir / "environment.yaml").write_text(environment_yaml)
    (tmp_path / "dvc.yaml").write_text("stages: {}\n")
    monkeypatch.chdir(tmp_path)
    return env_dir
