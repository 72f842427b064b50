"""Records as an older runner wrote them."""

from __future__ import annotations

import json

import pytest

from benchlib.records import integrity
from tests.conftest import FIXTURES

# A version-1 record as the runner wrote it before `repetition` was dropped:
# real netperf TCP_RR output, two attempts (the first failed).
V1_META = {
    "schema_version": 1,
    "campaign": "c",
    "environment": "local-lab",
    "scenario": "host",
    "test": "rr",
    "run_id": "local-lab/host/rr/r002",
    "repetition": 2,
    "block": 2,
    "order": 7,
    "tool": "netperf",
    "kind": "TCP_RR",
    "test_params": {
        "tool": "netperf",
        "kind": "TCP_RR",
        "duration_s": 2.0,
        "streams": 1,
        "message_size": 1,
        "timeout_s": None,
        "bitrate": None,
        "qps": None,
        "connection_close": False,
    },
    "commands": [["netperf", "-H", "198.18.0.2"]],
    "exit_codes": [0],
    "started_at": "2026-11-22T10:00:00.250000+00:00",
    "ended_at": "2026-11-22T10:00:02.300000+00:00",
    "outcome": "ok",
    "failure_reason": None,
    "attempts": [
        {"outcome": "failed", "reason": "netperf stream 0 exited 255: x", "started_at": "2026-11-22T09:59:57+00:00"},
        {"outcome": "ok", "reason": None, "started_at": "2026-11-22T10:00:00.250000+00:00"},
    ],
    "placement": {
        "server_address": "198.18.0.2",
        "client_node": "n1",
        "server_node": "n2",
        "client_cpus": [0],
        "server_cpus": [1],
        "topology": "host",
    },
    "target": {"target": "lab", "versions": {"kernel": "6.1.0", "netperf": "2.7.0"}, "clk_tck": 100},
}


def _snapshot(t: float, busy: int) -> dict:
    return {
        "wall": t,
        "mono": t,
        "counters": {"0": [busy, 0, 0, 1000, 0, 0, 0, 0, 0, 0], "1": [busy, 0, 0, 1000, 0, 0, 0, 0, 0, 0]},
    }


@pytest.fixture
def v1_record(tmp_path):
    """A version-1 record in a campaign directory of its own."""
    path = tmp_path / "c" / V1_META["run_id"]
    (path / "failed-attempt-1").mkdir(parents=True)
    (path / "stdout-0.txt").write_text((FIXTURES / "netperf" / "tcp_rr.stdout").read_text())
    (path / "stderr-0.txt").write_text("")
    (path / "failed-attempt-1" / "stdout-0.txt").write_text("netperf: could not establish control connection\n")
    (path / "failed-attempt-1" / "stderr-0.txt").write_text("")
    sides = {
        side: {"node": node, "cpus": [cpu], "start": _snapshot(1.0, 100), "end": _snapshot(2.0, 150)}
        for side, node, cpu in (("client", "n1", 0), ("server", "n2", 1))
    }
    (path / "cpu.json").write_text(json.dumps({"clk_tck": 100, "sides": sides}))
    (path / "meta.json").write_text(json.dumps(V1_META))
    integrity.write_checksums(path)
    return path
