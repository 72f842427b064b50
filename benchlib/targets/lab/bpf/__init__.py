"""tc BPF programs for the lab's ebpf-host-routing scenario (source: host_routing.c).

The object is compiled lazily with clang against Debian's libbpf headers
(libbpf-dev) and cached under a name that carries the source's hash, so an
edited program is rebuilt and a stale object is never loaded.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
from pathlib import Path

from benchlib.base.errors import TargetError
from benchlib.base.files import write_atomically

from ..netns import COMMAND_TIMEOUT_S

SOURCE = Path(__file__).with_name("host_routing.c")
FROM_POD = "tc/from_pod"  # on the node end of the pod veth: pod -> wire
FROM_WIRE = "tc/from_wire"  # on the node's wire device: wire -> pod
COMMANDS = ("clang", "tc")
HEADERS = Path("/usr/include/bpf/bpf_helpers.h")


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "benchlib" / "bpf"


def object_path() -> Path:
    """The compiled object, built on first use."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    obj = cache_dir() / f"host_routing-{digest}.o"
    if obj.exists():
        return obj
    missing = [c for c in COMMANDS if shutil.which(c) is None]
    if not HEADERS.exists():
        missing.append(f"{HEADERS} (Debian package libbpf-dev)")
    if missing:
        raise TargetError(f"bpf: cannot build {SOURCE.name}, missing: {', '.join(missing)} (run scripts/setup.sh)")
    obj.parent.mkdir(parents=True, exist_ok=True)
    # asm/types.h lives in the multiarch include directory on Debian
    multiarch = f"/usr/include/{platform.machine()}-linux-gnu"

    def compile_to(tmp: Path) -> None:
        argv = ["clang", "-O2", "-g", "-target", "bpf", "-I", multiarch, "-c", str(SOURCE), "-o", str(tmp)]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
        if proc.returncode != 0:
            raise TargetError(f"bpf: `{' '.join(argv)}` failed: {proc.stderr.strip()[:2000]}")

    return write_atomically(obj, compile_to)  # concurrent labs never load a half-written object


def attach(ns: str, dev: str, section: str) -> None:
    """Attach ``section`` of the object to ``dev``'s ingress in namespace ``ns``."""
    obj = object_path()
    for argv in (
        ["tc", "qdisc", "add", "dev", dev, "clsact"],
        ["tc", "filter", "add", "dev", dev, "ingress", "bpf", "direct-action", "obj", str(obj), "sec", section],
    ):
        proc = subprocess.run(
            ["ip", "netns", "exec", ns, *argv], capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S
        )
        if proc.returncode != 0:
            raise TargetError(f"bpf: `{' '.join(argv)}` in {ns} failed: {proc.stderr.strip()[-2000:]}")


def attached(ns: str, dev: str) -> list[str]:
    """Names of the BPF programs on ``dev``'s ingress, as the kernel reports them."""
    out = subprocess.run(
        ["ip", "netns", "exec", ns, "tc", "-j", "filter", "show", "dev", dev, "ingress"],
        capture_output=True,
        text=True,
        check=True,
        timeout=COMMAND_TIMEOUT_S,
    ).stdout
    return [
        f["options"]["prog"]["name"]
        for f in json.loads(out or "[]")
        if f.get("kind") == "bpf" and "prog" in f.get("options", {})
    ]
