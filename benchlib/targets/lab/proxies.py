"""Service-mesh proxies in the lab: the shapes of `mesh.shapes`, run by one of two backends, HAProxy
(`haproxy`) and Envoy as Istio configures it (`envoy`), each satisfying `Backend`; the capture rules
installed in the proxies' namespaces; the processes' CPU and peak RSS from /proc. Certificates
(`mesh.certificates`) are made for each lab in the lab's private directory and never recorded.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Protocol

from ..mesh.shapes import Proxy, capture_rules, process_usage
from .addresses import NODES, pod_subnet
from .netns import apply


class Backend(Protocol):
    """What the lab needs of a proxy: both backend modules (`haproxy`, `envoy`) provide these."""

    def version(self) -> str: ...

    def start(self, proxy: Proxy, cpus: list[int], workdir: Path, tls_dir: Path | None) -> subprocess.Popen:
        """Start the proxy in its namespace, pinned to ``cpus`` (the caller waits for its listeners)."""
        ...

    def stats_socket(self, workdir: Path, proxy: Proxy) -> Path:
        """Where the proxy answers for its counters."""
        ...

    def output(self, workdir: Path, proxy: Proxy) -> str:
        """What the proxy logged, for errors."""
        ...

    def bytes_carried(self, sock_path: Path) -> int | None:
        """Bytes carried so far by the proxy's live counters; None where it has none."""
        ...


def usage(pid: int, reset_peak: bool) -> dict[str, int]:
    """The process's CPU ticks so far (user + system) and its peak RSS in KiB.

    With ``reset_peak`` the peak is reset afterwards (clear_refs 5), so the next
    reading is the peak since now."""
    found = process_usage(Path(f"/proc/{pid}/stat").read_text(), Path(f"/proc/{pid}/status").read_text())
    if reset_peak:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    return found


def install_capture(proxy: Proxy, http_ports: list[int]) -> None:
    rules = capture_rules(proxy, http_ports, {i: pod_subnet(i) for i in NODES})
    apply(proxy.namespace, ["iptables-restore", "--noflush"], rules)
