"""params.yaml and environment.yaml read into their models: YAML with each key once, and every error
one line naming the file and the key (``params.yaml: tests.tcp_rr.duration_s``) and, where the choice
is closed, the allowed values.
"""

from __future__ import annotations

import typing
from pathlib import Path

import yaml
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from ..base import limits
from ..base.errors import ConfigError
from ..collectors import TOOLS, get
from .campaign import Params
from .environment import Environment
from .names import require_name
from .project import environment_dir, project_root
from .scenarios import (
    SCENARIOS,
)


def _expand_service_counts(scenarios: dict) -> dict:
    """``services: [4, 1000]`` on scenario X becomes scenarios X-4 and X-1000."""
    out = {}
    for name, sc in (scenarios or {}).items():
        counts = sc.get("services") if isinstance(sc, dict) else None
        if isinstance(counts, list):
            for n in counts:
                out[f"{name}-{n}"] = {**sc, "services": n}
        else:
            out[name] = sc
    return out


def _format(exc: ValidationError, source: str) -> str:
    """One line naming the file and the key; several errors: a line per key below the file's."""
    lines = []
    for err in exc.errors():
        loc = [_key(p) for p in err["loc"] if p != "[key]"]  # a bad key: named by itself
        msg = err["msg"].removeprefix("Value error, ")
        if loc[:1] == ["tests"] and len(loc) >= 2:
            loc, msg = _test_error(loc, msg, err)
        if loc[:1] == ["scenarios"] and len(loc) > 2 and loc[2] in SCENARIOS:
            loc.pop(2)  # the model the environment's target picked: not a key of the file
        if err["type"].startswith("union_tag") and loc[:1] == ["scenarios"]:
            if not isinstance(err["input"], dict):
                msg = "Input should be a valid dictionary or instance of Scenario"
            elif len(exc.errors()) > 1:
                continue  # no scenario model for a target that is not one: the target's error says so
        key = ".".join(loc)
        lines.append(f"{key}: {msg}" if key else msg)
    if len(lines) == 1:
        return f"{source}: {lines[0]}"
    return "\n  ".join([f"{source}: invalid", *lines])


def _key(part: str | int) -> str:
    """A part of a key as the message shows it: a name as written, unless it hides characters or runs long."""
    text = str(part)
    if not text.isprintable():
        text = repr(text)
    return text if len(text) <= 60 else text[:57] + "..."


def _test_error(loc: list[str], msg: str, err: ErrorDetails) -> tuple[list[str], str]:
    """The key and message of an error in tests.<name>, in the words of params.yaml: pydantic puts
    the tool whose model was picked into the location (tests.x.netperf.kind), and names the
    picking function, not the key `tool`."""
    allowed = f"allowed: {list(TOOLS)}"
    if err["type"] == "union_tag_invalid":
        return loc + ["tool"], f"{err['input']['tool']!r} is not a tool; {allowed}"
    if err["type"] == "union_tag_not_found":
        if isinstance(err["input"], dict):
            return loc + ["tool"], f"Field required; {allowed}"
        return loc, f"expected a mapping with a tool, got {err['input']!r}"
    if len(loc) > 2 and loc[2] in TOOLS:
        tool = loc.pop(2)
        if err["type"] == "extra_forbidden":
            settings = [f for f in get(tool).Spec.model_fields if f != "tool"]
            msg = f"not used by {tool}; remove it ({tool} takes {', '.join(settings)})"
    return loc, msg


class _DuplicateKey(yaml.YAMLError):
    pass


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML with every mapping key once: otherwise the last of two silently wins."""

    def construct_mapping(self, node, deep=False):
        seen = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *anchor`: keys written here override the merged ones, as they should
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, typing.Hashable):
                continue  # the base loader reports it
            if key in seen:
                raise _DuplicateKey(
                    f"line {key_node.start_mark.line + 1}: duplicate key {key!r} (first at line {seen[key] + 1})"
                )
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)


def _load_yaml(path: Path) -> dict:
    try:  # a ConfigError of the cap is a ValueError too: read before YAML's errors are caught
        text = limits.read_text(path, limits.CONFIG_BYTES, ConfigError)
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)
    except _DuplicateKey as exc:
        raise ConfigError(f"{path}: {exc}") from None
    except (yaml.YAMLError, ValueError) as exc:  # ValueError: an integer of more than 4300 digits
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def load_params(path: Path | str | None = None) -> Params:
    path = Path(path) if path else project_root() / "params.yaml"
    try:
        params = Params.model_validate(_load_yaml(path))
    except ValidationError as exc:
        raise ConfigError(_format(exc, str(path))) from None
    params._source = str(path)
    return params


def load_environment(name: str) -> Environment:
    path = environment_dir(require_name(name, "environment")) / "environment.yaml"
    if not path.exists():
        known = sorted(p.parent.name for p in (project_root() / "pipelines").glob("*/environment.yaml"))
        raise ConfigError(f"environment {name!r}: {path} not found; known environments: {known}")
    data = _load_yaml(path)
    if isinstance(data.get("scenarios"), dict):
        data["scenarios"] = _expand_service_counts(data["scenarios"])
    try:
        return Environment.model_validate({"name": name, **data})
    except ValidationError as exc:
        raise ConfigError(_format(exc, str(path))) from None
