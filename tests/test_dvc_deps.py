"""dvc.yaml's code deps cannot drift: each stage's deps cover every benchlib module its command
runs, found from the command's module in benchlib/commands/ and its imports (the graph
tests/test_layers.py checks); the report stage also runs the notebooks. cli.py itself is left out:
it builds the command line from every command, and an edit of one would otherwise re-run every
stage."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO
from tests.support.imports import GRAPH, MODULES, imports

# Not the stages' code: cli builds the command line from every command, the package's __init__
# names them all, and logs decides where messages go, never what a stage writes.
NOT_STAGE_CODE = {"benchlib", "benchlib.cli", "benchlib.commands", "benchlib.base.logs"}


def _runs_code(module: str) -> bool:
    """Not a package whose __init__ holds only its docstring (the folders that name a layer)."""
    body = ast.parse(MODULES[module].read_text()).body
    return not (MODULES[module].name == "__init__.py" and all(isinstance(n, ast.Expr) for n in body))


def _closure(modules: set[str]) -> set[str]:
    """``modules`` and every benchlib module they import, directly or not, with the packages that hold
    them (importing a module runs its packages' __init__ first)."""
    closure, todo = set(), list(modules)
    while todo:
        m = todo.pop()
        if m not in closure and m in MODULES and m not in NOT_STAGE_CODE and _runs_code(m):
            closure.add(m)
            todo += [*GRAPH[m], *(m.rsplit(".", k)[0] for k in range(1, m.count(".")))]
    return closure


def command_modules(command: str) -> set[str]:
    """The benchlib modules `benchlib <command>` runs: its module in benchlib/commands/ and that
    module's import closure."""
    return _closure({f"benchlib.commands.{command}"})


def notebook_modules() -> set[str]:
    used = set()
    for nb in (REPO / "notebooks").glob("*.py"):
        used |= imports("notebooks." + nb.stem, nb)
    return _closure(used) - {"benchlib"}


def stages() -> dict[str, dict]:
    return yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]


def covered(path: Path, deps: list[str]) -> bool:
    rel = path.relative_to(REPO)
    return any(rel == Path(d) or Path(d) in rel.parents for d in deps)


@pytest.mark.parametrize("stage", sorted(stages()))
def test_a_stage_depends_on_every_module_its_command_runs(stage):
    spec = stages()[stage]
    body = spec.get("do", spec)
    words = body["cmd"].split()
    command = words[words.index("benchlib") + 1]
    needed = command_modules(command) | (notebook_modules() if command == "report" else set())
    assert len(needed) > 3
    missing = sorted(str(MODULES[m].relative_to(REPO)) for m in needed if not covered(MODULES[m], body["deps"]))
    assert not missing, f"dvc.yaml: stage {stage} (benchlib {command}) lacks deps {missing}"


def test_the_report_stage_depends_on_every_notebook_of_the_report():
    from benchlib.report.render import NOTEBOOKS

    deps = stages()["report"]["deps"]
    assert [n for n in NOTEBOOKS if f"notebooks/{n}" not in deps] == []


def test_the_walk_finds_what_a_command_names():
    assert {
        "benchlib.records.record",
        "benchlib.tables.tidy",
        "benchlib.measure.plan",
        "benchlib.vocabulary.schema",
    } <= command_modules("parse")
    assert "benchlib.measure.runner" not in command_modules("parse") | command_modules("analyse")
    assert "benchlib.report.render" in command_modules("report")
    assert "benchlib.analysis.analyse" in command_modules("analyse")
    assert "benchlib.targets.lab" in command_modules("collect")


# what only the report draws, renders or writes: the analyse stage imports none of them
PRESENTATION = ("plotly", "great_tables", "nbconvert", "papermill", "jupytext", "nbformat", "IPython", "markdown_it")


def test_the_analyse_stage_depends_on_nothing_it_does_not_run():
    needed = {MODULES[m].relative_to(REPO) for m in command_modules("analyse")}
    needed |= {MODULES[m].relative_to(REPO) for m in MODULES if not _runs_code(m)}  # a layer's docstring
    code = [d for d in stages()["analyse"]["deps"] if d.startswith("benchlib")]
    extra = sorted(
        str(p.relative_to(REPO))
        for d in code
        for p in ((REPO / d).rglob("*.py") if (REPO / d).is_dir() else [REPO / d])
        if p.relative_to(REPO) not in needed
    )
    assert not extra, f"dvc.yaml: stage analyse depends on modules benchlib analyse never runs: {extra}"


def test_the_analyse_stage_imports_no_presentation_library():
    names = sorted(m for m in command_modules("analyse") if m.startswith("benchlib."))
    assert "benchlib.analysis.mesh" in names and not any(m.startswith("benchlib.report") for m in names)
    # imported for real: a presentation library a third-party module pulls in counts as well
    probe = f"import sys; {'; '.join(f'import {m}' for m in names)}; print(sorted({{m.split('.')[0] for m in sys.modules}}))"
    loaded = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert not [lib for lib in PRESENTATION if f"'{lib}'" in loaded], loaded


def test_compare_without_its_page_loads_no_notebook_stack():
    """`benchlib compare --json --no-html`, a CI gate, imports what it runs and no papermill or plotly."""
    probe = (
        "import sys; from benchlib.commands import compare; from benchlib.analysis import compare, normalize; "
        "from benchlib.report import compare; print(sorted({m.split('.')[0] for m in sys.modules}))"
    )
    loaded = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert "'polars'" in loaded and not [lib for lib in PRESENTATION if f"'{lib}'" in loaded], loaded


def test_the_report_loads_a_presentation_library():
    # the probe above would pass vacuously if it could not see one
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, benchlib.report.figures; print(sorted(sys.modules))"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "'plotly'" in loaded


def test_every_cached_output_is_git_ignored_so_a_pipeline_run_changes_no_tracked_file():
    # DVC adds a cached output it writes to the .gitignore beside it: one not listed yet would make
    # that tracked .gitignore change on every first run. A campaign's own folder gets a new file.
    outs = [
        next(iter(o)) if isinstance(o, dict) else o
        for stage in stages().values()
        for o in (stage.get("do", stage).get("outs") or [])
        if not (isinstance(o, dict) and next(iter(o.values())).get("cache") is False)
    ]
    fixed = [o for o in outs if "${" not in o]
    assert fixed
    check = subprocess.run(
        ["git", "-C", str(REPO), "check-ignore", "--no-index", *fixed], capture_output=True, text=True, timeout=30
    )
    assert sorted(set(fixed) - set(check.stdout.split())) == []
