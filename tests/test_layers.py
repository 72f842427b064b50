"""Imports run one way: from the CLI down to the errors module, never up, never in a cycle.

Every benchlib import counts, those inside functions included (a lazy import
is still a dependency). A module may import a module of a lower layer, or one
of its own package that does not import it back.
"""

import ast
from pathlib import Path

import pytest

from tests.conftest import REPO

PACKAGE = REPO / "benchlib"
# lowest first; a package's name stands for all its modules
LAYERS = [
    # escape: data made safe to show; limits: caps on reads; files: written whole or not at all
    ["benchlib.errors", "benchlib.escape", "benchlib.limits", "benchlib.files"],
    ["benchlib.logs"],  # where messages go (logging), for the CLI
    [
        "benchlib.schema",
        "benchlib.collectors",
        "benchlib.cpu",
        "benchlib.disturbance",
        "benchlib.stacks",
        "benchlib.meshes",
    ],  # pure: builders, parsers, vocabulary (meshes: the mesh shapes' names)
    ["benchlib.machine"],  # the machine-wide collect lock, dying with the parent
    ["benchlib.scenarios"],  # each target's scenario model, picked by the environment's target
    ["benchlib.config"],  # the settings: tests are the collectors' models, metric names the schema's
    ["benchlib.record_schema"],  # every field of a record's meta.json and cpu.json: its type and range
    ["benchlib.record", "benchlib.parse_index"],  # parse_index: which records the last parse read
    ["benchlib.plan"],  # what each environment runs, its runs in blocks, and the campaign's identity
    ["benchlib.bpfstats"],  # the kernel's count of each BPF program's runs over a profiled run
    ["benchlib.profiling"],  # perf records a run's CPU window; each target says where perf runs
    ["benchlib.targets", "benchlib.images"],
    ["benchlib.runner", "benchlib.tidy", "benchlib.analysis", "benchlib.store"],  # store: records against DVC
    ["benchlib.report"],  # the analysis in words, tables and figures; the rendered report
    ["benchlib.doctor"],  # what a campaign needs, asked of the targets' checks before collect
    ["benchlib.commands"],  # one module per command: its arguments and the library calls it makes
    ["benchlib.cli"],  # the command line built from the commands, the global options, the exit codes
]
# what notebooks may use: the report, the analysis and what it stands on
NOTEBOOK_IMPORTS = ("benchlib.report", "benchlib.analysis", "benchlib.schema", "benchlib.config", "benchlib.escape")


def modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(REPO).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


MODULES = modules()


def imports(name: str, path: Path) -> set[str]:
    """The benchlib modules ``name`` imports, anywhere in its source."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            stem = ".".join([*base, *(node.module.split(".") if node.module else [])])
            for alias in node.names:
                found.add(f"{stem}.{alias.name}" if f"{stem}.{alias.name}" in MODULES else stem)
    return {m for m in found if m in MODULES}


GRAPH = {name: imports(name, path) - {name} for name, path in MODULES.items()}


def layer(name: str) -> int:
    for i, names in enumerate(LAYERS):
        if any(name == n or name.startswith(n + ".") for n in names):
            return i
    raise AssertionError(f"{name} is in no layer of tests/test_layers.py: place it")


def top_package(name: str) -> str:
    return ".".join(name.split(".")[:2])


def test_every_module_has_a_layer():
    assert len(MODULES) > 20
    for name in MODULES:
        if name != "benchlib":
            layer(name)


@pytest.mark.parametrize("name", sorted(n for n in GRAPH if n != "benchlib"))
def test_no_import_runs_upward(name):
    upward = [
        m for m in GRAPH[name] if m != "benchlib" and top_package(m) != top_package(name) and layer(m) >= layer(name)
    ]
    assert not upward, f"{name} (layer {layer(name)}) imports {upward} of the same or a higher layer"


def test_no_import_cycle():
    # depth-first search; a back edge is a cycle
    state, stack = {}, []

    def visit(n):
        state[n] = "open"
        stack.append(n)
        for m in sorted(GRAPH[n]):
            if state.get(m) == "open":
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(m) :] + [m]))
            if m not in state:
                visit(m)
        stack.pop()
        state[n] = "done"

    for n in sorted(GRAPH):
        if n not in state:
            visit(n)


def test_the_graph_sees_lazy_and_relative_imports():
    # the check above would pass vacuously if the parser missed these
    assert "benchlib.collectors.netperf" in GRAPH["benchlib.collectors"]  # inside get()
    assert {"benchlib.record", "benchlib.targets", "benchlib.collectors"} <= GRAPH["benchlib.runner"]
    assert "benchlib.schema" in GRAPH["benchlib.analysis.stats"]


@pytest.mark.parametrize("notebook", sorted((REPO / "notebooks").glob("*.py")), ids=lambda p: p.name)
def test_notebooks_use_only_the_analysis(notebook):
    used = set()
    for node in ast.walk(ast.parse(notebook.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("benchlib"):
            used.add(node.module)
        elif isinstance(node, ast.Import):
            used |= {a.name for a in node.names if a.name.startswith("benchlib")}
    assert used, "a notebook that imports nothing from benchlib computes on its own"
    assert all(m.startswith(NOTEBOOK_IMPORTS) for m in used), used
