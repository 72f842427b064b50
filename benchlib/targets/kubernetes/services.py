"""A scenario's Services: the benchmark Service and its fillers, created in
parallel, waited for until each has an EndpointSlice naming the server pod
(the last step the API shows), and deleted when the scenario ends.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from .. import TargetError
from .api import Cluster, k8s, reason
from .manifests import LABEL_SCENARIO, object_name, service_manifest

SERVICE_NAME_LABEL = "kubernetes.io/service-name"  # set by the EndpointSlice controller
# parallel API requests: 1000 Services one by one would take minutes on a remote API server
WORKERS = 8
PROGRESS_EVERY = 100  # Services between progress lines
PAGE = 500  # EndpointSlices per list request: a thousand in one answer is a large response
POLL_S = 0.2
LOG_EVERY_S = 5


def create(
    cluster: Cluster,
    scenario: str,
    session: str,
    ports: list[tuple[int, str]],
    count: int,
    server_ip: str,
    timeout_s: float,
    log,
) -> tuple[str, dict]:
    """The benchmark Service and count-1 fillers; returns its ClusterIP and what to record."""
    manifests = [service_manifest(scenario, session, ports, filler=i) for i in range(count)]
    start = time.monotonic()
    created = []
    with ThreadPoolExecutor(WORKERS) as pool:
        for svc in pool.map(lambda m: _create_one(cluster, m), manifests):
            created.append(svc)
            if count > 1 and (len(created) % PROGRESS_EVERY == 0 or len(created) == count):
                log(
                    f"kubernetes: {scenario}: {len(created)}/{count} Services created "
                    f"({time.monotonic() - start:.1f} s)"
                )
    create_s = time.monotonic() - start
    # the wait has its own bound, from now: 5000 Services can take minutes to create on a busy
    # API server, and their EndpointSlices follow them (a deadline from the start left seconds)
    _wait_endpoint_slices(
        cluster, scenario, {m["metadata"]["name"] for m in manifests}, server_ip, time.monotonic() + timeout_s, log
    )
    return created[0].spec.cluster_ip, {
        "services": count,
        "services_create_s": round(create_s, 3),
        "services_endpointslices_s": round(time.monotonic() - start, 3),
    }


def _create_one(cluster: Cluster, manifest: dict):
    try:
        return cluster.core.create_namespaced_service(cluster.namespace, manifest)  # pyright: ignore[reportArgumentType] (the client sends a manifest dict as it is; the annotation names only its model)
    except k8s().client.ApiException as exc:
        raise TargetError(f"kubernetes: cannot create Service {manifest['metadata']['name']}: {reason(exc)}") from None


def _wait_endpoint_slices(
    cluster: Cluster, scenario: str, names: set[str], server_ip: str, deadline: float, log
) -> None:
    """Until every Service in ``names`` has an EndpointSlice with the server pod's address."""
    start = last_log = time.monotonic()
    while True:
        covered, token = set(), None
        while True:
            page = cluster.discovery.list_namespaced_endpoint_slice(
                cluster.namespace, label_selector=SERVICE_NAME_LABEL, limit=PAGE, _continue=token
            )
            covered |= {
                s.metadata.labels.get(SERVICE_NAME_LABEL)
                for s in page.items
                if any(server_ip in e.addresses for e in s.endpoints or [])
            }
            token = page.metadata._continue
            if not token:
                break
        missing = names - covered
        if not missing:
            return
        if time.monotonic() > deadline:
            raise TargetError(
                f"kubernetes: {scenario}: {len(missing)} of {len(names)} Services have no "
                f"EndpointSlice with the server pod ({server_ip}) after "
                f"{time.monotonic() - start:.0f} s, e.g. {sorted(missing)[:3]}"
            )
        if time.monotonic() - last_log > LOG_EVERY_S:
            log(
                f"kubernetes: {scenario}: EndpointSlices for {len(names) - len(missing)}/{len(names)} "
                f"Services ({time.monotonic() - start:.1f} s)"
            )
            last_log = time.monotonic()
        time.sleep(POLL_S)


def delete(cluster: Cluster, scenario: str, log) -> None:
    """Every Service of a scenario, one request each, in parallel: older API servers have no
    delete-collection for Services, and the namespace controller deletes them one by one."""
    names = [
        s.metadata.name
        for s in cluster.core.list_namespaced_service(
            cluster.namespace, label_selector=f"{LABEL_SCENARIO}={object_name(scenario)}"
        ).items
    ]

    def delete_one(name: str) -> None:
        try:
            cluster.core.delete_namespaced_service(name, cluster.namespace)
        except k8s().client.ApiException as exc:
            if exc.status != 404:
                raise

    start = time.monotonic()
    with ThreadPoolExecutor(WORKERS) as pool:
        list(pool.map(delete_one, names))
    if len(names) > 1:
        log(f"kubernetes: {scenario}: {len(names)} Services deleted ({time.monotonic() - start:.1f} s)")
