"""Quiet windows' pieces that need no cluster: their settings, the freezer chosen from the mounts, the
daemons chosen from a pid directory, and a real freeze and thaw of a real process by each freezer this
machine has (root). On the real cluster: tests/test_kubernetes.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from benchlib import cli
from benchlib.base.errors import ConfigError
from benchlib.settings.loading import load_environment
from benchlib.targets.kubernetes import quiet
from tests.conftest import project_with_environment, require_root

K8S = "description: d\ntarget: kubernetes\nkubernetes: {image: x, quiet: %s}\nscenarios:\n  s: {description: d, placement: pod-to-pod}\n"


@pytest.mark.parametrize(
    "value, key",
    [
        ("{}", "kubernetes.quiet.pid_dir"),
        ("{pid_dir: /r, max_window_s: 0}", "kubernetes.quiet.max_window_s"),
        ("{pid_dir: /r, keep: apiserver}", "kubernetes.quiet.keep"),
        ("{pid_dir: /r, service_proxies: kube-proxy}", "kubernetes.quiet.service_proxies"),
        ("{pid_dir: /r, frozen: yes}", "kubernetes.quiet.frozen"),
    ],
)
def test_bad_quiet_settings_name_their_key_and_exit_2(tmp_path, monkeypatch, capsys, value, key):
    project_with_environment(tmp_path, monkeypatch, "e", K8S % value)
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_environment("e")
    assert cli.main(["render", "--env", "e"]) == 2
    assert key in capsys.readouterr().err


def test_quiet_windows_are_on_by_default_and_the_shipped_local_cluster_names_its_daemons():
    from benchlib.settings.campaign import Experiment

    assert Experiment(campaign="c", environments=["e"], repetitions=1).quiet_windows is True
    q = load_environment("local-k8s").kubernetes.quiet  # pyright: ignore[reportOptionalMemberAccess]
    assert q is not None and q.pid_dir == "/var/lib/benchlib-k8s/run" and q.keep == ["apiserver-forward"]
    assert q.service_proxies == ["kube-proxy*"]


def test_the_freezer_is_chosen_from_the_mounts():
    root = quiet.CGROUP_ROOT
    v1 = [("cgroup", root / "cpu", {"rw", "cpu"}), ("cgroup", root / "freezer", {"rw", "freezer"})]
    hybrid = [*v1, ("cgroup2", root / "unified", {"rw"})]
    assert quiet.probe([("cgroup2", root, {"rw"})]).version == 2  # unified
    assert quiet.probe(hybrid) == quiet.Freezer(1, root / "freezer")  # v1's freezer where it is mounted
    assert quiet.probe([("cgroup2", root / "unified", {"rw"})]) == quiet.Freezer(2, root / "unified")
    with pytest.raises(quiet.QuietError, match="no cgroup freezer is mounted"):
        quiet.probe([("cgroup", root / "cpu", {"rw", "cpu"})])


def test_daemons_are_read_from_live_pid_files_and_kept_by_glob(tmp_path):
    (tmp_path / "kubelet1.pid").write_text(f"{os.getpid()}\n")
    (tmp_path / "cilium-agent1.pid").write_text(f"{os.getppid()}\n")
    (tmp_path / "gone.pid").write_text("999999999\n")
    (tmp_path / "garbage.pid").write_text("x\n")
    running = quiet.daemons(tmp_path)
    assert running == {"cilium-agent1": os.getppid(), "kubelet1": os.getpid()}
    frozen, kept = quiet.choose(running, {"cilium-*": "needed"})
    assert frozen == {"kubelet1": os.getpid()} and kept == {"cilium-agent1": "needed"}
    # only the Service proxies, for the filler writes: the rest kept, a kept glob still kept
    frozen, kept = quiet.choose(running, {}, only=["cilium-agent*", "kube-proxy*"])
    assert frozen == {"cilium-agent1": os.getppid()} and set(kept) == {"kubelet1"}
    frozen, _ = quiet.choose(running, {"cilium-*": "needed"}, only=["cilium-agent*"])
    assert frozen == {}


def _freezers() -> list[quiet.Freezer]:
    mounts = quiet._mounts()
    found = [quiet.Freezer(1, w) for t, w, o in mounts if t == "cgroup" and "freezer" in o]
    return found + [quiet.Freezer(2, w) for t, w, _ in mounts if t == "cgroup2"]


def _held_by_freezer(pid: int, version: int) -> bool:
    """Whether a freezer holds the task: v1 leaves it in D, v2 parks it asleep in the signal path's trap."""
    if version == 1:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "D"
    return open(f"/proc/{pid}/wchan").read().strip() == "get_signal"


@pytest.mark.lab
@pytest.mark.parametrize("version", [1, 2])
def test_a_real_process_is_frozen_and_thawed_and_a_killed_owner_leaves_it_thawed(tmp_path, version):
    """A real sleep frozen by each freezer this machine mounts; then the owner SIGKILLed mid-window:
    its watchdog thaws the sleep, moves it back and removes the cgroup."""
    require_root()
    freezers = [f for f in _freezers() if f.version == version]
    if not freezers:
        pytest.skip(f"no cgroup v{version} freezer mounted here")
    sleeper = subprocess.Popen(["sleep", "300"])
    try:
        (tmp_path / "sleeper.pid").write_text(f"{sleeper.pid}\n")
        home = freezers[0].cgroup_of(sleeper.pid)
        owner = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import sys, time\n"
                "from pathlib import Path\n"
                "from benchlib.targets.kubernetes import quiet\n"
                f"quiet.probe = lambda: quiet.Freezer({version}, Path({str(freezers[0].root)!r}))\n"
                f"q = quiet.Quiet(Path({str(tmp_path)!r}), {{}}, 30, log=print); q.start()\n"
                "w = q.window(20, {})\n"
                "print(w.result['freeze_state'], sorted(w.result['frozen']), flush=True)\n"
                "time.sleep(60)\n",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert owner.stdout is not None
        assert owner.stdout.readline().split() == ["FROZEN", "['sleeper']"]
        assert freezers[0].cgroup_of(sleeper.pid).name == f"{quiet.PREFIX}{owner.pid}"
        assert _held_by_freezer(sleeper.pid, version)
        owner.kill()
        owner.wait()
        deadline = time.monotonic() + 2
        while freezers[0].cgroup_of(sleeper.pid) != home and time.monotonic() < deadline:
            time.sleep(0.02)
        assert freezers[0].cgroup_of(sleeper.pid) == home
        while _held_by_freezer(sleeper.pid, version) and time.monotonic() < deadline:
            time.sleep(0.02)  # a thawed task may show R for a moment while it restarts its sleep
        assert not _held_by_freezer(sleeper.pid, version)
        assert not list(freezers[0].root.glob(f"{quiet.PREFIX}*"))
    finally:
        sleeper.kill()
        sleeper.wait()
