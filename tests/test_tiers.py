"""The test tiers: markers from the fixtures a test uses, and skips that the full run turns into failures."""

import os
import subprocess

from tests.conftest import REPO, venv_env


def collected(marker: str) -> set[str]:
    proc = subprocess.run(
        ["python", "-m", "pytest", "--collect-only", "-q", "-m", marker, "-p", "no:cacheprovider"],
        cwd=REPO,
        env=venv_env(),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout[-2000:]
    return {line for line in proc.stdout.splitlines() if "::" in line}


def modules(ids: set[str]) -> set[str]:
    return {i.split("::")[0] for i in ids}


def test_lab_and_cluster_tests_are_outside_the_fast_tier():
    fast, lab, cluster = collected("unit and not slow"), collected("lab"), collected("cluster")
    assert lab and cluster and not fast & lab and not fast & cluster
    assert "tests/test_envoy.py" in modules(lab) and "tests/test_kubernetes.py" in modules(cluster)
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
