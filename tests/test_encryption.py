"""The wireguard and ipsec scenarios: probed before anything is built, refused
where the kernel lacks them, and encrypted end to end where it has them."""

import json
import re
import subprocess

import pytest
import yaml

from benchlib.collectors import netperf
from benchlib.targets import lab
from benchlib.targets.lab import list_namespaces
from benchlib.targets.lab.addresses import NODE_IP, OTHER
from tests.conftest import REPO, SHORT_TESTS, require_root, serving_lab, short_params, venv_env

ENCRYPTED = ["wireguard", "ipsec"]


def kernel_refusal(scenario: str) -> str | None:
    """The kernel's own answer to what the scenario creates, tried here without
    benchlib's probe (None when the kernel accepts it)."""
    ns = "bl-test-encryption-check"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        if scenario == "wireguard":
            argv = ["ip", "-n", ns, "link", "add", "wgt", "type", "wireguard"]
        else:
            argv = [
                "ip",
                "-n",
                ns,
                "xfrm",
                "state",
                "add",
                "src",
                "198.18.0.1",
                "dst",
                "198.18.0.2",
                "proto",
                "esp",
                "spi",
                "0x99",
                "mode",
                "tunnel",
                "aead",
                "rfc4106(gcm(aes))",
                "0x" + "00" * 20,
                "128",
            ]
        proc = subprocess.run(argv, capture_output=True, text=True)
        return proc.stderr.strip() if proc.returncode != 0 else None
    finally:
        subprocess.run(["ip", "netns", "del", ns])


@pytest.fixture(scope="module")
def refusals():
    require_root()
    return {sc: kernel_refusal(sc) for sc in ENCRYPTED}


def test_probe_agrees_with_the_kernel_and_quotes_its_error(lab_env, refusals):
    problems = lab.scenario_problems(lab_env, ENCRYPTED)
    for sc, refusal in refusals.items():
        if refusal is None:
            assert sc not in problems
        else:
            (reason,) = problems[sc]
            assert refusal in reason
    if refusals["wireguard"]:
        assert problems["wireguard"][0].startswith("the kernel's WireGuard module")
    if refusals["ipsec"]:
        assert problems["ipsec"][0].startswith("IPsec ESP with AES-GCM")
    assert not [ns for ns in list_namespaces() if ns.endswith("-probe")]


def test_collect_naming_them_stops_before_building_anything(project_copy, refusals):
    missing = [sc for sc, refusal in refusals.items() if refusal]
    if not missing:
        pytest.skip("this kernel has WireGuard and IPsec ESP with AES-GCM: nothing to refuse")
    params = short_params("encryption-refused", ["host", *ENCRYPTED], {"rr": SHORT_TESTS["rr"]}, repetitions=1)
    (project_copy / "params.yaml").write_text(yaml.safe_dump(params.model_dump(mode="json"), sort_keys=False))
    proc = subprocess.Popen(
        ["benchlib", "collect", "--env", "local-lab"],
        cwd=project_copy,
        env=venv_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, err
    for sc in missing:
        assert re.search(rf"scenario {sc} needs .*: {re.escape(refusals[sc])}\)$", err, re.M), err
    # its labs would be named bl-<pid>_<n>-...: none was created, none is left
    assert not [ns for ns in list_namespaces() if ns.startswith(f"bl-{proc.pid}_")]
    assert not list((project_copy / "data" / "raw").rglob("meta.json"))  # not even the host runs
    assert "scenario host" not in err


def test_lab_probe_lists_them_as_unavailable(refusals):
    proc = subprocess.run(["benchlib", "lab", "probe"], cwd=REPO, env=venv_env(), capture_output=True, text=True)
    ready = re.search(r"can run \d+ of \d+ scenarios (\[.*?\])", proc.stdout).group(1)
    assert "'host'" in ready
    for sc, refusal in refusals.items():
        if refusal:
            assert f"cannot run scenario {sc}: needs" in proc.stdout and refusal in proc.stdout
            assert f"'{sc}'" not in ready
        else:
            assert f"'{sc}'" in ready
    assert proc.returncode == (1 if any(refusals.values()) else 0), proc.stdout + proc.stderr


def encrypted_packets(scenario: str, node: str, i: int) -> int:
    """Packets node i decrypted from WireGuard (wg0 rx), or sent through its outbound ESP SA."""
    if scenario == "wireguard":
        link = json.loads(
            subprocess.run(
                ["ip", "-n", node, "-j", "-s", "link", "show", "wg0"], capture_output=True, text=True, check=True
            ).stdout
        )[0]
        return link["stats64"]["rx"]["packets"]
    out = subprocess.run(
        ["ip", "-n", node, "-s", "xfrm", "state", "list", "src", NODE_IP[i], "dst", NODE_IP[OTHER[i]]],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return int(re.search(r"\d+\(bytes\), (\d+)\(packets\)", out).group(1))


def secret_key(scenario: str, node: str) -> str:
    """Node 1's private key (wireguard) or the key of its outbound SA (ipsec), as the kernel holds it."""
    if scenario == "wireguard":
        argv = ["ip", "netns", "exec", node, "wg", "show", "wg0", "private-key"]
        return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip()
    out = subprocess.run(
        ["ip", "-n", node, "xfrm", "state", "list", "src", NODE_IP[1], "dst", NODE_IP[2]],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return re.search(r"aead \S+ 0x([0-9a-f]+)", out).group(1)


@pytest.mark.parametrize("scenario", ENCRYPTED)
def test_encrypted_scenario_carries_netperf_through_the_cipher(lab_env, refusals, scenario):
    if refusals[scenario]:
        pytest.skip(
            f"this kernel cannot run {scenario} ({refusals[scenario]}): the probe refuses it, "
            "so the encrypted path is not exercised on this machine"
        )
    with serving_lab(lab_env, [scenario]) as target:
        pl = target.placement(scenario)
        nodes = pl.details["nodes"]
        assert secret_key(scenario, nodes[1]) not in json.dumps(pl.details)  # recorded in meta.json
        before = {i: encrypted_packets(scenario, nodes[i], i) for i in (1, 2)}
        inv = netperf.commands("TCP_RR", pl.server_address, 2, 1, 1, pl.client_cpus, pl.server_cpus)[0]
        out, _ = target.spawn(scenario, "client", inv.argv).communicate(timeout=30)
        rate = netperf.parse("TCP_RR", [out])["transaction_rate"]
        assert rate > 100
        # every request and every response is one packet through the cipher
        for i in (1, 2):
            assert encrypted_packets(scenario, nodes[i], i) - before[i] >= 0.9 * rate * 2
