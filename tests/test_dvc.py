"""DVC as users run it beside `dvc repro`: experiments over campaigns, and raw records kept in a
remote. Real dvc and git on a copy of the project, a real campaign on the lab."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import yaml

from benchlib.tables import tidy
from tests.conftest import require_root, venv_env, write_params
from tests.support.projects import committed, run


def files_digest(directory: Path) -> dict[str, str]:
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def test_raw_records_round_trip_through_a_dvc_remote(project_copy, tmp_path):
    require_root()
    write_params(project_copy, "remote-rt", repetitions=3)
    run(project_copy, "dvc", "repro", "collect@local-lab")
    raw = project_copy / "data/raw/remote-rt"
    before_files, before_tables = files_digest(raw), tidy.build_tables(raw)
    remote = tmp_path / "remote"
    run(project_copy, "dvc", "remote", "add", "-d", "store", str(remote))
    run(project_copy, "dvc", "push", "collect@local-lab")
    # gone from the workspace and from the local cache: only the remote has them now
    shutil.rmtree(raw / "local-lab")
    shutil.rmtree(project_copy / ".dvc" / "cache")
    run(project_copy, "dvc", "pull", "collect@local-lab")
    assert files_digest(raw) == before_files
    after_tables = tidy.build_tables(raw)
    assert all(a.equals(b) for a, b in zip(before_tables, after_tables, strict=True))
    # and dvc sees the pulled records as the stage's own: nothing to rerun
    assert "collect@local-lab" not in run(project_copy, "dvc", "status", "collect@local-lab")


def test_dvc_experiments_run_campaigns_and_show_their_metrics(project_copy):
    require_root()
    # the project's params.yaml (dvc reads its analysis and report sections) with a campaign of seconds
    params = yaml.safe_load((project_copy / "params.yaml").read_text())
    short = yaml.safe_load(write_params(project_copy, "exp-base", repetitions=2).read_text())
    (project_copy / "params.yaml").write_text(yaml.safe_dump({**params, **short}, sort_keys=False))
    committed(project_copy)
    run(
        project_copy,
        "dvc",
        "exp",
        "run",
        "-n",
        "three-reps",
        "-S",
        "experiment.campaign=exp-three",
        "-S",
        "experiment.repetitions=3",
        timeout=900,
    )
    shown = json.loads(run(project_copy, "dvc", "exp", "show", "--json"))
    exps = [e for rev in shown for e in (rev.get("experiments") or [])]
    names = {e["name"]: e for e in exps}
    assert "three-reps" in names, shown
    data = names["three-reps"]["revs"][0]["data"]
    assert data["params"]["params.yaml"]["data"]["experiment"]["campaign"] == "exp-three"
    summary = data["metrics"]["reports/metrics.json"]["data"]["summary"]
    n = {key: value["n"] for key, value in summary.items() if key.startswith("exp-three/local-lab/host/rr/")}
    assert n and set(n.values()) == {3.0}, summary


def attempt(project: Path, *argv: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=project, env=venv_env(), capture_output=True, text=True, timeout=timeout)


def test_a_corrupt_or_lost_object_in_the_remote_is_named_by_its_record(project_copy, tmp_path):
    """`dvc pull` trusts a remote unless told to verify; `benchlib verify` names the record and file
    that came back changed, or did not come back, either way."""
    require_root()
    write_params(project_copy, "remote-bad", repetitions=3)
    run(project_copy, "dvc", "repro", "collect@local-lab")
    raw = project_copy / "data/raw/remote-bad/local-lab"
    assert "verify: 3 records of remote-bad are whole" in run(project_copy, "benchlib", "verify")
    remote = tmp_path / "remote"
    run(project_copy, "dvc", "remote", "add", "-d", "store", str(remote))
    run(project_copy, "dvc", "push", "collect@local-lab")
    first, second = sorted(p.parent for p in raw.rglob("meta.json"))[:2]

    def remote_object(path: Path) -> Path:
        md5 = hashlib.md5(path.read_bytes()).hexdigest()
        return remote / "files" / "md5" / md5[:2] / md5[2:]

    corrupt = remote_object(first / "stdout-0.txt")
    corrupt.write_bytes(corrupt.read_bytes().replace(b"1", b"7"))
    rel = lambda record: str(record.relative_to(project_copy))  # noqa: E731

    def pulled_and_verified(pull_fails: bool) -> str:
        shutil.rmtree(raw)
        shutil.rmtree(project_copy / ".dvc" / "cache")
        assert (attempt(project_copy, "dvc", "pull", "collect@local-lab").returncode != 0) == pull_fails
        proc = attempt(project_copy, "benchlib", "verify", "remote-bad")
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        return proc.stderr

    # trusted (DVC's default): the corrupt object comes back as a changed file, without an error
    out = pulled_and_verified(pull_fails=False)
    assert f"{first}/stdout-0.txt: checksum mismatch" in out
    # verified (docs/how-to/dvc.md's recipe): DVC refuses it; so is an object lost from the remote
    run(project_copy, "dvc", "remote", "modify", "store", "verify", "true")
    remote_object(second / "cpu.json").unlink()
    out = pulled_and_verified(pull_fails=True)
    assert out.count("is not in the cache") == 2, out
    assert f"{rel(first)}: stdout-0.txt: missing, and its object" in out
    assert f"{rel(second)}: cpu.json: missing, and its object" in out
    assert "more file(s) are in the cache but not in the workspace" in out
