"""The import graph of benchlib's modules, read from their source."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

PACKAGE = REPO / "benchlib"


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
