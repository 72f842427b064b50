"""The target registry: each target by the name environment.yaml's `target` gives, imported when asked."""

import subprocess
import sys
import typing

import pytest

from benchlib import config, meshes, targets
from benchlib.targets.lab import haproxy
from benchlib.targets.mesh import shapes


def test_every_target_name_of_the_settings_is_registered():
    names = typing.get_args(config.Environment.model_fields["target"].annotation)
    assert set(names) == set(targets.TARGETS)
    for name in names:
        cls = targets.get(name)
        assert issubclass(cls, targets.Target) and cls.kind == name


def test_an_unknown_target_is_named():
    with pytest.raises(
        config.ConfigError, match=r"unknown target 'nomad'; known targets: \['kubernetes', 'lab', 'ssh'\]"
    ):
        targets.get("nomad")


def test_a_target_is_imported_only_when_asked():
    code = (
        "import sys, benchlib.cli, benchlib.doctor\n"
        "from benchlib import targets\n"
        "before = 'benchlib.targets.ssh' in sys.modules\n"
        "targets.get('ssh')\n"
        "print(before, 'benchlib.targets.ssh' in sys.modules, 'kubernetes' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "True", "False"]  # imported by get(); the Kubernetes client by no command's import


def test_the_mesh_names_are_one_list():
    assert shapes.MESHES is meshes.MESHES
    assert config.Scenario.model_fields["mesh"].annotation == meshes.Mesh | None
    assert set(haproxy.MESHES) == set(meshes.MESHES) - set(meshes.WAYPOINT_MESHES) == set(config.CLUSTER_MESHES)
