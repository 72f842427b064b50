"""Envoy as the lab's mesh proxy (a `proxies.Backend`): the bootstraps of `mesh.envoy`, each in its
proxy's own directory (owned by the proxy's uid, keys mode 600), validated by Envoy before any run,
run in the proxy's namespace on its side's CPUs with its admin interface on a unix socket there.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import subprocess
from pathlib import Path

from ...base.errors import TargetError
from ..mesh import envoy as config
from ..mesh.shapes import PROXY_UID, Proxy

version = config.version  # the Backend's version(): the installed binary's


def proxy_dir(workdir: Path, proxy: Proxy) -> Path:
    return workdir / f"{proxy.name}-envoy"


def stats_socket(workdir: Path, proxy: Proxy) -> Path:
    """Its admin interface, a unix socket in its directory."""
    return proxy_dir(workdir, proxy) / "admin.sock"


def log_path(workdir: Path, proxy: Proxy) -> Path:
    return proxy_dir(workdir, proxy) / "envoy.log"


def _owned(path: Path, mode: int) -> None:
    os.chown(path, PROXY_UID, PROXY_UID)
    path.chmod(mode)


def prepare(proxy: Proxy, workdir: Path, tls_dir: Path | None) -> Path:
    """The proxy's directory, owned by the proxy's uid: its bootstrap, its certificate and key (mode
    600) and the CA's certificate. Returns the bootstrap's path."""
    d = proxy_dir(workdir, proxy)
    d.mkdir(mode=0o700, exist_ok=True)  # exists when a proxy that died is started again
    _owned(d, 0o700)
    for parent in (workdir, workdir.parent):  # the proxy's uid must reach its directory, not list others
        parent.chmod(parent.stat().st_mode | 0o111)
    files = None
    if tls_dir:
        files = d
        for name in (f"{proxy.identity}.crt", f"{proxy.identity}.key", "ca.crt"):
            shutil.copyfile(tls_dir / name, d / name)
            _owned(d / name, 0o600)
    stats_socket(workdir, proxy).unlink(missing_ok=True)  # a dead proxy's socket would stop its successor's
    cfg = d / "envoy.json"
    cfg.write_text(
        json.dumps(
            config.bootstrap(proxy, config.admin_pipe(stats_socket(workdir, proxy)), files, "benchlib-lab"), indent=1
        )
    )
    _owned(cfg, 0o600)
    return cfg


def _command(cfg: Path, log: Path, fd: int, *extra: str) -> list[str]:
    # The binary is passed as an open descriptor, so the proxy's uid need not reach the project's venv,
    # through a link named envoy in the proxy's directory, so the process is named envoy (its comm).
    exe = cfg.parent / "envoy"
    exe.unlink(missing_ok=True)
    exe.symlink_to(f"/proc/self/fd/{fd}")
    return [
        "setpriv",
        f"--reuid={PROXY_UID}",
        f"--regid={PROXY_UID}",
        "--clear-groups",
        str(exe),
        "-c",
        str(cfg),
        "--concurrency",
        str(config.CONCURRENCY),
        "--disable-hot-restart",
        "-l",
        "warning",
        "--log-path",
        str(log),
        *extra,
    ]


def validate(proxy: Proxy, cfg: Path) -> None:
    """`envoy --mode validate` on the bootstrap, as the proxy's uid: refuse a config before any run."""
    with open(config.binary(), "rb") as exe:
        fd = exe.fileno()
        r = subprocess.run(
            _command(cfg, cfg.with_suffix(".validate.log"), fd, "--mode", "validate"),
            capture_output=True,
            text=True,
            timeout=60,
            pass_fds=(fd,),
        )
    if r.returncode != 0:
        raise TargetError(
            f"lab: Envoy refused the bootstrap of {proxy.name} ({cfg}): {(r.stderr or r.stdout).strip()[-500:]}"
        )


def start(proxy: Proxy, cpus: list[int], workdir: Path, tls_dir: Path | None) -> subprocess.Popen:
    """Validate and start the proxy in its namespace, pinned to ``cpus`` (the caller waits for its
    listeners). ip netns exec, taskset and setpriv each exec the next: the Popen's pid is Envoy's."""
    cfg = prepare(proxy, workdir, tls_dir)
    validate(proxy, cfg)
    log = log_path(workdir, proxy)
    with open(config.binary(), "rb") as exe, open(log.with_suffix(".out"), "w") as out:
        fd = exe.fileno()
        return subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                proxy.namespace,
                "taskset",
                "-c",
                ",".join(map(str, cpus)),
                *_command(cfg, log, fd),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            pass_fds=(fd,),
            start_new_session=True,
        )


def output(workdir: Path, proxy: Proxy) -> str:
    """What the proxy logged (its log file and what it printed), for errors."""
    log = log_path(workdir, proxy)
    return "\n".join(p.read_text(errors="replace") for p in (log, log.with_suffix(".out")) if p.exists())


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: Path):
        super().__init__("localhost", timeout=5)
        self.path = str(path)

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(5)
        self.sock.connect(self.path)


def admin(sock_path: Path, path: str) -> str:
    """GET ``path`` from a proxy's admin interface (a unix socket in its directory)."""
    conn = _UnixHTTPConnection(sock_path)
    try:
        conn.request("GET", path)
        return conn.getresponse().read().decode()
    finally:
        conn.close()


def bytes_carried(sock_path: Path) -> int:
    """Bytes the proxy's clusters have received and sent so far: what it carried on the data path."""
    return config.bytes_carried(counters(sock_path))


def counters(sock_path: Path) -> dict[str, int]:
    """Every counter and gauge the proxy keeps, by name."""
    return config.parse_stats(admin(sock_path, "/stats"))
