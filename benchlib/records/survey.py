"""A campaign's record directories against its plan: which records it may use, and one line naming
every one it may not (a file or an incomplete record where a record should be, a run the plan does
not have, other test parameters or another definition of its scenario, a copy)."""

from __future__ import annotations

import stat
from pathlib import Path

from ..base import limits
from ..base.errors import RecordError
from ..collectors import RECORDED_PARAMS
from ..settings.environment import Environment
from ..settings.identity import PROSE_KEYS
from ..settings.project import environment_dir
from ..settings.scenarios import DEFAULTS as SCENARIO_DEFAULTS
from . import record_schema
from .layout import CHECKSUMS, META, complete, entry_kind, foreign_at, read_file, record_slots


def recorded_meta(cdir: Path, rid: str) -> dict | None:
    """A complete record's meta.json, unverified, its test parameters and scenario definition of the
    schema's types (record_schema.Surveyed); None if unreadable or not (load() names it at parse time)."""
    path = cdir / rid
    try:
        meta = limits.parse_json(read_file(str(path), META))
        record_schema.check_surveyed(meta, f"{path}: {META}")
    except (OSError, ValueError):  # RecordError is a ValueError
        return None
    return meta


def recorded_definition(meta: dict | None) -> dict | None:
    """The scenario definition a record's meta.json keeps; None for a record that predates them."""
    return (meta or {}).get("scenario_definition")


def param_changes(recorded: dict, planned: dict) -> list[str]:
    """``field: recorded -> planned`` for every test parameter that differs. A field the record
    predates counts as its default."""
    changes = []
    for key in sorted(set(recorded) | set(planned)):
        default = RECORDED_PARAMS.get(key)
        old, new = recorded.get(key, default), planned.get(key, default)
        if old != new:
            changes.append(f"{key}: {old!r} -> {new!r}")
    return changes


def _flat(prefix: str, value, out: dict) -> None:
    if isinstance(value, dict):  # an empty mapping holds no field
        for k, v in value.items():
            _flat(f"{prefix}.{k}", v, out)
    else:
        out[prefix] = value


def _definition_fields(definition: dict, scenario: str) -> dict:
    """A scenario definition as environment.yaml keys (scenarios.<name>.mtu, cpu_placement.TCP_RR,
    file <path>) -> value, without prose; a field the definition predates counts as its default."""
    out = {}
    environment = {k: None if f.is_required() else f.default for k, f in Environment.model_fields.items()}
    for part, defaults, prefix in (
        ("scenario", SCENARIO_DEFAULTS, f"scenarios.{scenario}."),
        ("environment", environment, ""),
    ):
        given = definition.get(part) or {}
        for key in defaults.keys() | given.keys():
            if key in PROSE_KEYS or key in ("name", "scenarios"):
                continue
            _flat(prefix + key, given[key] if key in given else defaults.get(key), out)
    out.update({f"file {path}": digest for path, digest in (definition.get("files") or {}).items()})
    return out


def _shown(value) -> str:
    if isinstance(value, str) and value.startswith("sha256:"):
        return value[:19]
    text = "(none)" if value is None else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def definition_changes(recorded: dict, planned: dict, scenario: str) -> list[str]:
    """``key: recorded -> planned`` for every field of a scenario definition that differs, named as in
    environment.yaml (a file the definition names: ``file <path>``, by its sha256)."""
    if recorded == planned:
        return []  # the usual case, and cheap: survey asks once per record
    old, new = _definition_fields(recorded, scenario), _definition_fields(planned, scenario)
    return [
        f"{key}: {_shown(old.get(key))} -> {_shown(new.get(key))}"
        for key in sorted(old.keys() | new.keys())
        if old.get(key) != new.get(key)
    ]


def environment_file(environment: str) -> Path:
    return environment_dir(environment) / "environment.yaml"


def survey(
    cdir: Path, planned: dict[str, dict] | None, definitions: dict[str, dict] | None = None
) -> tuple[list[Path], list[str]]:
    """The record directories of a campaign that match its plan, and one line naming the path of
    every one that does not: a file or an incomplete directory where a record should be, a run the
    plan does not have, a record measured with other test parameters or another definition of its
    scenario, a copy of another record.

    ``planned``: run id -> the test parameters the plan gives it; None for a campaign without a plan
    at hand (`compare`): then only what no plan can excuse is named (files, incomplete records, copies).
    ``definitions``: run id -> the definition of its scenario (`config.scenario_definition`) the plan
    gives it; a record measured under another one is named, a record that predates them is not.
    """
    good, problems, seen = [], [], {}
    for path, entry in record_slots(cdir, problems):
        rid = path.relative_to(cdir).as_posix()
        mode = entry.stat(follow_symlinks=False).st_mode
        if stat.S_ISREG(mode):
            problems.append(f"{path}: not a directory, where a record should be")
        elif not stat.S_ISDIR(mode):
            problems.append(foreign_at(cdir, path, entry_kind(mode)))
        elif not complete(path):
            problems.append(
                f"{path}: incomplete record ({META} or {CHECKSUMS} missing); "
                "`benchlib collect` sets it aside and measures the run again"
            )
        elif planned is not None and rid not in planned:
            problems.append(f"{path}: run {rid} is not in the plan (scenarios, tests, repetitions)")
        else:
            try:
                meta = limits.parse_json(read_file(str(path), META))
                holds = record_schema.check_surveyed(meta, f"{path}: {META}")["run_id"]
            except RecordError as exc:
                problems.append(str(exc))
                continue
            except ValueError as exc:  # not JSON, or nested beyond the cap
                problems.append(f"{path}: {META}: unreadable ({' '.join(str(exc).split())[:200]})")
                continue
            except OSError as exc:
                problems.append(f"{path}: {META} unreadable ({type(exc).__name__}: {exc})")
                continue
            changes = [] if planned is None else param_changes(meta.get("test_params") or {}, planned[rid])
            recorded = recorded_definition(meta)
            redefined = (
                []
                if definitions is None or recorded is None or rid not in definitions
                else definition_changes(recorded, definitions[rid], rid.split("/")[1])
            )
            if holds in seen:
                problems.append(f"{path}: holds run {holds!r}, like {seen[holds]} (a copy?)")
            elif changes:
                problems.append(f"{path}: measured with other test parameters than the plan's: {'; '.join(changes)}")
            elif redefined:
                problems.append(
                    f"{path}: measured with another definition of scenario {rid.split('/')[1]} than "
                    f"{environment_file(rid.split('/')[0])} gives now: {'; '.join(redefined)}"
                )
            else:
                seen[holds] = path
                good.append(path)
    return good, problems
