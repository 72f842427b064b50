"""MkDocs hook: the reference pages, rendered from the code at every build so they cannot drift.

- reference/params.md and reference/environment.md: the pydantic models of benchlib/settings/
  (campaign.py, analysis.py, environment.py, scenarios/, and each tool's test model in
  benchlib/collectors/), with their types, defaults, bounds and field descriptions;
- reference/cli.md: the help of every command of benchlib/cli.py's argparse parser (built from benchlib/commands/);
- reference/schema.md: the tidy tables' columns (benchlib/vocabulary/schema.py, with the comment each column
  carries there) and the metric registry;
- reference/environments.md: the scenarios of every shipped environment (pipelines/*/environment.yaml).

A hook (mkdocs' own `hooks:` setting) rather than a plugin: it needs no dependency beyond mkdocs,
runs inside the build and `mkdocs serve` (which watches benchlib/ and pipelines/, see mkdocs.yml),
and `File.generated` is mkdocs' API for pages that exist only in the build.
"""

from __future__ import annotations

import argparse
import io
import os
import tokenize
import types
import typing
from pathlib import Path

from mkdocs.structure.files import File, Files
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

ROOT = Path(__file__).resolve().parents[2]


def on_files(files: Files, config) -> Files:
    for path, render in PAGES.items():
        files.append(File.generated(config, path, content=render()))
    return files


# --- pydantic models ----------------------------------------------------------------------------


def _type(annotation) -> str:
    """An annotation as a reader of a YAML file thinks of it: `int or 'max'`, `list of str`."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type(args[0])
    if origin is typing.Literal:
        return " or ".join(repr(a) for a in args)
    if origin in (typing.Union, types.UnionType):  # once each: a union of models is one "mapping (below)"
        return " or ".join(dict.fromkeys(_type(a) for a in args if a is not type(None)))
    if origin is list:
        return f"list of {_type(args[0])}"
    if origin is tuple:
        return "[" + ", ".join(_type(a) for a in args) + "]"
    if origin is dict:
        return f"mapping {_type(args[0])} -> {_type(args[1])}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "mapping (below)"
    return getattr(annotation, "__name__", str(annotation).replace("typing.", ""))


def _models_in(annotation) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for a in typing.get_args(annotation) for m in _models_in(a)]


def _default(field) -> str:
    if field.is_required() or field.default is PydanticUndefined:
        return "required"
    if isinstance(field.default, BaseModel):
        return "see below"
    return f"`{field.default!r}`" if field.default not in ([], {}) else f"`{field.default}`"


def _bounds(field) -> str:
    names = {
        "ge": ">=",
        "gt": ">",
        "le": "<=",
        "lt": "<",
        "min_length": "length >=",
        "max_length": "length <=",
        "pattern": "matches",
    }
    out = []
    for meta in field.metadata:
        for attr, word in names.items():
            value = getattr(meta, attr, None)
            if value is not None:
                out.append(f"{word} `{value}`")
        if getattr(meta, "allow_inf_nan", None) is False:
            out.append("finite")
    return ", ".join(out)


def _names_rule() -> list[str]:
    from benchlib.vocabulary.schema import NAME_RULE

    return [
        "## Names",
        "",
        "Every name that becomes a directory or a table's key (the campaign, environments, scenarios, "
        "tests, also those a `services` list makes) is "
        f"{_cell(NAME_RULE)}. Names of one kind differ in more than upper and lower case (on a "
        "case-insensitive file system their records would share a directory). `validate`, `collect`, "
        "`parse` and `compare` refuse any other, naming the file and key or the record.",
        "",
    ]


def _cell(text: str) -> str:
    """Text from the code as one table cell of Markdown: on one line, and outside `code` spans with
    the characters Markdown would take for syntax escaped (a `{...}` would become an attribute list,
    a `<name>` an HTML tag)."""
    parts = " ".join(text.split()).split("`")
    for i in range(0, len(parts), 2):  # the even parts are outside backticks
        parts[i] = parts[i].replace("<", "&lt;").replace("{", "\\{").replace("}", "\\}")
    return "`".join(parts).replace("|", "\\|")


def _model_tables(model: type[BaseModel], key: str, seen: set) -> list[str]:
    """One table per model reachable from ``model``, headed by the YAML key it sits under."""
    if (model, key) in seen:
        return []
    seen.add((model, key))
    doc = _cell(model.__doc__ or "") if "__doc__" in vars(model) and model.__doc__ else ""
    out = [
        f"### `{key}`",
        "",
        *([doc, ""] if doc else []),
        "| key | type | default | bounds | meaning |",
        "|---|---|---|---|---|",
    ]
    nested = []
    for name, field in model.model_fields.items():
        if field.exclude:
            continue  # set when the file is read, not written in it (a scenario's target)
        out.append(
            f"| `{name}` | {_cell(_type(field.annotation))} | {_default(field)} | {_bounds(field)} "
            f"| {_cell(field.description or '')} |"
        )
        origin = typing.get_origin(field.annotation)
        for sub in _models_in(field.annotation):
            many = origin is dict or any(typing.get_origin(a) is dict for a in typing.get_args(field.annotation))
            nested.append(
                (
                    sub,
                    f"{key}.{name}.<name>"
                    if many
                    else f"{key}.{name}[]"
                    if "list" in _type(field.annotation)
                    else f"{key}.{name}",
                )
            )
    out.append("")
    for sub, sub_key in nested:
        out += _model_tables(sub, sub_key, seen)
    return out


def render_params() -> str:
    from benchlib import collectors
    from benchlib.settings import campaign

    out = [
        "# params.yaml",
        "",
        "The campaign definition. `benchlib validate` checks it against these models "
        "(`benchlib/settings/`), and every error names the file and the key. Generated from the code.",
        "",
        *_names_rule(),
    ]
    out += ["## Top level", "", "| key | type | default | meaning |", "|---|---|---|---|"]
    out += [
        f"| `{name}` | {_cell(_type(field.annotation))} | {_default(field)} | {_cell(field.description or '')} |"
        for name, field in campaign.Params.model_fields.items()
    ]
    out.append("")
    seen: set = set()
    for name, field in campaign.Params.model_fields.items():
        if name == "tests":
            continue  # a union of the tools' models: below, one table per tool
        for model in _models_in(field.annotation):
            key = "environments.<env>" if name == "environments" else name
            out += _model_tables(model, key, seen)
    out += [
        "## `tests.<name>`",
        "",
        "A test is one tool invocation; its `tool` picks the model, which holds the kinds that tool "
        "runs and only the fields it uses (a field of another tool is refused).",
        "",
    ]
    for tool, module in collectors.MODULES.items():
        out += _model_tables(module.Spec, f"tests.<name> with tool: {tool}", seen)
    return "\n".join(out)


def render_environment() -> str:
    from benchlib.settings import environment, scenarios

    out = [
        "# environment.yaml",
        "",
        "`pipelines/<env>/environment.yaml`: where a campaign runs (its `target`) and its scenarios. "
        "A scenario with `services: [a, b]` expands into one scenario per count, named `<name>-<count>`. "
        "Generated from `benchlib/settings/`; the shipped environments are listed in "
        "[Shipped environments](environments.md).",
        "",
        *_names_rule(),
    ]
    fields = dict(environment.Environment.model_fields)
    fields.pop("name")  # the folder's name, not a key of the file
    out += _environment_table(fields)
    seen: set = set()
    for name, field in fields.items():
        if name == "scenarios":
            continue  # a union of the targets' models: below, one table per target
        for sub in _models_in(field.annotation):
            out += _model_tables(sub, name, seen)
    out += [
        "## `scenarios.<name>`",
        "",
        "The environment's `target` picks the scenario's model, which holds the fields that target uses "
        "(a field of another target's scenarios is refused).",
        "",
    ]
    for target, model in scenarios.SCENARIOS.items():
        out += _model_tables(model, f"scenarios.<name> with target: {target}", seen)
    return "\n".join(out)


def _environment_table(fields: dict) -> list[str]:
    out = ["## Top level", "", "| key | type | default | bounds | meaning |", "|---|---|---|---|---|"]
    for name, field in fields.items():
        out.append(
            f"| `{name}` | {_cell(_type(field.annotation))} | {_default(field)} | {_bounds(field)} "
            f"| {_cell(field.description or '')} |"
        )
    return out + [""]


# --- the CLI ------------------------------------------------------------------------------------


def _commands(parser: argparse.ArgumentParser, words: list[str]):
    yield words, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, words + [name])


def render_cli() -> str:
    from benchlib import cli

    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal: the page must not depend on it
    try:
        out = [
            "# The benchlib command",
            "",
            "Every command's `--help`, generated from `benchlib/commands/`. `benchlib COMMAND --help` prints "
            "the same. Exit codes: [Exit codes](exit-codes.md).",
            "",
        ]
        for words, parser in _commands(cli.build_parser(), ["benchlib"]):
            out += [f"## `{' '.join(words)}`", "", "```text", parser.format_help().rstrip(), "```", ""]
        return "\n".join(out)
    finally:
        if old is None:
            os.environ.pop("COLUMNS")
        else:
            os.environ["COLUMNS"] = old


# --- tidy tables --------------------------------------------------------------------------------


def _column_comments() -> dict[tuple[str, str], str]:
    """(schema name, column) -> the comment on that column's line in benchlib/vocabulary/schema.py."""
    source = (ROOT / "benchlib" / "vocabulary" / "schema.py").read_text()
    comments, schema, last_key = {}, None, None
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.NAME and tok.string.endswith("_SCHEMA") and tok.start[1] == 0:
            schema = tok.string
        elif tok.type == tokenize.STRING and schema:
            last_key = (schema, tok.string.strip("\"'"), tok.start[0])
        elif tok.type == tokenize.COMMENT and last_key and last_key[2] == tok.start[0]:
            comments[last_key[:2]] = tok.string.lstrip("# ")
    return comments


def render_schema() -> str:
    from benchlib.vocabulary import schema

    comments = _column_comments()
    out = [
        "# Tidy tables",
        "",
        "`benchlib parse` writes these parquet files to `data/processed/`; `benchlib/vocabulary/schema.py` holds every "
        "table to exactly these columns and dtypes (strict casts). Generated from the code.",
        "",
    ]
    tables = {
        "runs.parquet": ("RUNS_SCHEMA", "one row per measured run"),
        "metrics.parquet": ("METRICS_SCHEMA", "one row per run and metric (long format)"),
        "profile_runs.parquet": ("PROFILE_RUNS_SCHEMA", "one row per profiled run (never in runs)"),
        "profiles.parquet": ("PROFILES_SCHEMA", "one row per profiled run, side, task and stack"),
        "profile_bpf.parquet": ("PROFILE_BPF_SCHEMA", "one row per profiled run and BPF program that ran"),
    }
    for file, (name, what) in tables.items():
        out += [f"## `{file}`", "", f"{what.capitalize()}.", "", "| column | dtype | note |", "|---|---|---|"]
        for col, dtype in getattr(schema, name).items():
            out.append(f"| `{col}` | {dtype} | {_cell(comments.get((name, col), ''))} |")
        out.append("")
    out += [
        "Older runs tables (written before a column existed) read with these values filled in "
        "(`schema.RUNS_DEFAULTS`): " + ", ".join(f"`{k}` = `{v!r}`" for k, v in schema.RUNS_DEFAULTS.items()) + ".",
        "",
    ]
    out += [
        "## Metrics",
        "",
        "`metric` in `metrics.parquet` is one of these (`schema.METRICS`). *Better*: the "
        "direction a verdict calls better. *Headline*: the metric of a test's primary comparison.",
        "",
        "| metric | unit | better | sides | headline | meaning |",
        "|---|---|---|---|---|---|",
    ]
    for name, m in schema.METRICS.items():
        out.append(
            f"| `{name}` | {m.unit} | {'higher' if m.higher_is_better else 'lower'} | "
            f"{', '.join(m.sides)} | {'yes' if m.primary else ''} | {_cell(m.description)} |"
        )
    out += [
        "",
        "Derived by `benchlib analyse` (`schema.DERIVED_METRICS`), not stored by `parse`:",
        "",
        "| metric | unit | better | sides | meaning |",
        "|---|---|---|---|---|",
    ]
    for name, m in schema.DERIVED_METRICS.items():
        out.append(
            f"| `{name}` | {m.unit} | {'higher' if m.higher_is_better else 'lower'} | "
            f"{', '.join(m.sides)} | {_cell(m.description)} |"
        )
    out += [
        "",
        "Each test kind's headline metric (`schema.HEADLINE_BY_KIND`; a paced HTTP or DNS test, whose "
        "client fixes the rate, is judged by its median latency instead: "
        + ", ".join(f"`{a}` -> `{b}`" for a, b in schema.PACED_HEADLINE.items())
        + "):",
        "",
        "| kind | headline metric |",
        "|---|---|",
    ]
    out += [f"| {kind} | `{metric}` |" for kind, metric in schema.HEADLINE_BY_KIND.items()]
    return "\n".join(out) + "\n"


# --- shipped environments -----------------------------------------------------------------------


def render_environments() -> str:
    from benchlib.settings import loading

    out = [
        "# Shipped environments",
        "",
        "The scenarios of every environment under `pipelines/`, read from its `environment.yaml` at build "
        "time (a scenario with a list of service counts is listed once per count).",
        "",
    ]
    for path in sorted((ROOT / "pipelines").glob("*/environment.yaml")):
        env = loading.load_environment(path.parent.name)
        out += [
            f"## `{env.name}` (target: {env.target})",
            "",
            _cell(env.description),
            "",
            "| scenario | what it is | corresponds to |",
            "|---|---|---|",
        ]
        for name, sc in env.scenarios.items():
            out.append(f"| `{name}` | {_cell(sc.description)} | {_cell(sc.maps_to)} |")
        out.append("")
    return "\n".join(out)


PAGES = {
    "reference/params.md": render_params,
    "reference/environment.md": render_environment,
    "reference/cli.md": render_cli,
    "reference/schema.md": render_schema,
    "reference/environments.md": render_environments,
}
