"""The documentation site (mkdocs.yml, docs/): it builds with --strict, its generated reference pages
describe the code they were built from, the shell blocks marked `<!-- test: run -->` run as written,
and the example files marked `<!-- test: environment NAME -->` / `<!-- test: params NAME -->` are
accepted by benchlib. All root-free and quick: the unit tier."""

from __future__ import annotations

import html
import os
import re
import shutil
import subprocess
import sys
import textwrap
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from benchlib import cli, collectors
from benchlib.settings.campaign import Params
from benchlib.settings.environment import Environment
from benchlib.settings.loading import load_environment
from benchlib.vocabulary import schema
from benchlib.vocabulary.schema import NAME_RULE

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"

# A marker comment, then a fenced block at the same indentation (a block may sit inside a list item)
MARKED = re.compile(
    r"^(?P<indent>[ \t]*)<!-- test: (?P<kind>run|environment|params)(?: (?P<name>[a-z0-9-]+))? -->\n"
    r"(?P=indent)```(?P<lang>\w+)\n(?P<body>.*?)\n(?P=indent)```",
    re.M | re.S,
)


def marked_blocks(kind: str) -> list[tuple[str, str | None, str]]:
    """(where, name, text) of every block of this kind in the site's pages."""
    out = []
    for page in sorted(DOCS.rglob("*.md")):
        source = page.read_text()
        for m in MARKED.finditer(source):
            if m["kind"] == kind:
                line = source[: m.start()].count("\n") + 1
                out.append((f"{page.relative_to(ROOT)}:{line}", m["name"], textwrap.dedent(m["body"])))
    return out


def _benchlib(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "benchlib.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site as CI builds it: --strict fails on a broken link, anchor or nav entry, or a warning
    of the hook that renders the reference."""
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}\n{proc.stderr}"
    return out


def _page(site: Path, path: str) -> str:
    return html.unescape((site / path / "index.html").read_text())


def _text(site: Path, path: str) -> str:
    """A page's text as a reader sees it: no tags, whitespace collapsed."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", (site / path / "index.html").read_text())).split())


def test_site_builds_strict_with_every_page_in_the_nav(site):
    pages = {p.relative_to(DOCS).with_suffix("").as_posix() for p in DOCS.rglob("*.md")}
    built = {p.parent.relative_to(site).as_posix() for p in site.rglob("index.html")}
    assert pages <= built | {"index"}
    assert (site / "images" / "report.png").stat().st_size > 10_000


def _fields(model: type[BaseModel], seen=None) -> set[tuple[type[BaseModel], str]]:
    """(model, field name) of ``model`` and of every model reachable from its fields."""
    seen = set() if seen is None else seen
    if model in seen:
        return set()
    seen.add(model)
    out = set()
    for name, field in model.model_fields.items():
        out.add((model, name))
        stack = [field.annotation]
        while stack:
            a = stack.pop()
            if isinstance(a, type) and issubclass(a, BaseModel):
                out |= _fields(a, seen)
            stack += typing.get_args(a)
    return out


def test_every_key_of_params_and_environment_has_a_description():
    """The reference's "meaning" column comes from these descriptions: a key without one is a blank
    row. The tools' test models live with their collectors and are left to them."""
    fields = _fields(Params) | _fields(Environment)
    missing = sorted(
        f"{model.__name__}.{name}"
        for model, name in fields
        if model.__module__.startswith("benchlib.settings.")
        and not model.model_fields[name].description
        and not model.model_fields[name].exclude  # a scenario's target: set on reading, not a key of the file
    )
    assert not missing, f"benchlib/settings/: fields without Field(description=...): {missing}"


def test_params_reference_lists_every_key_with_its_description(site):
    page, text = _page(site, "reference/params"), _text(site, "reference/params")
    fields = _fields(Params) | {f for m in collectors.MODULES.values() for f in _fields(m.Spec)}
    for model, name in fields:
        assert f"<code>{name}</code>" in page, f"{model.__name__}.{name} missing from reference/params"
        description = model.model_fields[name].description
        if description:  # as written in the code, Markdown syntax and all, minus the code spans' backticks
            assert " ".join(description.replace("`", "").split()) in text, f"{model.__name__}.{name}'s description"


def test_environment_reference_lists_every_key(site):
    page = _page(site, "reference/environment")
    text = _text(site, "reference/environment")
    for model, name in _fields(Environment) - {(Environment, "name")}:
        assert f"<code>{name}</code>" in page, f"{model.__name__}.{name} missing from reference/environment"
        description = model.model_fields[name].description
        if description:
            assert " ".join(description.replace("`", "").split()) in text, f"{model.__name__}.{name}'s description"


def test_the_name_rule_is_on_both_reference_pages(site):
    for page in ("reference/params", "reference/environment"):
        assert f"tests, also those a services list makes) is {NAME_RULE}." in _text(site, page), page


def test_cli_reference_has_every_command_and_option(site):
    page = _page(site, "reference/cli")
    todo = [(["benchlib"], cli.build_parser())]
    while todo:
        words, parser = todo.pop()
        assert f"<code>{' '.join(words)}</code>" in page, f"{' '.join(words)} missing from reference/cli"
        for action in parser._actions:
            for option in action.option_strings:
                assert option in page
            if hasattr(action, "choices") and isinstance(action.choices, dict):
                todo += [(words + [name], sub) for name, sub in action.choices.items()]


def test_schema_reference_has_every_column_and_metric(site):
    page = _page(site, "reference/schema")
    for table in (
        schema.RUNS_SCHEMA,
        schema.METRICS_SCHEMA,
        schema.PROFILE_RUNS_SCHEMA,
        schema.PROFILES_SCHEMA,
        schema.PROFILE_BPF_SCHEMA,
    ):
        for column in table:
            assert f"<code>{column}</code>" in page
    for name, metric in {**schema.METRICS, **schema.DERIVED_METRICS}.items():
        assert f"<code>{name}</code>" in page and metric.description.split(",")[0] in page
    # a column's comment in schema.py is its note
    assert "fortio/dns offered rate" in page


def test_shipped_environments_page_lists_every_scenario(site):
    page = _page(site, "reference/environments")
    for path in (ROOT / "pipelines").glob("*/environment.yaml"):
        for scenario in load_environment(path.parent.name).scenarios:
            assert f"<code>{scenario}</code>" in page, f"{path.parent.name}/{scenario}"


RUN_BLOCKS = marked_blocks("run")


def test_the_pages_mark_blocks_to_run():
    assert len(RUN_BLOCKS) >= 5, RUN_BLOCKS


@pytest.mark.parametrize("where, name, script", RUN_BLOCKS, ids=[w for w, _, _ in RUN_BLOCKS])
def test_marked_shell_block_runs(where, name, script):
    uv = shutil.which("uv")
    assert uv, "uv is not on PATH (scripts/setup.sh installs it)"
    # in this test's own environment: `uv run` neither syncs nor locks anything here
    env = {**os.environ, "UV_NO_SYNC": "1", "UV_FROZEN": "1"}
    proc = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180
    )
    assert proc.returncode == 0, (
        f"{where}: exit {proc.returncode}\n{script}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    )


EXAMPLES = sorted({name for kind in ("environment", "params") for _, name, _ in marked_blocks(kind)})


def test_the_pages_have_example_files():
    assert {"bare-metal", "my-lab"} <= set(EXAMPLES)


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_files_are_accepted(name, tmp_path):
    """An example environment and its params, saved where the page says, in a project of their own:
    `benchlib validate` accepts them, and `benchlib render` renders a remote target's commands."""
    (tmp_path / "dvc.yaml").write_text("stages: {}\n")
    [env_text] = [text for _, n, text in marked_blocks("environment") if n == name]
    [params_text] = [text for _, n, text in marked_blocks("params") if n == name]
    (tmp_path / "pipelines" / name).mkdir(parents=True)
    (tmp_path / "pipelines" / name / "environment.yaml").write_text(env_text + "\n")
    (tmp_path / "params.yaml").write_text(params_text + "\n")
    proc = _benchlib("validate", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "params.yaml is valid" in proc.stdout
    if "target: lab" not in env_text:
        proc = _benchlib("render", "--env", name, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert "netserver" in proc.stdout


def test_readme_is_short_keeps_the_two_commands_and_links_into_the_site():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < 200
    for command in (
        "bash scripts/reproduce.sh",
        "bash scripts/test.sh",
        "bash scripts/test.sh --fast",
        "uv run mkdocs serve",
    ):
        assert command in readme
    links = re.findall(r"\]\((docs/[^)#]+)", readme)
    assert links and all((ROOT / link).is_file() for link in links), [
        link for link in links if not (ROOT / link).is_file()
    ]
