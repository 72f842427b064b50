"""The test tiers: markers from the fixtures a test uses, and skips that the full run turns into failures."""

import os
import subprocess

import pytest

from tests.conftest import REPO, venv_env

# A plugin that prints each collected test with its markers: one collection of the suite gives every tier.
LIST_MARKERS = """
def pytest_collection_finish(session):
    for item in session.items:
        print("TIERS", item.nodeid, ",".join(sorted({m.name for m in item.iter_markers()})))
"""


def tiers(tmp_path) -> dict[str, set[str]]:
    """node id -> its markers, as `pytest --collect-only` sees them."""
    (tmp_path / "list_markers.py").write_text(LIST_MARKERS)
    env = {**venv_env(), "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run(
        ["python", "-m", "pytest", "--collect-only", "-q", "-p", "list_markers", "-p", "no:cacheprovider"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout[-2000:]
    # a node id may hold spaces (parametrize ids), the markers never do
    rows = [
        line.removeprefix("TIERS ").rsplit(" ", 1) for line in proc.stdout.splitlines() if line.startswith("TIERS ")
    ]
    return {node: set(marks.split(",")) for node, marks in rows}


def modules(ids: set[str]) -> set[str]:
    return {i.split("::")[0] for i in ids}


@pytest.mark.slow  # collects the whole suite
def test_lab_and_cluster_tests_are_outside_the_fast_tier(tmp_path):
    marks = tiers(tmp_path)
    fast = {n for n, m in marks.items() if "unit" in m and "slow" not in m}
    lab = {n for n, m in marks.items() if "lab" in m}
    cluster = {n for n, m in marks.items() if "cluster" in m}
    assert lab and cluster and not fast & lab and not fast & cluster
    assert "tests/test_envoy.py" in modules(lab) and "tests/test_kubernetes.py" in modules(cluster)
    # module fixtures that measure on the lab make their tests lab tests
    assert {"tests/test_pipeline.py", "tests/test_compare.py"} <= modules(lab)
    assert "tests/test_stacks.py" in modules(fast) and "tests/test_fuzz.py" not in modules(fast)  # fuzzing is slow


def test_a_test_that_cannot_run_skips_with_its_reason_or_fails_under_require_all(tmp_path):
    (tmp_path / "test_needs.py").write_text(
        "from tests.conftest import cannot_run\n\ndef test_needs_a_gpu():\n    cannot_run('needs a GPU')\n"
    )
    env = {**venv_env(), "PYTHONPATH": str(REPO)}
    env.pop("BENCHLIB_TEST_REQUIRE_ALL", None)
    args = [
        "python",
        "-m",
        "pytest",
        "-q",
        "-rs",
        "-p",
        "no:cacheprovider",
        "--rootdir",
        str(tmp_path),
        "-c",
        os.devnull,
        str(tmp_path / "test_needs.py"),
    ]
    skipped = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert skipped.returncode == 0 and "needs a GPU" in skipped.stdout, skipped.stdout
    failed = subprocess.run(
        args, cwd=tmp_path, env={**env, "BENCHLIB_TEST_REQUIRE_ALL": "1"}, capture_output=True, text=True
    )
    assert failed.returncode == 1 and "BENCHLIB_TEST_REQUIRE_ALL=1" in failed.stdout, failed.stdout
