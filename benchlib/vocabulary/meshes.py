"""The service-mesh shapes a scenario's ``mesh`` names (the shapes themselves: targets/mesh/shapes.py).

The one list of their names: the settings, the checks and every target read it from here.
"""

from __future__ import annotations

import typing
from typing import Literal

Mesh = Literal["server-sidecar", "sidecars", "sidecars-mtls", "node-proxies-mtls", "node-proxies-waypoint"]
MESHES: tuple[str, ...] = typing.get_args(Mesh)
MTLS_MESHES = ("sidecars-mtls", "node-proxies-mtls", "node-proxies-waypoint")  # mutual TLS between proxies
NODE_MESHES = ("node-proxies-mtls", "node-proxies-waypoint")  # a proxy per node, none in the pods
# a waypoint's tunnels are HBONE (HTTP/2 CONNECT), which only Envoy ends (HAProxy does not)
WAYPOINT_MESHES = ("node-proxies-waypoint",)
WITHOUT_WAYPOINT = tuple(m for m in MESHES if m not in WAYPOINT_MESHES)
