"""Names are checked where they enter: every campaign, environment, scenario and test name follows one
rule (config.NAME_RULE), in params.yaml, in environment.yaml (those a `services` list makes too), on
the command line, and in the records `parse` and `compare` read back. Each name becomes a directory
of data/raw/ and a key column of the tables."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from benchlib import cli, collectors
from benchlib.base.errors import ConfigError, RecordError
from benchlib.commands.compare import load_campaign
from benchlib.records import integrity, layout, record
from benchlib.settings.environment import Environment
from benchlib.settings.loading import load_environment, load_params
from benchlib.vocabulary.schema import NAME_RULE
from tests.conftest import REPO, RR, project_with_environment, venv_env

HOSTILE = ["Foo/bar", "../../x", "..", "-rf", ".hidden", "a..b", "café", "", "x" * 101, "tab\tx", "new\nline"]


def benchlib(project: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["benchlib", *args], cwd=project, env=venv_env(), capture_output=True, text=True, timeout=120)


def lab_yaml(scenarios: dict) -> str:
    return yaml.safe_dump({"description": "a lab", "target": "lab", "scenarios": scenarios}, allow_unicode=True)


def write_params(project: Path) -> Path:
    path = project / "params.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "experiment": {"campaign": "c", "environments": ["local-lab"], "repetitions": 1, "cpu_trim_s": 0.2},
                "tests": {"rr": RR},
                "environments": {"local-lab": {"scenarios": ["host"]}},
            }
        )
    )
    return path


@pytest.mark.parametrize("name", HOSTILE, ids=repr)
def test_a_scenario_name_that_breaks_the_rule_is_refused_in_one_line(tmp_path, monkeypatch, name):
    folder = project_with_environment(
        tmp_path,
        monkeypatch,
        "local-lab",
        lab_yaml({"host": {"description": "the nodes"}, name: {"description": "hostile", "topology": "host"}}),
    )
    with pytest.raises(ConfigError) as err:
        load_environment("local-lab")
    message = str(err.value)
    assert message.startswith(f"{folder / 'environment.yaml'}: scenarios.") and "\n" not in message, message
    assert message.endswith(f"is not a name: {NAME_RULE}"), message


def test_a_hostile_scenario_plans_no_path_outside_the_campaign(tmp_path, monkeypatch):
    folder = project_with_environment(
        tmp_path, monkeypatch, "local-lab", lab_yaml({"../../x": {"description": "climbs", "topology": "host"}})
    )
    write_params(tmp_path)
    for command in (["validate"], ["collect", "--env", "local-lab"]):
        done = benchlib(tmp_path, *command)
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert f"{folder / 'environment.yaml'}: scenarios.../../x: '../../x' is not a name" in done.stderr
    # nothing but the campaign's log: no record, no directory for one (data/raw/c/local-lab/../../x)
    assert [p.relative_to(tmp_path).as_posix() for p in sorted((tmp_path / "data").rglob("*"))] == [
        "data/raw",
        "data/raw/c.log",
    ]


def test_a_name_a_service_list_makes_is_checked_too(tmp_path, monkeypatch):
    base = "s" * 96  # a valid name; with "-1000" it is 101 characters
    sc = {"description": "services", "topology": "bridge", "service_proxy": "iptables", "services": [4, 1000]}
    project_with_environment(tmp_path, monkeypatch, "local-lab", lab_yaml({base: sc}))
    with pytest.raises(ConfigError, match=r"\(101 characters\) is not a name"):
        load_environment("local-lab")


def test_names_that_differ_only_in_case_are_refused(tmp_path, monkeypatch):
    scenarios = {"A": {"description": "upper", "topology": "host"}, "a": {"description": "lower", "topology": "host"}}
    project_with_environment(tmp_path, monkeypatch, "local-lab", lab_yaml(scenarios))
    with pytest.raises(ConfigError, match=r"scenarios: 'A' and 'a' differ only in case"):
        load_environment("local-lab")


def test_every_shipped_environment_and_its_scenarios_follow_the_rule():
    # the EKS study's scenarios are A to E: the rule admits upper case
    names = sorted(p.parent.name for p in (REPO / "pipelines").glob("*/environment.yaml"))
    assert "eks-m6i" in names
    scenarios = [s for name in names for s in load_environment(name).scenarios]
    assert "A" in scenarios and "A-svc-1000" in scenarios


def params_with(tmp_path, mutate) -> Path:
    data = yaml.safe_load((REPO / "params.yaml").read_text())
    mutate(data)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True))
    return path


@pytest.mark.parametrize(
    "mutate, says",
    [
        (lambda d: d["experiment"].update(campaign="../../x"), "experiment.campaign: '../../x' is not a name"),
        (lambda d: d["experiment"].update(campaign="new\nline"), r"experiment.campaign: 'new\nline' is not a name"),
        (lambda d: d["experiment"].update(environments=["../x"]), "experiment.environments.0: '../x' is not a name"),
        (lambda d: d["experiment"].update(environments=["local-lab"] * 2), "['local-lab'] listed more than once"),
        (lambda d: d["tests"].update({"a/b": RR}), "tests.a/b: 'a/b' is not a name"),
        (lambda d: d["tests"].update({"TCP_RR": RR}), "tests: 'TCP_RR' and 'tcp_rr' differ only in case"),
        (lambda d: d["environments"].update({"../x": {}}), "environments.../x: '../x' is not a name"),
        (
            lambda d: d["environments"].update({"lokal-lab": {}}),
            "environments.lokal-lab: not in experiment.environments",
        ),
    ],
)
def test_names_in_params_are_checked(tmp_path, mutate, says):
    path = params_with(tmp_path, mutate)
    with pytest.raises(ConfigError) as err:
        load_params(path)
    assert str(err.value).startswith(f"{path}: ") and "\n" not in str(err.value), str(err.value)
    assert says in str(err.value)


def test_names_given_on_the_command_line_are_checked_before_they_become_paths(tmp_path, monkeypatch, capsys):
    project_with_environment(tmp_path, monkeypatch, "local-lab", lab_yaml({"host": {"description": "the nodes"}}))
    write_params(tmp_path)
    for args, says in (
        (["render", "--env", "../../etc"], "environment: '../../etc' is not a name"),
        (["verify", "../../etc"], "campaign: '../../etc' is not a name"),
        (["compare", "c\n", "c"], "campaign 'c\\n': 'c\\n' is not a name"),  # re.match's $ took 'c\n'
    ):
        assert cli.main(args) == 2
        assert capsys.readouterr().err == f"benchlib: error: {says}: {NAME_RULE}\n"


REAL_RAW = REPO / "tests/fixtures/raw/local-cilium-demo-001"  # real records of a local-cilium campaign


def real_campaign(project: Path) -> Path:
    """A project holding the real records of REAL_RAW and, in params.yaml, the plan they were measured
    with; returns the campaign directory."""
    shutil.copytree(REPO / "pipelines", project / "pipelines")
    (project / "dvc.yaml").write_text("stages: {}\n")
    cdir = project / "data/raw" / REAL_RAW.name
    shutil.copytree(REAL_RAW, cdir)
    metas = [json.loads(p.read_text()) for p in sorted(cdir.glob("*/*/*/*/meta.json"))]
    tests = {
        m["test"]: {
            k: v
            for k, v in m["test_params"].items()
            if v is not None and k in collectors.MODULES[m["test_params"]["tool"]].Spec.model_fields
        }
        for m in metas
    }
    plan = {
        "experiment": {
            "campaign": REAL_RAW.name,
            "environments": ["local-cilium"],
            "repetitions": 1 + max(m["block"] for m in metas),
        },
        "tests": tests,
        "environments": {"local-cilium": {"scenarios": sorted({m["scenario"] for m in metas})}},
        "analysis": {"baseline": "bridge-iptables"},
    }
    (project / "params.yaml").write_text(yaml.safe_dump(plan))
    return cdir


def test_parse_and_compare_refuse_a_record_whose_names_a_campaign_cannot_give(tmp_path, monkeypatch):
    cdir = real_campaign(tmp_path)
    path = cdir / "local-cilium/bridge-iptables/tcp_rr/r001"
    meta = json.loads((path / layout.META).read_text())
    # environment '<campaign>/local-cilium': the record's path still ends with its run id
    meta["environment"] = f"{REAL_RAW.name}/local-cilium"
    meta["run_id"] = f"{REAL_RAW.name}/{meta['run_id']}"
    (path / layout.META).write_text(json.dumps(meta, indent=1))
    integrity.write_checksums(path)  # a record rewritten whole, checksums and all
    says = f"{path}: {layout.META}: environment: '{REAL_RAW.name}/local-cilium' is not a name: {NAME_RULE}"
    done = benchlib(tmp_path, "parse")
    assert done.returncode == 2 and done.stderr == f"benchlib: error: {says}\n", done.stderr
    assert not list(tmp_path.glob("data/processed/*"))  # no table
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RecordError) as err:  # what `benchlib compare` loads each campaign with
        load_campaign(REAL_RAW.name)
    assert str(err.value) == f"campaign {REAL_RAW.name}: {says}"


def test_a_record_whose_block_is_no_whole_number_is_refused(tmp_path):
    path = tmp_path / "r001"
    shutil.copytree(REAL_RAW / "local-cilium/bridge-iptables/tcp_rr/r001", path)
    meta = json.loads((path / layout.META).read_text())
    meta["block"] = True  # formatted as 1: its run id still ends in r001
    (path / layout.META).write_text(json.dumps(meta, indent=1))
    integrity.write_checksums(path)
    with pytest.raises(RecordError, match=f"^{path}: meta.json: block: True is not a whole number$"):
        record.load(path)


def test_a_cluster_namespace_is_a_dns_label_whatever_the_environment_name():
    from benchlib.targets.kubernetes import KubernetesTarget

    env = Environment.model_validate(
        {
            "name": "My_Cluster.v2",
            "description": "a cluster",
            "target": "kubernetes",
            "kubernetes": {"image": "bench:1"},
            "scenarios": {"pod-to-pod": {"description": "two nodes", "placement": "pod-to-pod"}},
        }
    )
    target = KubernetesTarget(env, ["pod-to-pod"], collectors.servers(["netperf"]))
    assert re.fullmatch(r"benchlib-my-cluster-v2-[0-9a-f]{8}", target.namespace), target.namespace


def test_tables_whose_names_a_campaign_cannot_give_are_refused(tmp_path):
    # what analyse, report and validate --pilot read: a test's name becomes figure files' names
    # (reports/figures/<test>_<metric>.html), a scenario's is page text
    import polars as pl

    from benchlib.analysis import load_tables
    from benchlib.base.errors import SchemaError

    for table in ("runs", "metrics"):
        df = pl.read_parquet(REPO / f"tests/fixtures/tidy/lab-default-003/{table}.parquet")
        df.with_columns(pl.col("test").replace("tcp_rr", "../../x")).write_parquet(tmp_path / f"{table}.parquet")
    with pytest.raises(SchemaError) as err:
        load_tables(tmp_path / "runs.parquet", tmp_path / "metrics.parquet")
    assert str(err.value) == f"{tmp_path / 'runs.parquet'}: test: '../../x' is not a name: {NAME_RULE}"


def test_profile_tables_whose_names_a_campaign_cannot_give_are_refused(tmp_path):
    # a profiled test's name becomes the profile figures' file names (cpu_profile_<test>_flamegraph.html)
    from benchlib.analysis import profiles
    from benchlib.base.errors import SchemaError
    from tests.support.profile_tables import profile_tables

    stacks_table, runs = profile_tables(test="../../x")
    stacks_table.write_parquet(tmp_path / "profiles.parquet")
    runs.write_parquet(tmp_path / "profile_runs.parquet")
    with pytest.raises(SchemaError) as err:
        profiles.read_tables(tmp_path / "profiles.parquet", tmp_path / "profile_runs.parquet")
    assert str(err.value) == f"{tmp_path / 'profile_runs.parquet'}: test: '../../x' is not a name: {NAME_RULE}"
