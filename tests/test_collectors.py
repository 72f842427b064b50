"""Every collector module provides what the runner and the tidy step call (collectors.Collector)."""
import inspect

import pytest

from benchlib import collectors
from benchlib.collectors import Collector, Server

TOOLS = ("netperf", "iperf3", "fortio", "dns")


@pytest.mark.parametrize("tool", TOOLS)
def test_collector_module_satisfies_the_protocol(tool):
    module = collectors.get(tool)
    assert isinstance(module, Collector)
    assert module.KINDS and all(isinstance(k, str) for k in module.KINDS)
    assert module.SERVER is None or isinstance(module.SERVER, Server)
    assert module.VERSION_COMMAND and all(isinstance(w, str) for w in module.VERSION_COMMAND)
    for name in ("version", "build", "parse", "warmup_s", "expected_wall_s"):
        declared = [p for p in inspect.signature(getattr(Collector, name)).parameters if p != "self"]
        assert len(inspect.signature(getattr(module, name)).parameters) == len(declared), (tool, name)


def test_servers_and_ports_come_from_the_collectors():
    servers = collectors.servers(["netperf", "iperf3", "netperf"])
    assert [s.name for s in servers] == ["netserver", "iperf3"]  # once each, in order
    netserver = servers[0]
    assert (12865, "tcp") in netserver.ports() and (12866, "tcp") in netserver.ports()
    assert collectors.client_commands(["dns", "netperf"]) == ["dnsperf", "netperf"]
    with pytest.raises(KeyError, match="no collector for tool 'ping'"):
        collectors.get("ping")
