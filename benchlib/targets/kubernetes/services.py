"""A scenario's Services: the benchmark Service, selecting the scenario's server
pod, and the fillers that bring the namespace to the scenario's Service count.

A filler stands for another application's Service: a ClusterIP with one endpoint,
which every Service proxy programs like any other. Its endpoint is written here,
in an EndpointSlice of its own naming manifests.FILLER_ADDRESS, which nothing serves and
nothing sends to, so a filler belongs to no pod: fillers outlive a scenario and a
pod-network switch, and each activation creates or deletes only the difference
from the last scenario's count (minutes saved per switch at thousands of
Services). Scenarios without a Service count get none.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from .. import TargetError
from .api import Cluster, absent, refusal
from .manifests import (
    FILLER,
    LABEL_ROLE,
    LABEL_SCENARIO,
    SERVICE_NAME_LABEL,
    filler_manifests,
    filler_name,
    object_name,
    service_manifest,
)

# parallel API requests: 1000 Services one by one would take minutes on a remote API server
WORKERS = 8
PROGRESS_EVERY = 100  # fillers between progress lines
PAGE = 500  # objects per list request: a thousand in one answer is a large response
POLL_S = 0.2
LOG_EVERY_S = 5


def set_fillers(cluster: Cluster, session: str, count: int, log) -> dict:
    """Make the namespace hold fillers 1..count, creating or deleting only the difference;
    returns what to record."""
    return write_fillers(cluster, session, filler_changes(cluster, count), log)


def filler_changes(cluster: Cluster, count: int) -> tuple[list[int], list[str]]:
    """(indices to create, names to delete) that bring the namespace to fillers 1..count."""
    have = {
        s.metadata.name
        for s in _list_all(cluster.core.list_namespaced_service, cluster.namespace, f"{LABEL_ROLE}={FILLER}")
    }
    wanted = {filler_name(i): i for i in range(1, count + 1)}
    return [i for name, i in wanted.items() if name not in have], sorted(have - set(wanted))


def write_fillers(cluster: Cluster, session: str, changes: tuple[list[int], list[str]], log) -> dict:
    """Create and delete the fillers of ``changes``; returns what to record."""
    start = time.monotonic()
    create, delete = changes
    _in_parallel(lambda i: _create_filler(cluster, session, i), create, "created", log)
    _in_parallel(lambda name: _delete_service(cluster, name), delete, "deleted", log)
    return {
        "fillers_created": len(create),
        "fillers_deleted": len(delete),
        "fillers_s": round(time.monotonic() - start, 3),
    }


def _in_parallel(action, items: list, done: str, log) -> None:
    start = time.monotonic()
    with ThreadPoolExecutor(WORKERS) as pool:
        for n, _ in enumerate(pool.map(action, items), 1):
            if n % PROGRESS_EVERY == 0 or n == len(items):
                log(f"kubernetes: {n}/{len(items)} filler Services {done} ({time.monotonic() - start:.1f} s)")


def _create_filler(cluster: Cluster, session: str, index: int) -> None:
    service, endpoints = filler_manifests(session, index)
    created = _create(cluster.core.create_namespaced_service, cluster.namespace, service)
    # owned by its Service: deleting the Service deletes the slice
    endpoints["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Service", "name": service["metadata"]["name"], "uid": created.metadata.uid}
    ]
    _create(cluster.discovery.create_namespaced_endpoint_slice, cluster.namespace, endpoints)


def _create(create, namespace: str, manifest: dict):
    with refusal(f"cannot create {manifest['kind']} {manifest['metadata']['name']}"):
        return create(namespace, manifest)


def _delete_service(cluster: Cluster, name: str) -> None:
    absent(
        lambda: cluster.core.delete_namespaced_service(name, cluster.namespace),
        f"cannot delete Service {cluster.namespace}/{name}",
    )


def _list_all(list_call, namespace: str, selector: str) -> list:
    items, token = [], None
    while True:
        page = list_call(namespace, label_selector=selector, limit=PAGE, _continue=token)
        items += page.items
        token = page.metadata._continue
        if not token:
            return items


def create(
    cluster: Cluster,
    scenario: str,
    session: str,
    ports: list[tuple[int, str]],
    server_ip: str,
    timeout_s: float,
    log,
) -> str:
    """The scenario's benchmark Service, once its EndpointSlice names the server pod; returns its
    ClusterIP."""
    manifest = service_manifest(scenario, session, ports)
    svc = _create(cluster.core.create_namespaced_service, cluster.namespace, manifest)
    _wait_endpoint_slice(cluster, scenario, manifest["metadata"]["name"], server_ip, time.monotonic() + timeout_s, log)
    return str(svc.spec.cluster_ip)


def _wait_endpoint_slice(cluster: Cluster, scenario: str, name: str, server_ip: str, deadline: float, log) -> None:
    """Until the Service's EndpointSlice (written by the controller-manager) has the server pod's address."""
    start = last_log = time.monotonic()
    while True:
        slices = cluster.discovery.list_namespaced_endpoint_slice(
            cluster.namespace, label_selector=f"{SERVICE_NAME_LABEL}={name}"
        ).items
        if any(server_ip in e.addresses for s in slices for e in s.endpoints or []):
            return
        if time.monotonic() > deadline:
            raise TargetError(
                f"kubernetes: {scenario}: Service {name} has no EndpointSlice with the server pod ({server_ip}) "
                f"after {time.monotonic() - start:.0f} s"
            )
        if time.monotonic() - last_log > LOG_EVERY_S:
            log(
                f"kubernetes: {scenario}: waiting for Service {name}'s EndpointSlice ({time.monotonic() - start:.1f} s)"
            )
            last_log = time.monotonic()
        time.sleep(POLL_S)


def delete(cluster: Cluster, scenario: str) -> None:
    """The scenario's benchmark Service (the fillers stay for the next scenario)."""
    for s in cluster.core.list_namespaced_service(
        cluster.namespace, label_selector=f"{LABEL_SCENARIO}={object_name(scenario)}"
    ).items:
        _delete_service(cluster, str(s.metadata.name))
