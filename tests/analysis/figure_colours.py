"""The colour each scenario is drawn in, read from plotly figure dicts (a figure's to_plotly_json(), or
the JSON the executed notebooks hold): what a reader sees, whichever builder drew it."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

PLOTLY_JSON = "application/vnd.plotly.v1+json"


def _values(v) -> list | None:
    """A trace's array as a list; None for a scalar or a typed (binary-encoded, numeric) array."""
    if v is None or isinstance(v, (str, dict)):
        return None
    return list(v)


def _scenario(name, scenarios: set[str]) -> str | None:
    """The scenario a trace or category is named after: the scenario itself, or a mesh path label
    ("proxy-both (2 hops, mTLS)")."""
    if not isinstance(name, str):
        return None
    if name in scenarios:
        return name
    bare = re.sub(r" \([^)]*\)$", "", name)
    return bare if bare in scenarios else None


def drawn(fig: dict, scenarios: Iterable[str]) -> list[tuple[str, str]]:
    """(scenario, colour) for each mark of ``fig`` drawn in a scenario's colour: a trace named after
    the scenario (its marker colour, else its line colour), or a bar or point whose category on the
    axis is the scenario and whose marker colours are given point by point."""
    names, out = set(scenarios), []
    for t in fig.get("data", []):
        marker, line = t.get("marker") or {}, t.get("line") or {}
        colour = marker.get("color")
        scenario = _scenario(t.get("name"), names)
        if scenario is not None and isinstance(colour, str):
            out.append((scenario, colour))
        elif scenario is not None and isinstance(line.get("color"), str) and colour is None:
            out.append((scenario, line["color"]))
        elif (colours := _values(colour)) is not None and all(isinstance(c, str) for c in colours):
            for axis in ("x", "y"):
                labels = _values(t.get(axis))
                if labels and len(labels) == len(colours):
                    out += [(s, c) for label, c in zip(labels, colours, strict=True) if (s := _scenario(label, names))]
                    break
    return [(s, c.lower()) for s, c in out]


def by_scenario(figs: dict[str, dict], scenarios: Iterable[str]) -> dict[str, dict[str, set[str]]]:
    """{scenario: {colour: the figures drawing the scenario in it}} over ``figs`` ({name: figure dict})."""
    scenarios = list(scenarios)
    seen: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for name, fig in figs.items():
        for scenario, colour in drawn(fig, scenarios):
            seen[scenario][colour].add(name)
    return {s: dict(c) for s, c in seen.items()}


def in_notebooks(directory: Path) -> dict[str, dict]:
    """Every plotly figure the executed notebooks in ``directory`` show, as figure dicts:
    {"<notebook>#<k>": figure}."""
    figs = {}
    for path in sorted(directory.glob("*.ipynb")):
        nb = json.loads(path.read_text(encoding="utf-8"))
        k = 0
        for cell in nb["cells"]:
            for output in cell.get("outputs", []):
                if PLOTLY_JSON in output.get("data", {}):
                    figs[f"{path.stem}#{k}"] = output["data"][PLOTLY_JSON]
                    k += 1
    return figs
