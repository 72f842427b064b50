"""Imports run one way: from the CLI down to the errors module, never up, never in a cycle.

Every benchlib import counts, those inside functions included (a lazy import
is still a dependency). A module may import a module of a lower layer, or one
of its own package that does not import it back.
"""

import ast

import pytest

from tests.conftest import REPO
from tests.support.imports import GRAPH, MODULES

# lowest first; a folder's name stands for all its modules, which may import each other (no cycle)
LAYERS = [
    ["benchlib.base"],  # errors, data made safe to show, caps on reads, files written whole, log routing
    ["benchlib.vocabulary"],  # the names all share: metrics and their table columns, the mesh shapes
    ["benchlib.collectors"],  # one module per tool: its tests' model, a pure command builder and parser
    ["benchlib.host"],  # the machine: its collect lock, its CPUs' samples, the load of other processes
    ["benchlib.profiling"],  # perf's records of a run's CPU window, folded stacks, BPF programs' run counts
    ["benchlib.settings"],  # params and environments, each target's scenario model
    ["benchlib.records"],  # a run's record on disk: its layout, typed fields, checksums, the DVC store
    ["benchlib.targets"],  # where client and server run: the netns lab, Kubernetes, SSH hosts, meshes
    ["benchlib.measure"],  # the plan in blocks, the runner that measures it, the checks before collect
    ["benchlib.tables"],  # records parsed into the tidy tables, and which records the last parse read
    ["benchlib.analysis"],  # the tables into normalized values, summaries and comparisons
    ["benchlib.report"],  # the analysis in words, tables and figures; the rendered report
    ["benchlib.commands"],  # one module per command: its arguments and the library calls it makes
    ["benchlib.cli"],  # the command line built from the commands, the global options, the exit codes
]
# what notebooks may use: the report, the analysis and what it stands on
NOTEBOOK_IMPORTS = (
    "benchlib.report",
    "benchlib.analysis",
    "benchlib.vocabulary.schema",
    "benchlib.settings.loading",
    "benchlib.base.escape",
)


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
    assert {"benchlib.records.record", "benchlib.targets", "benchlib.collectors"} <= GRAPH["benchlib.measure.runner"]
    assert "benchlib.vocabulary.schema" in GRAPH["benchlib.analysis.stats"]


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
