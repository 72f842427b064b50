"""BIG TCP in the real lab: the GSO/GRO sizes are in effect on every link, and
packets above 64 KiB really cross the wire; netkit is refused with the kernel's
own words where the kernel lacks it."""

import json
import re
import struct
import subprocess
import time

import pytest

from benchlib.collectors import iperf3
from benchlib.targets import lab
from benchlib.targets.lab import list_namespaces
from tests.conftest import require_root, serving_lab

BIG = ["big-tcp", "big-tcp-64k", "big-tcp-ipv4", "big-tcp-ipv4-64k"]
SIZE = {"big-tcp": 185000, "big-tcp-64k": 65536, "big-tcp-ipv4": 185000, "big-tcp-ipv4-64k": 65536}


@pytest.fixture(scope="module")
def big_lab(lab_env):
    require_root()
    problems = lab.scenario_problems(lab_env, BIG)
    assert not problems, f"this kernel should run every BIG TCP scenario: {problems}"
    with serving_lab(lab_env, BIG, ["iperf3"]) as target:
        yield target


def wire_tx(node: str) -> tuple[int, int]:
    """(bytes, packets) node 1 has sent on the wire; a veth counts a GSO packet once, at its full size."""
    stats = json.loads(
        subprocess.run(
            ["ip", "-n", node, "-s", "-j", "link", "show", "dev", "eth0"], capture_output=True, text=True, check=True
        ).stdout
    )[0]["stats64"]["tx"]
    return stats["bytes"], stats["packets"]


def stream(target, scenario: str, streams: int) -> float:
    spec = iperf3.Spec(tool="iperf3", kind="TCP_STREAM", duration_s=1, streams=streams)
    pl = target.placement(scenario)
    (inv,) = iperf3.build(spec, pl.server_address, pl.client_cpus, pl.server_cpus)
    out, err = target.spawn(scenario, "client", inv.argv).communicate(timeout=60)
    return iperf3.parse("TCP_STREAM", [out])["throughput"]


@pytest.mark.parametrize("scenario", BIG)
def test_every_link_holds_the_sizes(big_lab, scenario):
    details = big_lab.placement(scenario).details
    held = details["big_tcp"]["links"]
    assert len(held) == 6  # the wire's two ends, and each pod's veth pair
    assert set(held.values()) == {SIZE[scenario]}
    for link in held:  # read back from the kernel, independently of the lab's own check
        ns, dev = link.split("/")
        if details["ip_family"] == 6:
            info = json.loads(
                subprocess.run(
                    ["ip", "-n", ns, "-d", "-j", "link", "show", "dev", dev], capture_output=True, text=True, check=True
                ).stdout
            )[0]
            assert (info["gso_max_size"], info["gro_max_size"]) == (SIZE[scenario],) * 2
        else:
            index = json.loads(
                subprocess.run(
                    ["ip", "-n", ns, "-j", "link", "show", "dev", dev], capture_output=True, text=True, check=True
                ).stdout
            )[0]["ifindex"]
            assert lab.rtnl.ipv4_big_tcp(ns, index) == (SIZE[scenario],) * 2


@pytest.mark.parametrize("scenario", BIG)
def test_packets_above_64k_cross_the_wire_only_with_big_tcp(big_lab, scenario):
    pl = big_lab.placement(scenario)
    node1 = pl.details["nodes"][1]
    assert (":" in pl.server_address) == (pl.details["ip_family"] == 6)
    before = wire_tx(node1)
    gbps = stream(big_lab, scenario, 1)
    after = wire_tx(node1)
    mean = (after[0] - before[0]) / (after[1] - before[1])
    assert gbps > 0.5, gbps  # the path carries a stream (IPv6 forwarding once answered BIG packets with Too Big)
    if SIZE[scenario] > 65536:
        assert mean > 65536, mean  # a mean above 64 KiB: many packets were larger
    else:
        assert mean <= 65536, mean


def pcap_lengths(data: bytes) -> list[int]:
    """The original length of every packet of a pcap file (libpcap's record headers)."""
    off, lengths = 24, []
    while off + 16 <= len(data):
        _, _, captured, original = struct.unpack_from("=IIII", data, off)
        lengths.append(original)
        off += 16 + captured
    return lengths


def test_ipv4_big_packets_are_seen_by_tcpdump_on_the_wire(big_lab, tmp_path):
    """A second witness, for IPv4: the lengths tcpdump captured on the wire. (For IPv6 this
    tcpdump reports at most 64 KiB per packet, so the device counters above are the witness.)"""
    node1 = big_lab.placement("big-tcp-ipv4").details["nodes"][1]
    pcap = tmp_path / "wire.pcap"
    cap = subprocess.Popen(
        ["ip", "netns", "exec", node1, "tcpdump", "-i", "eth0", "-s", "96", "-U", "-w", str(pcap), "tcp"],
        stderr=subprocess.PIPE,
    )
    time.sleep(1)  # tcpdump attaches
    try:
        stream(big_lab, "big-tcp-ipv4", 1)
    finally:
        cap.terminate()
        cap.communicate(timeout=20)
    lengths = pcap_lengths(pcap.read_bytes())
    assert max(lengths) > 65536, max(lengths)
    assert max(lengths) <= SIZE["big-tcp-ipv4"]


def netkit_refusal() -> str:
    ns = "bl-test-netkit-check"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        proc = subprocess.run(["ip", "-n", ns, "link", "add", "nk0", "type", "netkit"], capture_output=True, text=True)
        return proc.stderr.strip() if proc.returncode else ""
    finally:
        subprocess.run(["ip", "netns", "del", ns])


def test_netkit_is_refused_with_the_kernels_own_error(lab_env):
    require_root()
    refusal = netkit_refusal()
    if not refusal:
        pytest.skip("this kernel has netkit: nothing to refuse (and netkit pods are not implemented yet)")
    (reason,) = lab.scenario_problems(lab_env, ["netkit"])["netkit"]
    assert reason.startswith("the kernel's netkit link type") and refusal in reason
    with pytest.raises(lab.TargetError, match=re.escape(refusal)):
        with serving_lab(lab_env, ["netkit"], ["iperf3"]):
            pass
    assert not [ns for ns in list_namespaces() if "-netkit-" in ns]
