"""What identifies a scenario's measurements, as each record keeps it: its definition and the hashes of
the files it names.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
from pathlib import Path

from .environment import Environment
from .project import environment_dir, project_root
from .scenarios import (
    DEFAULTS as SCENARIO_DEFAULTS,
)

# Prose: editing it changes nothing a scenario measures, so it is no part of a campaign's identity
PROSE_KEYS = ("description", "maps_to")


def scenario_definition(env: Environment, scenario: str) -> dict:
    """What defines the measurements of ``scenario``, as each of its records keeps it: the scenario's
    every field (and every other target's scenario field, at its default) (its topology, settings, apply steps, helm release, checks, ...), the environment's own
    settings (target, CPUs, CPU placement as the campaign has it, cluster or hosts) and the sha256 of
    every file of the project the scenario names by a path relative to the environment folder (helm
    values, manifests, scripts such as ./cilium-synced.sh)."""
    spec = {**copy.deepcopy(SCENARIO_DEFAULTS), **env.scenarios[scenario].model_dump(mode="json")}
    return {
        "scenario": spec,
        "environment": env.model_dump(mode="json", exclude={"name", "scenarios"}),
        "files": _named_files(environment_dir(env.name), spec),
    }


def _named_files(folder: Path, spec: dict) -> dict[str, str]:
    """path as named -> sha256 of each file of the project below ``folder``'s parent that ``spec`` names."""
    root = project_root().resolve()
    files = {}
    for token in sorted(set(re.findall(r"[A-Za-z0-9_.+@/-]+", json.dumps(spec)))):
        if "/" not in token and "." not in token.strip("."):
            continue
        try:
            path = (folder / token).resolve()
            if path.is_file() and path.is_relative_to(root):
                files[os.path.normpath(token)] = "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
        except (OSError, ValueError):
            continue  # not a file name after all
    return files
