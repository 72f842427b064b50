"""The record format's versions: ``schema_version`` in meta.json, SCHEMA_VERSION now. Each migration
turns one version's meta.json into the next and says what that version changed."""

from __future__ import annotations

from pathlib import Path

from ..base.errors import RecordError
from . import record_schema
from .layout import META

SCHEMA_VERSION = 7


def _v6_to_v7(meta: dict, path: Path) -> dict:
    """Version 7 added ``quiet`` (`benchlib.targets.kubernetes.quiet`: the host daemons frozen over the CPU
    window, those kept running and why, those that could not be frozen); an older run's is unknown."""
    return {**meta, "quiet": None, "schema_version": 7}


def _v5_to_v6(meta: dict, path: Path) -> dict:
    """Version 6 added ``foreign_cpu`` (`benchlib.host.disturbance`: the CPU other processes and the
    hypervisor took over the window, and which; where the target cannot tell processes apart, the steal
    alone and the processes' fields null) and the outcome ``disturbed``; an older run's is unknown."""
    return {**meta, "foreign_cpu": None, "schema_version": 6}


def _v4_to_v5(meta: dict, path: Path) -> dict:
    """Version 5 added ``profiled`` (the run was a profiled one, its id ``p<block>``) and ``profile`` (how
    its profile.folded.gz was recorded: perf version, event, frequency, kernel, CPUs, attribution,
    window, samples, whether kernel symbols were visible); an older run is a measured one, without a
    profile. A profile may hold ``bpf`` (`benchlib.profiling.bpfstats`: each BPF program's counters at
    the window's edges and where it is attached, or why they could not be read); a profile without it
    counted no BPF program."""
    return {**meta, "profiled": False, "profile": None, "schema_version": 5}


def _v3_to_v4(meta: dict, path: Path) -> dict:
    """Version 4 added ``scenario_definition`` (`config.scenario_definition`: the scenario as the
    environment defined it when the run was measured). An older run's is unknown: nothing says what its
    scenario was, so collect and parse accept it without comparing it with the environment as it is."""
    return {**meta, "scenario_definition": None, "schema_version": 4}


def _v2_to_v3(meta: dict, path: Path) -> dict:
    """Version 3 added ``processes``: the CPU ticks and peak RSS of the processes a target runs on the
    datapath itself (the lab's service-mesh proxies) over the CPU window; older runs had none."""
    return {**meta, "processes": {}, "schema_version": 3}


def _v1_to_v2(meta: dict, path: Path) -> dict:
    """Version 1, the first, wrote ``repetition`` beside ``block``, always equal to it; version 2
    dropped it."""
    meta = dict(meta)
    repetition = meta.pop("repetition", None)
    if repetition != meta.get("block"):
        raise RecordError(
            f"{path}: {META}: repetition {record_schema.shown(repetition)} differs from block "
            f"{record_schema.shown(meta.get('block'))}; "
            "version 1 records always have them equal"
        )
    return {**meta, "schema_version": 2}


# MIGRATIONS[v] turns a version-v meta.json into version v + 1
MIGRATIONS = {1: _v1_to_v2, 2: _v2_to_v3, 3: _v3_to_v4, 4: _v4_to_v5, 5: _v5_to_v6, 6: _v6_to_v7}


def migrate(meta: dict, path: Path) -> dict:
    """meta.json of any known version, as the current version writes it."""
    version = meta.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= SCHEMA_VERSION:
        raise RecordError(
            f"{path}: {META}: schema_version {record_schema.shown(version)} is unknown; this benchlib reads "
            f"versions 1 to {SCHEMA_VERSION} (was the record written by a newer benchlib?)"
        )
    while version < SCHEMA_VERSION:
        meta = MIGRATIONS[version](meta, path)
        version = meta["schema_version"]
    return meta
