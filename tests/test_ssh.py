"""The SSH target against a real OpenSSH server: sshd runs inside each node
namespace of a lab `host` scenario, so ssh, netperf and netserver all talk over
the lab's 198.18.0.0/24 wire and nothing leaves the machine."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from benchlib import collectors
from benchlib.measure import runner
from benchlib.measure.plan import Plan
from benchlib.records import record
from benchlib.settings.environment import Environment
from benchlib.tables import tidy
from benchlib.targets import TargetError
from benchlib.targets.lab import LabTarget, in_ns
from benchlib.targets.ssh import SshTarget, render
from tests.conftest import SHORT_TESTS, require_root, short_params


def _sshd(ns: str, address: str, d, name: str) -> subprocess.Popen:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / f"{name}_host")], check=True)
    cfg = d / f"{name}.conf"
    cfg.write_text(
        f"ListenAddress {address}\nPort 22\nHostKey {d / f'{name}_host'}\n"
        f"AuthorizedKeysFile {d / 'authorized_keys'}\nPidFile {d / f'{name}.pid'}\n"
        "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
    )
    proc = subprocess.Popen(
        ["ip", "netns", "exec", ns, "/usr/sbin/sshd", "-D", "-e", "-f", str(cfg)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    deadline = time.monotonic() + 10
    while not in_ns(ns, "ss", "-Hltn", "sport = :22").strip():
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline, "sshd did not listen"
        time.sleep(0.05)
    return proc


@pytest.fixture(scope="module")
def hosts(tmp_path_factory, lab_env):
    """Two lab nodes, each with a real sshd; yields what an environment.yaml would name."""
    require_root()
    d = tmp_path_factory.mktemp("ssh")
    subprocess.run(["mkdir", "-p", "/run/sshd"], check=True)  # sshd's privilege-separation directory
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / "id")], check=True)
    (d / "authorized_keys").write_text((d / "id.pub").read_text())
    # no servers: the lab starts no netserver of its own; the SSH target starts it
    with LabTarget(lab_env, ["host"], log=lambda m: None) as lab:
        nodes = lab.placement("host").details["nodes"]
        addresses = {1: "198.18.0.1", 2: "198.18.0.2"}
        daemons = [_sshd(nodes[i], addresses[i], d, f"n{i}") for i in (1, 2)]
        known = "".join(f"{addresses[i]} {(d / f'n{i}_host.pub').read_text()}" for i in (1, 2))
        (d / "known_hosts").write_text(known)
        try:
            yield {"dir": d, "nodes": nodes, "addresses": addresses}
        finally:
            for p in daemons:
                p.kill()
                p.wait()


def ssh_env(hosts, known_hosts=None, identity="id") -> Environment:
    d = hosts["dir"]
    host = lambda i: {"host": hosts["addresses"][i], "identity_file": str(d / identity)}  # noqa: E731
    return Environment.model_validate(
        {
            "name": "bare-metal-test",
            "description": "two lab nodes over ssh",
            "target": "ssh",
            "cpus": {"client": [0], "server": [1]},
            "ssh": {
                "client": host(1),
                "server": host(2),
                "known_hosts": str(known_hosts or d / "known_hosts"),
                # the ssh client runs in node 1's namespace, where the lab wire is
                "command": ["ip", "netns", "exec", hosts["nodes"][1], "ssh"],
            },
            "scenarios": {"node-to-node": {"description": "bare-metal baseline"}},
        }
    )


def test_campaign_over_ssh_records_real_netperf_and_stops_the_server(hosts, tmp_path):
    env = ssh_env(hosts)
    params = short_params("ssh", ["node-to-node"], SHORT_TESTS, repetitions=2, retries=1)
    plan = Plan(environment=env, scenarios=["node-to-node"], tests=params.tests)
    target = SshTarget(env, plan.scenarios, log=lambda m: None)
    counts = runner.run_environment(params, plan, target, raw_root=tmp_path, log=lambda m: None)
    assert counts["ok"] == 4 and counts["failed"] == 0, counts

    record = tmp_path / "ssh" / "bare-metal-test" / "node-to-node" / "stream" / "r000"
    meta = json.loads((record / "meta.json").read_text())
    assert meta["target"]["target"] == "ssh"
    assert meta["target"]["versions"]["netperf"].startswith("2.")
    assert meta["placement"]["server_address"] == "198.18.0.2"
    assert meta["placement"]["ssh_server"] == "root@198.18.0.2:22"
    assert meta["commands"][0][:3] == ["netperf", "-H", "198.18.0.2"]
    assert "THROUGHPUT=" in (record / "stdout-0.txt").read_text()
    # the hosts' processes are out of sight; the steal of the run's CPUs is read from the hosts' counters
    assert meta["foreign_cpu"]["measured_cores"] is None and meta["foreign_cpu"]["steal_cores"] >= 0
    assert counts["unwatched"] == 4, counts
    cpu_record = json.loads((record / "cpu.json").read_text())
    busy = {
        side: sum(sum(v) for v in cpu_record["sides"][side]["end"]["counters"].values())
        - sum(sum(v) for v in cpu_record["sides"][side]["start"]["counters"].values())
        for side in ("client", "server")
    }
    assert all(b > 0 for b in busy.values()), busy
    # the server was stopped over ssh: only sshd is left in the server node
    left = subprocess.run(["ip", "netns", "pids", hosts["nodes"][2]], capture_output=True, text=True).stdout.split()
    commands = {open(f"/proc/{p}/comm").read().strip() for p in left}
    assert "netserver" not in commands, commands


def test_a_profiled_campaign_over_ssh_profiles_each_side_on_its_own_host(hosts, tmp_path):
    """perf record runs on each host over ssh; each side keeps its own host's samples on its CPUs,
    within the CPU window mapped onto the host's clock."""
    env = ssh_env(hosts)
    params = short_params("ssh-prof", ["node-to-node"], {"rr": SHORT_TESTS["rr"]}, repetitions=1, retries=1)
    data = params.model_dump(mode="json")
    data["experiment"]["profile_runs"] = 1
    params = type(params).model_validate(data)
    plan = Plan(environment=env, scenarios=["node-to-node"], tests=params.tests)
    counts = runner.run_environment(
        params, plan, SshTarget(env, plan.scenarios, log=lambda m: None), tmp_path, lambda m: None
    )
    assert counts["ok"] == 2 and counts["failed"] == 0, counts

    rec = record.load(tmp_path / "ssh-prof" / "bare-metal-test" / "node-to-node" / "rr" / "p000")
    assert rec.profile["attribution"] == "host" and rec.profile["kernel_symbols"] is True
    assert rec.profile["command"][:7] == ["perf", "record", "-a", "-g", "-k", "CLOCK_BOOTTIME", "-F"]
    # both hosts are this machine's kernel here: the host's clock is this one's, give or take the mapping
    assert all(abs(c["offset_s"] - (_uptime() - time.monotonic())) < 0.5 for c in rec.profile["clock"].values())
    _, rows = tidy.load_profiled(rec, tmp_path)
    tasks = {side: {r["comm"] for r in rows if r["side"] == side} for side in ("client", "server")}
    assert "netperf" in tasks["client"] and "netserver" in tasks["server"], tasks
    # one CPU per side at 499 Hz: at most 499 x window samples each (cpu-clock does not sample an
    # idle tickless CPU, so fewer where a side idles); more would be samples from outside the window
    for side in ("client", "server"):
        n = sum(r["samples"] for r in rows if r["side"] == side)
        assert 0 < n <= 1.1 * 499 * rec.profile["window_s"], (side, n)
    # perf.data is deleted on each host
    assert not list(Path("/tmp").glob("benchlib-perf.*"))


def _uptime() -> float:
    return float(Path("/proc/uptime").read_text().split()[0])


def test_a_host_without_perf_is_named_before_any_run(hosts):
    """The key's forced command runs every command with a PATH of the shell and coreutils alone:
    a host without perf."""
    d = hosts["dir"]
    bare = d / "bin-without-perf"
    bare.mkdir(exist_ok=True)
    for tool in ("sh", "cat", "id"):
        (bare / tool).unlink(missing_ok=True)
        (bare / tool).symlink_to(shutil.which(tool))
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / "id-noperf")], check=True)
    with open(d / "authorized_keys", "a") as keys:
        keys.write(f'command="PATH={bare}; eval \\"$SSH_ORIGINAL_COMMAND\\"" {(d / "id-noperf.pub").read_text()}')
    target = SshTarget(ssh_env(hosts, identity="id-noperf"), ["node-to-node"], log=lambda m: None)
    with pytest.raises(TargetError) as err:
        target.check_profiling()
    lines = str(err.value).splitlines()
    assert lines[0] == "cannot record profiled runs:"
    assert [ln.split(":", 1)[0].strip() for ln in lines[1:]] == [
        "client host root@198.18.0.1",
        "server host root@198.18.0.2",
    ]
    assert all("`perf` is not on PATH" in ln and "apt-get install linux-perf" in ln for ln in lines[1:])


def test_unknown_host_key_is_refused(hosts, tmp_path):
    wrong = tmp_path / "known_hosts"
    wrong.write_text("")  # no key known: StrictHostKeyChecking must refuse to connect
    target = SshTarget(ssh_env(hosts, wrong), ["node-to-node"], log=lambda m: None)
    with pytest.raises(TargetError, match="Host key verification failed"):
        with target:
            pass


def test_a_server_whose_login_never_runs_the_command_fails_within_the_bound(hosts, monkeypatch):
    """sshd runs a key's forced command instead of ours (as a shell startup file waiting for input would
    block it): the server's first line never comes, and the campaign must not wait for ever."""
    d = hosts["dir"]
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / "id-forced")], check=True)
    with open(d / "authorized_keys", "a") as keys:
        keys.write(f'command="sleep 600" {(d / "id-forced.pub").read_text()}')
    monkeypatch.setattr("benchlib.targets.ssh.SERVER_START_TIMEOUT_S", 3)
    target = SshTarget(ssh_env(hosts, identity="id-forced"), ["node-to-node"], log=lambda m: None)
    t0 = time.monotonic()
    with pytest.raises(TargetError, match="netserver on .* did not start: no output within 3 s"):
        target.start_server("node-to-node", collectors.servers(["netperf"])[0], [1])
    assert time.monotonic() - t0 < 3 + 10
    # a command without a terminal outlives its ssh session; this one never said its PID
    subprocess.run(["pkill", "-x", "-f", "sleep 600"], check=True)


def test_rendered_commands_are_the_ones_that_work(hosts):
    items = dict(render(ssh_env(hosts), ["node-to-node"], collectors.servers(["netperf"])))
    assert list(items) == ["client: check", "server: check", "server: start netserver"]
    for key in ("client: check", "server: check"):
        assert subprocess.run(items[key], shell=True, capture_output=True).returncode == 0, key
    assert "-l root" in items["server: start netserver"]
    assert items["server: start netserver"].endswith("netserver -D -4 -p 12865'")


def test_cluster_keys_are_refused_for_ssh():
    with pytest.raises(
        ValueError,
        match=r"scenarios \['x'\]: placement, helm, apply, ready and namespace_labels need "
        r"target kubernetes",
    ):
        Environment.model_validate(
            {
                "name": "e",
                "description": "d",
                "target": "ssh",
                "ssh": {"client": {"host": "a"}, "server": {"host": "b"}},
                "scenarios": {"x": {"description": "d", "placement": "pod-to-pod"}},
            }
        )
