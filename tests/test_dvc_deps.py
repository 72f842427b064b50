"""dvc.yaml's code deps cannot drift: each stage's deps cover every benchlib module its command
runs, found from the command's function in cli.py, the cli functions it calls, the modules they
name, and those modules' imports (the graph tests/test_layers.py checks); the report stage also
runs the notebooks. cli.py itself is left out: it holds every command, and an edit of one would
otherwise re-run every stage."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO
from tests.test_layers import GRAPH, MODULES, imports

CLI = REPO / "benchlib" / "cli.py"


def _module_names(tree: ast.AST, package: str = "benchlib") -> dict[str, str]:
    """{local name: benchlib module} of the import statements anywhere in ``tree`` (relative to cli)."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            stem = ".".join([package, *(node.module.split(".") if node.module else [])])
            for alias in node.names:
                full = f"{stem}.{alias.name}"
                names[alias.asname or alias.name] = full if full in MODULES else stem
    return names


def _closure(modules: set[str]) -> set[str]:
    """``modules`` and every benchlib module they import, directly or not."""
    closure, todo = set(), list(modules)
    while todo:
        m = todo.pop()
        if m not in closure and m in MODULES:
            closure.add(m)
            todo += GRAPH[m]
    return closure


def command_modules(command: str) -> set[str]:
    """The benchlib modules `benchlib <command>` runs: its function, the cli functions it calls,
    the modules they name, and those modules' import closure."""
    tree = ast.parse(CLI.read_text())
    functions = {f.name: f for f in tree.body if isinstance(f, ast.FunctionDef)}
    top_level = _module_names(ast.Module(body=[n for n in tree.body if isinstance(n, ast.ImportFrom)], type_ignores=[]))
    seen, todo, used = set(), [f"cmd_{command}"], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        local = {**top_level, **_module_names(functions[name])}
        for node in ast.walk(functions[name]):
            if isinstance(node, ast.Name):
                if node.id in functions:
                    todo.append(node.id)
                elif node.id in local:
                    used.add(local[node.id])
        used |= set(_module_names(functions[name]).values())
    return _closure(used) - {"benchlib", "benchlib.cli"}


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


def test_the_walk_finds_what_a_command_names():
    assert {"benchlib.record", "benchlib.tidy", "benchlib.runner", "benchlib.schema"} <= command_modules("parse")
    assert "benchlib.report.render" in command_modules("report")
    assert "benchlib.analysis.analyse" in command_modules("analyse")
    assert "benchlib.targets.lab" in command_modules("collect")


# what only the report draws, renders or writes: the analyse stage imports none of them
PRESENTATION = ("plotly", "great_tables", "nbconvert", "papermill", "jupytext", "nbformat", "IPython", "markdown_it")


def test_the_analyse_stage_depends_on_nothing_it_does_not_run():
    needed = {MODULES[m].relative_to(REPO) for m in command_modules("analyse")}
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
