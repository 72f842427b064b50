"""params.yaml variants."""

from __future__ import annotations

import yaml

from tests.conftest import REPO


def write(tmp_path, mutate):
    """The project's params.yaml with ``mutate(data)`` applied, written under ``tmp_path``: its path."""
    data = yaml.safe_load((REPO / "params.yaml").read_text())
    mutate(data)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(data))
    return path
