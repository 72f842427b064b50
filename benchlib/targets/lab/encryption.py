"""Encrypted node-to-node paths for pod traffic: WireGuard and IPsec, as Cilium
runs them, and the check that pod traffic really goes through them.

Keys are made for each lab and live only in memory: they reach `wg` and `ip`
on stdin, never in a command line, a file or the record.
"""

from __future__ import annotations

import re
import secrets
import subprocess
import sys

from benchlib.base.errors import TargetError

from .addresses import NODE_IP, OTHER, POD_IP, pod_subnet
from .netns import COMMAND_TIMEOUT_S, apply, apply_ip, in_ns, ip, run

WG_PORT = 51820
# Cilium's IPsec default: AES-GCM as ESP's AEAD (RFC 4106), 128-bit key + 32-bit salt, 128-bit ICV
IPSEC_AEAD, IPSEC_KEY_BYTES, IPSEC_ICV_BITS, IPSEC_REQID = "rfc4106(gcm(aes))", 20, 128, 1
SPI_BASE = 0x1000  # node i's outbound SA has SPI SPI_BASE + i
CLOSED_PORT = 9  # discard: nothing listens on it, so a SYN earns an RST
ROUND_TRIP_TIMEOUT_S = 3


def wireguard(nodes: dict[int, str], mtu: int) -> dict:
    """A WireGuard device per node, peered with the other node for its pod subnet
    (Cilium's WireGuard mode). Returns what the record says about it."""
    private = {i: run(["wg", "genkey"], "wg genkey").strip() for i in nodes}
    public = {i: run(["wg", "pubkey"], "wg pubkey", stdin=private[i]).strip() for i in nodes}
    for i, node in nodes.items():
        j = OTHER[i]
        ip(node, "link", "add", "wg0", "mtu", str(mtu), "type", "wireguard")
        apply(
            node,
            [
                "wg",
                "set",
                "wg0",
                "listen-port",
                str(WG_PORT),
                "private-key",
                "/dev/stdin",
                "peer",
                public[j],
                "allowed-ips",
                pod_subnet(j),
                "endpoint",
                f"{NODE_IP[j]}:{WG_PORT}",
            ],
            private[i] + "\n",
        )
        ip(node, "link", "set", "wg0", "up")
    return {
        "protocol": "wireguard",
        "cipher": "ChaCha20-Poly1305 (Noise_IK, Curve25519)",
        "udp_port": WG_PORT,
        "tunnel_mtu": mtu,
        "keys": "generated per lab, not recorded",
    }


def spi(sender: int) -> int:
    return SPI_BASE + sender


def xfrm_state(a: int, b: int, key: str) -> str:
    """The SA for ESP from node a to node b (a line for `ip -batch`)."""
    return (
        f"xfrm state add src {NODE_IP[a]} dst {NODE_IP[b]} proto esp spi {hex(spi(a))} "
        f"reqid {IPSEC_REQID} mode tunnel aead {IPSEC_AEAD} {key} {IPSEC_ICV_BITS}"
    )


def random_key() -> str:
    return "0x" + secrets.token_hex(IPSEC_KEY_BYTES)


def ipsec(nodes: dict[int, str]) -> dict:
    """ESP in tunnel mode between the node IPs for the pod subnets (Cilium's
    IPsec mode): one SA per direction, each with a random key. Returns what the record says."""
    keys = {(a, OTHER[a]): random_key() for a in nodes}
    for i, node in nodes.items():
        j = OTHER[i]
        tmpl = f"proto esp reqid {IPSEC_REQID} mode tunnel"
        lines = [xfrm_state(a, b, key) for (a, b), key in keys.items()]
        # out: encrypt what leaves for the remote pods; fwd: admit remote pod
        # traffic only if it arrived through the SA (plaintext is dropped)
        lines += [
            f"xfrm policy add src {pod_subnet(i)} dst {pod_subnet(j)} dir out "
            f"tmpl src {NODE_IP[i]} dst {NODE_IP[j]} {tmpl}",
            f"xfrm policy add src {pod_subnet(j)} dst {pod_subnet(i)} dir fwd "
            f"tmpl src {NODE_IP[j]} dst {NODE_IP[i]} {tmpl}",
        ]
        apply_ip(node, lines, f"lab: ip xfrm in {node}")
    return {
        "protocol": "esp",
        "mode": "tunnel",
        "aead": IPSEC_AEAD,
        "key_bits": 8 * IPSEC_KEY_BYTES,
        "icv_bits": IPSEC_ICV_BITS,
        "spi": {f"{a}->{b}": hex(spi(a)) for a, b in keys},
        "keys": "random per lab, not recorded",
    }


# one packet each way: a SYN to a closed port and the RST it earns
_ROUND_TRIP = f"""
import socket, sys
try:
    socket.create_connection((sys.argv[1], {CLOSED_PORT}), timeout={ROUND_TRIP_TIMEOUT_S}).close()
except ConnectionRefusedError:
    pass
except OSError as e:
    sys.exit(str(e))
"""


def _encrypted_count(topology: str, node: str, i: int) -> int:
    """What node i has sent through its encryption so far: bytes to the WireGuard
    peer, or packets through its outbound ESP SA."""
    if topology == "wireguard":
        out = in_ns(node, "wg", "show", "wg0", "transfer")  # "<peer key>\t<rx bytes>\t<tx bytes>"
        return sum(int(line.split()[2]) for line in out.splitlines() if line.strip())
    out = ip(node, "-s", "xfrm", "state", "list", "src", NODE_IP[i], "dst", NODE_IP[OTHER[i]])
    # the "lifetime current" line; the output also holds the key, so it is never logged
    match = re.search(r"(\d+)\(bytes\), (\d+)\(packets\)", out)
    if not match:
        raise TargetError(f"lab: no counters for the ESP SA {NODE_IP[i]} -> {NODE_IP[OTHER[i]]} in {node}")
    return int(match.group(2))


def verify_encrypted(scenario: str, topology: str, nodes: dict[int, str], pods: dict[int, str]) -> None:
    """A path that silently skipped the encryption would be a fake result: prove
    that pod traffic in both directions went through it, or refuse the scenario."""

    def round_trip() -> None:
        proc = subprocess.run(
            ["ip", "netns", "exec", pods[1], sys.executable, "-c", _ROUND_TRIP, POD_IP[2]],
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
        )
        if proc.returncode != 0:
            raise TargetError(
                f"lab: scenario {scenario}: pod {POD_IP[1]} cannot reach pod {POD_IP[2]} "
                f"through {topology}: {proc.stderr.strip()}"
            )

    round_trip()  # the first one also completes WireGuard's handshake, which the counters would include
    before = {i: _encrypted_count(topology, node, i) for i, node in nodes.items()}
    round_trip()
    idle = [node for i, node in nodes.items() if _encrypted_count(topology, node, i) <= before[i]]
    if idle:
        raise TargetError(
            f"lab: scenario {scenario}: pod traffic left {idle} without going through "
            f"{topology} (its counters did not move); refusing to measure an unencrypted path"
        )
