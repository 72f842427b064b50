"""params.yaml validation: bad input is rejected with the key and the allowed values."""
import pytest
import yaml

from benchlib.config import ConfigError, load_params, plan_environment, validate_all
from tests.conftest import REPO


def write(tmp_path, mutate):
    data = yaml.safe_load((REPO / "params.yaml").read_text())
    mutate(data)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_default_params_are_valid_and_meet_the_statistics_floor():
    params = load_params(REPO / "params.yaml")
    plans = validate_all(params)
    assert [p.environment.name for p in plans] == ["local-lab"]
    assert plans[0].scenarios == ["host", "veth-routed", "bridge", "vxlan"]
    assert {t.kind for t in plans[0].tests.values()} == {"TCP_STREAM", "TCP_RR", "TCP_CRR"}
    assert params.experiment.repetitions >= 6


@pytest.mark.parametrize("mutate, expected", [
    (lambda d: d["tests"]["tcp_rr"].update(duration_s=-1), "tests.tcp_rr.duration_s"),
    (lambda d: d["tests"]["tcp_rr"].update(kind="UDP_RR"), "tests.tcp_rr.kind"),
    (lambda d: d["tests"]["tcp_rr"].update(tool="ping"), "tests.tcp_rr.tool"),
    (lambda d: d["tests"]["tcp_rr"].update(durations=3), "tests.tcp_rr.durations"),
    (lambda d: d["tests"]["tcp_rr"].update(duration_s=2.5), "whole seconds"),
    (lambda d: d["experiment"].update(repetitions=0), "experiment.repetitions"),
    (lambda d: d["experiment"].pop("campaign"), "experiment.campaign"),
    (lambda d: d["experiment"].update(campaign="has space"), "experiment.campaign"),
    (lambda d: d["experiment"].update(cpu_trim_s=2), "s leaves no CPU window after trimming experiment.cpu_trim_s=2.0"),
    (lambda d: d["environments"]["local-lab"].update(tests=["tcp_rrr"]), "unknown test 'tcp_rrr'"),
])
def test_bad_params_name_the_key(tmp_path, mutate, expected):
    with pytest.raises(ConfigError) as err:
        load_params(write(tmp_path, mutate))
    assert expected in str(err.value)
    assert "params.yaml" in str(err.value)


def test_unknown_scenario_lists_the_allowed_ones(tmp_path):
    params = load_params(write(tmp_path, lambda d: d["environments"]["local-lab"].update(scenarios=["host", "ebpf"])))
    with pytest.raises(ConfigError) as err:
        plan_environment(params, "local-lab")
    msg = str(err.value)
    assert "environments.local-lab.scenarios" in msg and "'ebpf'" in msg
    assert "bridge" in msg and "vxlan" in msg


def test_unknown_environment_names_the_known_ones(tmp_path):
    params = load_params(write(tmp_path, lambda d: d["experiment"].update(environments=["local-lab", "moon"])))
    with pytest.raises(ConfigError) as err:
        validate_all(params)
    assert "'moon'" in str(err.value) and "local-lab" in str(err.value)


def test_malformed_yaml_names_the_file(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text("experiment: [unclosed\n")
    with pytest.raises(ConfigError, match="params.yaml: not valid YAML"):
        load_params(path)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="file not found"):
        load_params(tmp_path / "nope.yaml")
