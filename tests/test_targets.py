"""The target registry: each target by the name environment.yaml's `target` gives, imported when asked."""

import subprocess
import sys
import typing

import pytest

from benchlib import targets
from benchlib.base.errors import ConfigError
from benchlib.settings import scenarios
from benchlib.settings.environment import Environment
from benchlib.settings.identity import scenario_definition
from benchlib.settings.loading import load_environment
from benchlib.settings.scenarios.kubernetes import CLUSTER_MESHES
from benchlib.targets import registry
from benchlib.targets.lab import haproxy
from benchlib.targets.mesh import shapes
from benchlib.vocabulary import meshes
from tests.conftest import project_with_environment


def test_every_target_name_of_the_settings_is_registered():
    names = typing.get_args(Environment.model_fields["target"].annotation)
    assert set(names) == set(registry.TARGETS)
    for name in names:
        cls = registry.get(name)
        assert issubclass(cls, targets.Target) and cls.kind == name


def test_an_unknown_target_is_named():
    with pytest.raises(ConfigError, match=r"unknown target 'nomad'; known targets: \['kubernetes', 'lab', 'ssh'\]"):
        registry.get("nomad")


def test_a_target_is_imported_only_when_asked():
    code = (
        "import sys, benchlib.cli, benchlib.measure.doctor\n"
        "from benchlib.targets import registry\n"
        "before = 'benchlib.targets.ssh' in sys.modules\n"
        "registry.get('ssh')\n"
        "print(before, 'benchlib.targets.ssh' in sys.modules, 'kubernetes' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "True", "False"]  # imported by get(); the Kubernetes client by no command's import


def test_the_mesh_names_are_one_list():
    assert shapes.MESHES is meshes.MESHES
    assert scenarios.PodScenario.model_fields["mesh"].annotation == meshes.Mesh | None
    assert set(haproxy.MESHES) == set(meshes.MESHES) - set(meshes.WAYPOINT_MESHES) == set(CLUSTER_MESHES)


def test_every_target_has_its_scenario_model():
    assert set(scenarios.SCENARIOS) == set(registry.TARGETS)


def _env(target: str, scenario: dict, **section) -> Environment:
    return Environment.model_validate(
        {"name": "e", "description": "d", "target": target, "scenarios": {"s": {"description": "d", **scenario}}}
        | section
    )


SSH = {"ssh": {"client": {"host": "a"}, "server": {"host": "b"}}}


def test_a_scenario_gets_its_targets_model():
    assert type(_env("lab", {"firewall": "conntrack"}).scenarios["s"]) is scenarios.LabScenario
    assert type(_env("ssh", {}, **SSH).scenarios["s"]) is scenarios.SshScenario


LAB_YAML = "description: d\ntarget: lab\nscenarios:\n  s: {description: d, "
SSH_YAML = (
    "description: d\ntarget: ssh\nssh: {client: {host: a}, server: {host: b}}\nscenarios:\n  s: {description: d, "
)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            LAB_YAML + "placement: pod-to-pod}",
            "scenarios ['s']: placement, helm, apply, ready and namespace_labels need",
        ),
        (SSH_YAML + "firewall: notrack}", "scenarios.s.firewall: needs target lab; remove it"),
        (SSH_YAML + "mesh: sidecars}", "scenarios.s.mesh: needs target lab or kubernetes; remove it"),
        (SSH_YAML + "ip_family: 6}", "scenarios.s: ip_family 6 and big_tcp need target lab"),
        (SSH_YAML + "bogus: 1}", "scenarios.s.bogus: Extra inputs are not permitted"),
        (LAB_YAML + "mtu: 1}", "scenarios.s.mtu: Input should be greater than or equal to 576"),
        (
            "description: d\ntarget: nomad\nscenarios:\n  s: {description: d}",
            "target: Input should be 'lab', 'kubernetes' or 'ssh'",
        ),
        (LAB_YAML.removesuffix("{description: d, ") + "5", "scenarios.s: Input should be a valid dictionary"),
    ],
)
def test_a_scenario_key_is_refused_in_one_line_naming_it(text, message, tmp_path, monkeypatch):
    project_with_environment(tmp_path, monkeypatch, "e", text + "\n")
    with pytest.raises(ConfigError) as err:
        load_environment("e")
    assert "\n" not in str(err.value) and message in str(err.value), str(err.value)
    assert str(err.value).startswith(str(tmp_path / "pipelines/e/environment.yaml: "))


def test_a_key_of_another_target_at_its_default_means_nothing():
    sc = _env("ssh", {"ip_family": 4, "apply": [], "placement": None}, **SSH).scenarios["s"]
    assert "ip_family" not in type(sc).model_fields


def test_a_definition_names_every_targets_fields_whatever_the_target():
    lab = scenario_definition(_env("lab", {}), "s")["scenario"]
    ssh = scenario_definition(_env("ssh", {}, **SSH), "s")["scenario"]
    assert lab.keys() == ssh.keys() == {"description"} | scenarios.DEFAULTS.keys()
    assert "target" not in lab and ssh["placement"] is None and lab["ready_timeout_s"] == 900.0
