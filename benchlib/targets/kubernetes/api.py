"""One cluster's API: the clients of one kubeconfig context, exec into one
namespace's pods as processes, pods started and waited for, errors as text.

The API's refusals (the client's ApiException) are mapped here and nowhere else:
``refusal`` turns them into a TargetError that names what was asked, ``attempt``
into a ``Refused`` value for the callers that go on without the answer, and
``absent`` tells a missing object (404) from a refusal.

Exec exit codes and PIDs travel in-band: every command is wrapped as
``sh -c 'echo __BENCHLIB_PID=$$ >&2; <cmd>; echo __BENCHLIB_EXIT=$? >&2'`` and
the markers are removed from stderr, so stdout stays exactly what the tool
printed, whatever the exec implementation does with exit codes. Closing an
exec stream does not end the command in a kubelet, so a kill is an exec of
``kill`` with that PID.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

from .. import Result, TargetError, shown
from .manifests import CONTAINER

EXIT_MARKER = "__BENCHLIB_EXIT="
PID_MARKER = "__BENCHLIB_PID="
_MARKER_RE = re.compile(rf"{EXIT_MARKER}(-?\d+)\n?$")
_PID_RE = re.compile(rf"^{PID_MARKER}(\d+)\n")
EXEC_TIMEOUT_S = 60  # a short command in a pod: a probe, ss, cat /proc/stat
KILL_WAIT_S = 5  # how long a kill waits to learn the command's PID
POLL_S = 0.3  # between looks at a pod that is starting
SCHEDULE_POLL_S = 0.02  # between looks at a pod waiting for its node: the scheduler takes milliseconds
# kubelet retries a pod whose sandbox the pod network refused; a CNI still starting may refuse once, a
# cause that stays (no address left in the pool, an agent that is down) refuses every time
SANDBOX_REFUSALS = 3
SANDBOX_LOOK_S = 2.0  # between looks at the pod's events while it waits for its sandbox
LOG_TAIL_LINES = 20  # of a failed container's log, in errors


def k8s():
    import kubernetes  # imported lazily: the lab never needs it

    return kubernetes


T = TypeVar("T")
NOT_FOUND = 404


@dataclass(frozen=True)
class Refused:
    """The API's answer to a call it refused: its HTTP status and its reason (reason())."""

    status: int | None
    reason: str


def attempt(call: Callable[[], T]) -> T | Refused:
    """``call``'s result, or how the API refused it."""
    try:
        return call()
    except k8s().client.ApiException as exc:
        return Refused(exc.status, reason(exc))


@contextmanager
def refusal(what: str) -> Iterator[None]:
    """The API's refusal of a call in the block as a TargetError: "kubernetes: <what>: <reason>"."""
    try:
        yield
    except k8s().client.ApiException as exc:
        raise TargetError(f"kubernetes: {what}: {reason(exc)}") from None


def absent(call: Callable[[], object], what: str) -> bool:
    """Whether the object that ``call`` reads or deletes is not there (404); another refusal is a
    TargetError naming ``what``."""
    got = attempt(call)
    if isinstance(got, Refused) and got.status != NOT_FOUND:
        raise TargetError(f"kubernetes: {what}: {got.reason}")
    return isinstance(got, Refused)


def wrap(argv: list[str]) -> list[str]:
    """The exec command line: the shell's PID, argv, then argv's exit status, markers on stderr."""
    return ["sh", "-c", f'echo "{PID_MARKER}$$" >&2; {shlex.join(argv)}; echo "{EXIT_MARKER}$?" >&2']


def split_marker(stderr: str) -> tuple[int | None, str]:
    """(exit status or None when the command never finished, stderr without the markers)."""
    stderr = _PID_RE.sub("", stderr, count=1)
    m = _MARKER_RE.search(stderr)
    if not m:
        return None, stderr
    return int(m.group(1)), stderr[: m.start()]


def reason(exc: Exception) -> str:
    """An API error's message without its headers (which may carry tokens)."""
    body = getattr(exc, "body", None)
    if body:
        try:
            return f"{getattr(exc, 'status', '')} {json.loads(body).get('message', body)}"
        except ValueError:
            return f"{getattr(exc, 'status', '')} {body}"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


@dataclass(frozen=True)
class Reach:
    """One look at a cluster: the API server's address and version, or the step that failed
    ("missing" kubeconfig, "load" error, "credentials" refused, "unreachable") with its reason."""

    kubeconfig: str  # as shown: the path given, or KUBECONFIG's, or ~/.kube/config
    host: str = ""
    version: str = ""
    failed: str = ""
    detail: str = ""
    api: object = None  # the ApiClient, once loaded


def reach(kubeconfig: str | None, context: str | None, timeout: float) -> Reach:
    """Load one kubeconfig context and ask its API server for its version, once, within ``timeout``."""
    k = k8s()
    path = kubeconfig and os.path.expanduser(kubeconfig)
    shown_path = path or os.environ.get("KUBECONFIG") or "~/.kube/config"
    if not all(os.path.exists(os.path.expanduser(p)) for p in shown_path.split(os.pathsep)):
        return Reach(shown_path, failed="missing", detail="does not exist")
    cfg = k.client.Configuration()
    try:
        k.config.load_kube_config(config_file=path, context=context, client_configuration=cfg)
    except Exception as exc:  # bad YAML, unknown context, a failing auth plugin
        return Reach(shown_path, failed="load", detail=" ".join(reason(exc).split())[:300])
    cfg.retries = False  # one attempt: a dead API is named in `timeout` seconds, not after urllib3's retries
    api = k.client.ApiClient(cfg)
    try:
        version = k.client.VersionApi(api).get_code(_request_timeout=timeout).git_version
    except Exception as exc:
        status = getattr(exc, "status", None)  # it answered: the identity is the problem, not the network
        failed = "credentials" if isinstance(exc, k.client.ApiException) and status in (401, 403) else "unreachable"
        return Reach(shown_path, cfg.host, failed=failed, detail=" ".join(reason(exc).split())[:300], api=api)
    return Reach(shown_path, cfg.host, version=version, api=api)


def placed(pod) -> tuple[str, str, str]:
    """(name, node, IP) of a ready pod: the API sets all three once a pod runs."""
    name, node, ip = pod.metadata.name, pod.spec.node_name, pod.status.pod_ip
    if not (name and node and ip):
        raise TargetError(f"kubernetes: pod {name} is ready but the API gives no node or IP for it")
    return name, node, ip


def failed_container(pod) -> tuple[str, str] | None:
    """(container, how) of the first container of a pod that is starting that failed: an init
    container that exited with an error, or any container Kubernetes had to restart (a sidecar
    that keeps dying never makes its pod ready)."""
    status = pod.status
    for c in [*(status.init_container_statuses or []), *(status.container_statuses or [])]:
        terminated = c.state.terminated if c.state else None
        last = c.last_state.terminated if c.last_state else None
        if c.restart_count:
            code = last.exit_code if last else "?"
            return c.name, f"exited {code} and was restarted {c.restart_count} time(s)"
        if terminated and terminated.exit_code != 0:
            return c.name, f"exited {terminated.exit_code} ({terminated.reason})"
    return None


def is_ready(pod) -> bool:
    return pod.status.phase == "Running" and any(
        c.type == "Ready" and c.status == "True" for c in pod.status.conditions or []
    )


class Cluster:
    """The API clients of one kubeconfig context, working in one namespace."""

    def __init__(self, kubeconfig: str | None, context: str | None, namespace: str):
        k = k8s()
        path = kubeconfig and os.path.expanduser(kubeconfig)
        self.namespace = namespace
        try:
            self.client = k.config.new_client_from_config(config_file=path, context=context)
            # exec streams patch their client while connecting: they get their own
            self._exec_api = k.client.CoreV1Api(k.config.new_client_from_config(config_file=path, context=context))
            self.core = k.client.CoreV1Api(self.client)
            self.apps = k.client.AppsV1Api(self.client)
            self.rbac = k.client.RbacAuthorizationV1Api(self.client)
            self.discovery = k.client.DiscoveryV1Api(self.client)
            self.server_version = k.client.VersionApi(self.client).get_code().git_version
        except Exception as exc:
            raise TargetError(
                f"kubernetes: cannot reach the cluster (kubeconfig {path or 'default'}, "
                f"context {context or 'current'}): {reason(exc)}"
            ) from None
        self._exec_lock = threading.Lock()

    # -- exec ----------------------------------------------------------------------
    def open_exec(self, pod: str, command: list[str], container: str = CONTAINER):
        from kubernetes.stream import stream

        with self._exec_lock:
            return stream(
                self._exec_api.connect_get_namespaced_pod_exec,
                pod,
                self.namespace,
                command=command,
                container=container,
                stderr=True,
                stdin=False,
                stdout=True,
                tty=False,
                _preload_content=False,
            )

    def spawn(self, pod: str, argv: list[str]) -> ExecProcess:
        return ExecProcess(self, pod, argv)

    def run(self, pod: str, argv: list[str], timeout: float = EXEC_TIMEOUT_S, container: str = CONTAINER) -> Result:
        """``argv`` in a container of the pod (the benchmark's unless named) to its end."""
        proc = ExecProcess(self, pod, argv, container)
        try:
            out, err = proc.communicate(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise TargetError(f"kubernetes: `{shlex.join(argv)}` in pod {pod} did not finish in {timeout} s") from None
        return Result(argv, proc.returncode, out, err)

    def check(self, pod: str, argv: list[str], container: str = CONTAINER) -> str:
        """stdout of a command that must succeed."""
        r = self.run(pod, argv, container=container)
        if r.returncode != 0:
            raise TargetError(
                f"kubernetes: `{shlex.join(argv)}` in pod {pod} exited {r.returncode}: {shown(r.stderr).strip()}"
            )
        return shown(r.stdout)

    # -- pods ----------------------------------------------------------------------
    def start_pod(self, manifest: dict, timeout_s: float):
        """Create a pod and return it once ready; fail with its events."""
        return self.wait_ready(self.create_pod(manifest), timeout_s)

    def create_pod(self, manifest: dict) -> str:
        """Create a pod; its name."""
        name = manifest["metadata"]["name"]
        with refusal(f"cannot create pod {name}"):
            self.core.create_namespaced_pod(self.namespace, manifest)  # pyright: ignore[reportArgumentType] (the client sends a manifest dict as it is; the annotation names only its model)
        return name

    def wait_scheduled(self, name: str, timeout_s: float, since: float | None = None) -> str:
        """The node the scheduler put the pod on, once it has (before its containers start); fail with
        its events. The ``timeout_s`` counts from ``since`` (time.monotonic()), by default now."""
        deadline = (time.monotonic() if since is None else since) + timeout_s
        while time.monotonic() < deadline:
            node = self.core.read_namespaced_pod(name, self.namespace).spec.node_name
            if node:
                return node
            time.sleep(SCHEDULE_POLL_S)
        raise TargetError(
            f"kubernetes: pod {self.namespace}/{name} was not scheduled within {timeout_s:g} s\n" + self.events(name)
        )

    def wait_ready(self, name: str, timeout_s: float, since: float | None = None):
        """The pod, once ready; fail with its events (or the pod network's refusal, or its failed container).
        The ``timeout_s`` counts from ``since`` (time.monotonic()), by default now."""
        deadline = (time.monotonic() if since is None else since) + timeout_s
        next_look = time.monotonic() + SANDBOX_LOOK_S
        while time.monotonic() < deadline:
            pod = self.core.read_namespaced_pod(name, self.namespace)
            if is_ready(pod):
                return pod
            if time.monotonic() >= next_look:
                next_look = time.monotonic() + SANDBOX_LOOK_S
                if refused := self.sandbox_refused(name):
                    raise TargetError(
                        f"kubernetes: pod {self.namespace}/{name} on {pod.spec.node_name}: the pod network "
                        f"refused it {refused}"
                    )
            failed = failed_container(pod)
            if failed:
                container, how = failed
                raise TargetError(
                    f"kubernetes: pod {self.namespace}/{name}: container {container} {how}; its log ends:\n"
                    + self.log_tail(name, container)
                    + "\n"
                    + self.events(name)
                )
            if pod.status.phase in ("Failed", "Succeeded"):
                break
            time.sleep(POLL_S)
        raise TargetError(
            f"kubernetes: pod {self.namespace}/{name} did not become ready within "
            f"{timeout_s:g} s (phase {pod.status.phase})\n" + self.events(name)
        )

    def delete_pod(self, name: str, grace_period_s: int = 0) -> None:
        # a pod that failed to start may not exist
        absent(
            lambda: self.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=grace_period_s),
            f"cannot delete pod {self.namespace}/{name}",
        )

    def log_tail(self, pod: str, container: str, lines: int = LOG_TAIL_LINES) -> str:
        """The last lines a container logged: its previous instance's, if Kubernetes restarted it (the
        instance that died), else its own; or why there are none."""
        for previous in (True, False):
            read = self.core.read_namespaced_pod_log
            text = attempt(partial(read, pod, self.namespace, container=container, tail_lines=lines, previous=previous))
            if isinstance(text, Refused):
                if previous and text.status == 400:  # no previous instance
                    continue
                return f"  (no log: {text.reason})"
            return "\n".join(f"  {line}" for line in (text or "").splitlines()) or "  (it logged nothing)"
        return "  (no log)"

    def wait_deleted(self, name: str, timeout_s: float) -> None:
        """Return once the pod is gone; TargetError after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if absent(lambda: self.core.read_namespaced_pod(name, self.namespace), f"cannot read pod {name}"):
                return
            time.sleep(POLL_S)
        raise TargetError(f"kubernetes: pod {self.namespace}/{name} still exists {timeout_s:g} s after its deletion")

    def sandbox_refused(self, pod: str) -> str | None:
        """How often and why the pod network refused the pod's sandbox, once it has SANDBOX_REFUSALS
        times (kubelet's FailedCreatePodSandBox events, the newest message on one line); else None."""
        events = self.core.list_namespaced_event(
            self.namespace, field_selector=f"involvedObject.name={pod},reason=FailedCreatePodSandBox"
        ).items
        times = sum(e.count or 1 for e in events)
        if times < SANDBOX_REFUSALS:
            return None
        newest = max(events, key=lambda e: (e.last_timestamp or e.metadata.creation_timestamp).timestamp())
        return f"{times} times, the last: {' '.join((newest.message or '').split())}"

    def events(self, pod: str) -> str:
        events = self.core.list_namespaced_event(self.namespace, field_selector=f"involvedObject.name={pod}").items
        lines = [f"  {e.type} {e.reason}: {e.message}" for e in events]
        return "pod events:\n" + ("\n".join(lines) if lines else "  (none)")


class ExecProcess:
    """A command running in a pod through the exec API, shaped like LocalProcess."""

    def __init__(self, cluster: Cluster, pod: str, argv: list[str], container: str = CONTAINER):
        self.argv = argv
        self._cluster, self._pod, self._container = cluster, pod, container
        self._ws = cluster.open_exec(pod, wrap(argv), container)
        self._out: list[str] = []
        self._err: list[str] = []
        self.returncode: int | None = None
        self._killed = False
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        try:
            while self._ws.is_open():
                self._ws.update(timeout=0.5)
                self._take_buffered()
            # every peek reads all frames already arrived, the close frame included: a command's
            # last output can sit buffered behind a stream that is already closed
            self._take_buffered()
        except Exception as exc:  # a dropped connection ends the command like a kill
            if not self._killed:
                self._err.append(f"\nbenchlib: exec stream failed: {exc}\n")
        code, stderr = split_marker("".join(self._err))
        if code is None and not self._killed:  # the shell ended without its marker: the API says how
            stderr += f"\nbenchlib: the exec stream ended before the command's exit status: {self._status()}\n"
        self._err = [stderr]
        # -9: killed by us or the connection dropped before the command ended
        self.returncode = code if code is not None and not self._killed else -9

    def _status(self) -> str:
        """The exec API's own status of the command (its error channel), or why there is none."""
        from kubernetes.stream.ws_client import ERROR_CHANNEL

        try:
            status = self._ws.read_channel(ERROR_CHANNEL)
        except Exception as exc:
            return f"no status ({exc})"
        return " ".join(str(status).split()) or "no status (the connection closed)"

    def _take_buffered(self) -> None:
        self._out.append(self._ws.read_stdout(timeout=0) if self._ws.peek_stdout() else "")
        self._err.append(self._ws.read_stderr(timeout=0) if self._ws.peek_stderr() else "")

    def poll(self) -> int | None:
        return None if self._reader.is_alive() else self.returncode

    def started(self) -> bool:
        """Whether the command's shell has printed its PID marker: it runs in the pod."""
        return bool(_PID_RE.match("".join(self._err))) or not self._reader.is_alive()

    def communicate(self, timeout: float | None = None) -> tuple[bytes, bytes]:
        """(stdout, stderr) as bytes, like LocalProcess; the exec API has already decoded them as
        UTF-8, a byte that is not UTF-8 replaced by U+FFFD."""
        self._reader.join(timeout)
        if timeout is not None and self._reader.is_alive():  # (without a timeout, join waits for the end)
            raise subprocess.TimeoutExpired(self.argv, timeout)
        return "".join(self._out).encode(), "".join(self._err).encode()

    def kill(self) -> None:
        self._killed = True
        deadline = time.monotonic() + KILL_WAIT_S
        while self._reader.is_alive() and time.monotonic() < deadline:
            m = _PID_RE.match("".join(self._err))
            if m:  # the wrapping shell's children, then the shell
                try:
                    self._cluster.run(
                        self._pod,
                        ["sh", "-c", f"pkill -KILL -P {m.group(1)}; kill -KILL {m.group(1)}"],
                        container=self._container,
                    )
                except Exception as exc:  # the pod is gone: so is the command
                    self._err.append(f"\nbenchlib: kill failed: {reason(exc)}\n")
                break
            time.sleep(0.05)
        self._ws.close()
