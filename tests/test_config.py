"""params.yaml validation: bad input is rejected with the key and the allowed values."""

import shutil
import subprocess

import pytest
import yaml

from benchlib.base.errors import ConfigError
from benchlib.measure.plan import plan_environment, schedule, validate_all
from benchlib.settings.loading import load_environment, load_params
from tests.conftest import REPO, project_with_environment, venv_env
from tests.support.params import write


def test_default_params_are_valid_and_meet_the_statistics_floor():
    params = load_params(REPO / "params.yaml")
    plans = validate_all(params)
    assert [p.environment.name for p in plans] == ["local-lab"]
    assert plans[0].scenarios == ["host", "veth-routed", "bridge", "vxlan"]
    assert {t.kind for t in plans[0].tests.values()} == {"TCP_STREAM", "TCP_RR", "TCP_CRR"}
    assert params.experiment.repetitions >= 6


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (lambda d: d["tests"]["tcp_rr"].update(duration_s=-1), "tests.tcp_rr.duration_s"),
        (lambda d: d["tests"]["tcp_rr"].update(kind="UDP_RR"), "tests.tcp_rr.kind"),
        (lambda d: d["tests"]["tcp_rr"].update(tool="ping"), "tests.tcp_rr.tool"),
        (lambda d: d["tests"]["tcp_rr"].update(durations=3), "tests.tcp_rr.durations"),
        (lambda d: d["tests"]["tcp_rr"].update(duration_s=2.5), "whole seconds"),
        (lambda d: d["experiment"].update(repetitions=0), "experiment.repetitions"),
        (lambda d: d["experiment"].pop("campaign"), "experiment.campaign"),
        (lambda d: d["experiment"].update(campaign="has space"), "experiment.campaign"),
        (
            lambda d: d["experiment"].update(cpu_trim_s=2),
            "s leaves no CPU window after trimming experiment.cpu_trim_s=2.0",
        ),
        (lambda d: d["environments"]["local-lab"].update(tests=["tcp_rrr"]), "unknown test 'tcp_rrr'"),
    ],
)
def test_bad_params_name_the_key(tmp_path, mutate, expected):
    with pytest.raises(ConfigError) as err:
        load_params(write(tmp_path, mutate))
    assert expected in str(err.value)
    assert "params.yaml" in str(err.value)


def test_the_vpc_presets_plan_every_scenario_and_their_reference_stand_ins(tmp_path):
    pods = load_params(REPO / "pipelines/local-cilium/params-vpc.yaml")
    [plan] = validate_all(pods)
    assert pods.analysis.reference_scenarios["A"] == pods.analysis.baseline == "vpc-cni"
    assert {"vpc-cni-same-node", "cilium-vxlan-iptables", "cilium-native-ebpf"} <= set(plan.scenarios)
    services = load_params(REPO / "pipelines/local-cilium/params-vpc-services.yaml")
    [plan] = validate_all(services)
    assert services.analysis.reference_scenarios == {"kube-proxy-iptables": "vpc-cni-service"}
    assert {"vpc-cni-service-4", "vpc-cni-service-1000", "vpc-cni-service-5000"} <= set(plan.scenarios)
    # a stand-in that is no scenario, or a study name the study lacks, is named with its key
    bad = yaml.safe_load((REPO / "pipelines/local-cilium/params-vpc-services.yaml").read_text())
    bad["analysis"]["reference_scenarios"]["kube-proxy-iptables"] = "vpc-cni-svc"
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    with pytest.raises(ConfigError, match=r"analysis.reference_scenarios.kube-proxy-iptables: \['vpc-cni-svc-4'"):
        validate_all(load_params(tmp_path / "bad.yaml"))
    bad["analysis"]["reference_scenarios"] = {"F": "vpc-cni"}
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    with pytest.raises(ConfigError, match="analysis.reference_scenarios"):
        load_params(tmp_path / "bad.yaml")


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


def test_every_shipped_preset_is_valid():
    presets = sorted((REPO / "pipelines").glob("*/params*.yaml"))
    assert any(p.name == "params-datapaths.yaml" for p in presets)
    for path in presets:
        load_params(path)  # cluster presets' environments are validated by `benchlib render`


def test_matrix_runs_the_union_of_its_products(tmp_path):
    from benchlib.measure.plan import schedule

    params = load_params(REPO / "pipelines/local-lab/params-datapaths.yaml")
    plan = plan_environment(params, "local-lab")
    pairs = set(plan.configurations())
    assert ("kube-proxy-iptables-10000", "tcp_crr") in pairs and ("ebpf-host-routing", "dns_udp") in pairs
    assert ("kube-proxy-iptables-10000", "dns_udp") not in pairs
    assert len(pairs) == 12 * 2 + 2 * 7
    runs = schedule(plan, params.experiment.repetitions, params.experiment.seed)
    assert len(runs) == len(pairs) * params.experiment.repetitions
    assert {(r.scenario, r.test) for r in runs} == pairs


@pytest.mark.parametrize(
    "override, expected",
    [
        (
            {"matrix": [{"scenarios": ["host"], "tests": ["tcp_rr"]}], "tests": ["tcp_rr"]},
            "give either matrix or scenarios/tests",
        ),
        (
            {"matrix": [{"scenarios": ["host"], "tests": ["nope"]}]},
            "environments.local-lab.matrix[0].tests: unknown test 'nope'",
        ),
        ({"matrix": [{"scenarios": ["host"], "tests": []}]}, "matrix.0.tests"),
    ],
)
def test_bad_matrix_names_the_key(tmp_path, override, expected):
    with pytest.raises(ConfigError) as err:
        load_params(write(tmp_path, lambda d: d["environments"].update({"local-lab": override})))
    assert expected in str(err.value)


def test_matrix_with_an_unknown_scenario_names_its_entry(tmp_path):
    matrix = [{"scenarios": ["host"], "tests": ["tcp_rr"]}, {"scenarios": ["moon"], "tests": ["tcp_rr"]}]
    params = load_params(write(tmp_path, lambda d: d["environments"].update({"local-lab": {"matrix": matrix}})))
    with pytest.raises(ConfigError, match=r"environments.local-lab.matrix\[1\].scenarios: unknown scenario"):
        plan_environment(params, "local-lab")


def _load_env(tmp_path, monkeypatch, text: str):
    project_with_environment(tmp_path, monkeypatch, "e", text)
    return load_environment("e")


K8S = "description: d\ntarget: kubernetes\nkubernetes: {image: x}\nscenarios:\n"
SSH = "description: d\ntarget: ssh\nssh: {client: {host: a}, server: {host: b}}\nscenarios:\n"


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            K8S + "  s: {description: d, placement: pod-to-pod, services: [4, 104]}\n",
            "scenarios.s-4.services: needs placement: service",
        ),
        (
            K8S + "  s: {description: d, placement: service, services: 4, service_proxy: iptables}\n",
            "scenarios.s.service_proxy: lab only",
        ),
        (K8S + "  s: {description: d, placement: service, services: [4, 0]}\n", "counts must be from 1 to 100,000"),
        (SSH + "  s: {description: d, services: 4}\n", "scenarios.s.services: needs target lab or kubernetes"),
        (SSH + "  s: {description: d, service_proxy: iptables}\n", "scenarios.s.service_proxy: lab only"),
    ],
)
def test_service_counts_outside_the_lab_name_the_key(tmp_path, monkeypatch, text, expected):
    with pytest.raises(ConfigError) as err:
        _load_env(tmp_path, monkeypatch, text)
    assert expected in str(err.value) and "pipelines/e/environment.yaml" in str(err.value)


LAB = "description: d\ntarget: lab\nscenarios:\n  s: {description: d, topology: veth-routed}\n"


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            "cpu_placement: {TCP_RR: shared}\n" + SSH + "  s: {description: d}\n",
            "cpu_placement: lab or kubernetes only",
        ),
        ("cpu_placement: {TCP_PP: shared}\n" + LAB, "cpu_placement: unknown test kind(s) ['TCP_PP']"),
        ("cpu_placement: {TCP_RR: half}\n" + LAB, "cpu_placement.TCP_RR"),
    ],
)
def test_a_cpu_placement_the_target_cannot_honour_names_the_key(tmp_path, monkeypatch, text, expected):
    with pytest.raises(ConfigError) as err:
        _load_env(tmp_path, monkeypatch, text)
    assert expected in str(err.value) and "pipelines/e/environment.yaml" in str(err.value)


def test_a_campaign_can_replace_the_labs_cpu_placement_and_is_checked(tmp_path):
    default = plan_environment(load_params(REPO / "params.yaml"), "local-lab").environment.cpu_placement
    assert default["TCP_RR"] == "shared"
    mesh = load_params(REPO / "pipelines/local-lab/params-mesh.yaml")
    assert plan_environment(mesh, "local-lab").environment.cpu_placement == {}  # 0 hops split like the proxies
    bad = write(tmp_path, lambda d: d["environments"]["local-lab"].update(cpu_placement={"TCP_PP": "shared"}))
    with pytest.raises(ConfigError, match=r"params.yaml: environments.local-lab.cpu_placement: unknown test kind"):
        plan_environment(load_params(bad), "local-lab")


def test_service_counts_on_kubernetes_expand_into_scenarios(tmp_path, monkeypatch):
    env = _load_env(tmp_path, monkeypatch, K8S + "  s: {description: d, placement: service, services: [4, 1000]}\n")
    assert {n: sc.services for n, sc in env.scenarios.items()} == {"s-4": 4, "s-1000": 1000}


# Hostile input: every one of these was once accepted or ended in a traceback.


def test_a_key_given_twice_is_an_error_not_the_last_one_winning(tmp_path):
    path = tmp_path / "params.yaml"
    text = (REPO / "params.yaml").read_text()
    path.write_text(text + "\ntests:\n  x: {tool: netperf, kind: TCP_RR, duration_s: 1}\n")
    with pytest.raises(ConfigError, match=r"params.yaml: line \d+: duplicate key 'tests' \(first at line \d+\)$"):
        load_params(path)
    path.write_text("experiment: {campaign: a, campaign: b}\n")
    with pytest.raises(ConfigError, match="duplicate key 'campaign'"):
        load_params(path)


@pytest.mark.parametrize(
    "mutate, key",
    [
        (lambda d: d["experiment"].update(repetitions=True), "experiment.repetitions"),
        (lambda d: d["experiment"].update(seed=False), "experiment.seed"),
        (lambda d: d["tests"]["tcp_rr"].update(duration_s=True), "tests.tcp_rr.duration_s"),
        (lambda d: d["tests"]["tcp_rr"].update(message_size=True), "tests.tcp_rr.message_size"),
    ],
)
def test_a_boolean_is_not_a_number(tmp_path, mutate, key):
    with pytest.raises(ConfigError) as err:
        load_params(write(tmp_path, mutate))
    assert key in str(err.value) and "is a boolean" in str(err.value)


@pytest.mark.parametrize(
    "override, key",
    [
        ({"scenarios": ["host", "bridge", "host"]}, "scenarios: ['host'] listed more than once"),
        ({"tests": ["tcp_rr", "tcp_rr"]}, "tests: ['tcp_rr'] listed more than once"),
        ({"matrix": [{"scenarios": ["vxlan", "vxlan"], "tests": ["tcp_rr"]}]}, "matrix[0].scenarios: ['vxlan']"),
    ],
)
def test_a_scenario_or_test_listed_twice_is_an_error(tmp_path, override, key):
    with pytest.raises(ConfigError) as err:
        load_params(write(tmp_path, lambda d: d["environments"].update({"local-lab": override})))
    assert key in str(err.value)


def test_messages_name_the_file_actually_read(tmp_path):
    other = tmp_path / "campaign-b.yaml"
    other.write_text(
        yaml.safe_dump(
            {
                **yaml.safe_load((REPO / "params.yaml").read_text()),
                "environments": {"local-lab": {"scenarios": ["moon"]}},
            }
        )
    )
    params = load_params(other)
    with pytest.raises(ConfigError, match=f"^{other}: environments.local-lab.scenarios: unknown scenario"):
        plan_environment(params, "local-lab")
    other.write_text(other.read_text().replace("seed: ", "seed: x"))
    with pytest.raises(ConfigError, match=f"^{other}: invalid"):
        load_params(other)


def test_non_utf8_and_overlong_names_are_one_line_errors(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_bytes((REPO / "params.yaml").read_bytes().replace(b"campaign:", b"# caf\xe9\ncampaign:"))
    with pytest.raises(ConfigError, match=f"^{path}: not UTF-8 text"):
        load_params(path)
    with pytest.raises(
        ConfigError, match=r"experiment.campaign: 'c+'\.\.\. \(300 characters\) is not a name: 1 to 100 "
    ):
        load_params(write(tmp_path, lambda d: d["experiment"].update(campaign="c" * 300)))


# Each analysis parameter decides verdicts: a value outside its bounds is refused in one line naming it
@pytest.mark.parametrize(
    "key, value, says",
    [
        ("noise_band_pct", 1000, "1000 is not a percentage in [0, 100)"),  # a -50 % drop read 'within noise'
        ("noise_band_pct", 100, "100 is not a percentage in [0, 100)"),  # a fall to zero 'negligible'
        ("noise_band_pct", -1, "-1 is not a percentage"),
        ("noise_band_pct", float("nan"), "nan is not a percentage"),
        ("noise_band_pct", float("inf"), "inf is not a percentage"),
        ("noise_band_pct", "5", "'5' is not a percentage"),
        ("noise_band_pct", True, "True is not a percentage"),
        ("noise_band_pct", {"latency_p99": 5}, "need a 'default' for the other metrics"),
        ("noise_band_pct", {"default": 2, "thruput": 5}, "unknown metric(s) ['thruput']"),
        ("noise_band_pct", {"default": 2, "latency_p99": 150}, "latency_p99: 150 is not a percentage"),
        ("noise_band_pct", {"default": float("nan")}, "default: nan is not a percentage"),
        ("threshold_pct", 1000, "1000 is not a percentage in [0, 100)"),
        ("threshold_pct", {"default": -3}, "default: -3 is not a percentage"),
        ("alpha", 0, "greater than 0"),
        ("alpha", 0.5, "less than or equal to 0.2"),
        ("alpha", float("nan"), "finite number"),
        ("alpha", "0.05", "valid number"),
        ("correction", "bonferroni", "'holm' or 'fdr_bh'"),
        ("cpu_target_gbps", 0, "greater than 0"),
        ("cpu_target_gbps", float("inf"), "finite number"),
        ("cpu_target_gbps", 1e5, "less than or equal to 10000"),
        ("cpu_target_gbps", "100", "valid number"),
        ("rr_per_transactions", -1, "greater than 0"),
        ("rr_per_transactions", 1e12, "less than or equal to 1000000000"),
        ("crr_per_connections", float("nan"), "finite number"),
        ("http_per_requests", 0, "greater than 0"),
        ("seed", -1, "greater than or equal to 0"),  # numpy refuses it: a traceback in analyse
        ("seed", 2**32, "less than or equal to 4294967295"),
        ("seed", 1.5, "valid integer"),
        ("seed", "0", "valid integer"),
        ("family_metrics", ["latency_p50", "latency_p50"], "['latency_p50'] listed more than once"),
        ("contrasts", [["bridge", "bridge"]], "[0]: 'bridge' compared with itself"),
        ("contrasts", [["bridge", "host"], ["bridge", "host"]], "[1]: ['bridge', 'host'] listed more than once"),
        ("contrasts", [["../x", "host"]], "'../x' is not a name"),
        ("baseline", "../x", "'../x' is not a name"),
    ],
)
def test_every_analysis_parameter_has_bounds(tmp_path, key, value, says):
    path = write(tmp_path, lambda d: d["analysis"].update({key: value}))
    with pytest.raises(ConfigError) as err:
        load_params(path)
    message = str(err.value)
    assert message.startswith(f"{path}: analysis.{key}") and "\n" not in message, message
    assert says in message, message


@pytest.mark.parametrize(
    "key, value",
    [
        ("noise_band_pct", 0),
        ("noise_band_pct", 99.9),
        ("noise_band_pct", {"default": 0, "latency_p99": 5}),
        ("threshold_pct", 15),
        ("alpha", 0.2),
        ("cpu_target_gbps", 10_000),
        ("rr_per_transactions", 1e9),
        ("seed", 2**32 - 1),
    ],
)
def test_the_analysis_bounds_admit_their_edges(tmp_path, key, value):
    params = load_params(write(tmp_path, lambda d: d["analysis"].update({key: value})))
    assert getattr(params.analysis, key) == value


def test_a_noise_band_that_passes_a_collapse_is_refused_by_every_command_that_reads_it(tmp_path, monkeypatch, capsys):
    from benchlib import cli

    shutil.copytree(REPO / "pipelines", tmp_path / "pipelines")
    (tmp_path / "dvc.yaml").write_text("stages: {}\n")
    path = write(tmp_path, lambda d: d["analysis"].update(noise_band_pct=1000))
    says = f"benchlib: error: {path}: analysis.noise_band_pct: 1000 is not a percentage in [0, 100)\n"
    done = subprocess.run(["benchlib", "validate"], cwd=tmp_path, env=venv_env(), capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr == says, done.stderr
    monkeypatch.chdir(tmp_path)
    for args in (["analyse"], ["compare", "a", "b"]):  # before the tables or campaigns are read
        assert cli.main(args) == 2
        assert capsys.readouterr().err == says
    write(tmp_path, lambda d: None)
    for threshold in ("1000", "nan", "-1"):
        assert cli.main(["compare", "a", "b", "--threshold", threshold]) == 2
        assert capsys.readouterr().err == (
            f"benchlib: error: --threshold: {float(threshold)} is not a percentage in [0, 100)\n"
        )


HUGE = [10**30, 1e300, -(10**30)]  # past every cap: an int beyond 64 bits, a float near its limit, a negative


@pytest.mark.parametrize("value", HUGE, ids=["int", "float", "negative"])
@pytest.mark.parametrize(
    "section, key",
    [
        ("experiment", "seed"),
        ("experiment", "cpu_trim_s"),
        ("experiment", "repetitions"),
        ("experiment", "retries"),
        ("experiment", "profile_runs"),
        ("experiment", "profile_hz"),
        ("experiment", "foreign_cpu_max"),
        ("experiment", "steal_max"),
        ("experiment", "quiet_wait_s"),
        ("tests.tcp_rr", "duration_s"),
        ("tests.tcp_rr", "timeout_s"),
        ("tests.tcp_rr", "message_size"),
        ("tests.tcp_stream_n", "streams"),
    ],
)
def test_every_number_of_params_is_bounded(tmp_path, section, key, value):
    def mutate(d):
        where = d
        for part in section.split("."):
            where = where[part]
        where[key] = value

    with pytest.raises(ConfigError) as err:
        load_params(write(tmp_path, mutate))
    assert f"{section}.{key}" in str(err.value) and "\n" not in str(err.value), err.value


@pytest.mark.parametrize(
    "fields",
    [
        {"precision": 3, "max_minutes": 1e300},
        {"precision": 3, "max_minutes": 10**30},
        {"precision": 3, "max_repetitions": 10**30},
        {"precision": 3, "max_repetitions": 20, "look_blocks": 10**30},
    ],
)
def test_a_budget_beyond_its_cap_is_refused(tmp_path, fields):
    with pytest.raises(ConfigError) as err:
        load_params(write(tmp_path, lambda d: d["experiment"].update(repetitions=10, **fields)))
    key = next(k for k, v in fields.items() if v in HUGE)
    assert f"experiment.{key}" in str(err.value) and "\n" not in str(err.value), err.value


@pytest.mark.parametrize(
    "scenario, says",
    [
        ("{description: d, services: 1000000000}", "services: counts must be from 1 to 100,000"),
        ("{description: d, mtu: 100000000000000000000}", "scenarios.host.mtu"),
    ],
)
def test_scenario_numbers_are_bounded(tmp_path, monkeypatch, scenario, says):
    project_with_environment(
        tmp_path, monkeypatch, "lab", f"description: d\ntarget: lab\nscenarios:\n  host: {scenario}\n"
    )
    with pytest.raises(ConfigError, match=says):
        load_environment("lab")


def test_cpu_numbers_are_bounded(tmp_path, monkeypatch):
    project_with_environment(
        tmp_path,
        monkeypatch,
        "lab",
        "description: d\ntarget: lab\ncpus: {client: [0], server: [100000]}\nscenarios:\n  host: {description: d}\n",
    )
    with pytest.raises(ConfigError, match="cpus.server"):
        load_environment("lab")


def test_no_setting_is_infinite(tmp_path):
    # a timeout of .inf overflowed in subprocess during collect
    with pytest.raises(ConfigError, match=r": tests\.tcp_rr\.timeout_s: Input should be a finite number$"):
        load_params(write(tmp_path, lambda d: d["tests"]["tcp_rr"].update(timeout_s=float("inf"))))


def test_a_scenario_setting_recorded_in_meta_json_is_finite(tmp_path, monkeypatch):
    folder = project_with_environment(
        tmp_path,
        monkeypatch,
        "lab",
        "description: d\ntarget: lab\nscenarios:\n  host: {description: d, settings: {gso: .nan}}\n",
    )
    with pytest.raises(ConfigError, match=f"^{folder / 'environment.yaml'}: invalid\n  scenarios.host.settings.gso"):
        load_environment("lab")


@pytest.mark.parametrize(
    "fields, expected",
    [
        ({"precision": 0, "max_repetitions": 20}, "experiment.precision: 0 is not a percentage in (0, 100)"),
        ({"precision": 100, "max_repetitions": 20}, "experiment.precision: 100 is not a percentage in"),
        ({"precision": {"throughput": 5}, "max_repetitions": 20}, "per-metric percentages need a 'default'"),
        ({"precision": {"default": 3, "thruput": 5}, "max_repetitions": 20}, "unknown metric(s) ['thruput']"),
        ({"precision": {"default": 3, "throughput": -1}, "max_repetitions": 20}, "throughput: -1 is not a percentage"),
        ({"precision": 2}, "experiment: precision: needs a budget: set max_repetitions and/or max_minutes"),
        ({"precision": 2, "max_repetitions": 3}, "experiment.max_repetitions: 3 is below repetitions (10)"),
        ({"precision": 2, "max_minutes": 0}, "experiment.max_minutes: 0.0 is no time budget"),
        ({"precision": 2, "max_minutes": -5}, "experiment.max_minutes: -5.0 is no time budget"),
        ({"max_repetitions": 20}, "experiment: max_repetitions: only used with precision"),
        ({"precision": 2, "max_repetitions": 20, "look_blocks": 0}, "experiment.look_blocks"),
    ],
)
def test_run_until_precise_is_checked_and_names_the_key(tmp_path, fields, expected):
    with pytest.raises(ConfigError) as err:
        load_params(write(tmp_path, lambda d: d["experiment"].update(repetitions=10, **fields)))
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_run_until_precise_plans_every_block_its_budget_allows(tmp_path):
    params = load_params(
        write(tmp_path, lambda d: d["experiment"].update(repetitions=6, precision=2, max_repetitions=14, look_blocks=3))
    )
    assert params.experiment.looks() == [6, 9, 12, 14]
    per_metric = load_params(
        write(
            tmp_path,
            lambda d: d["experiment"].update(
                repetitions=6, precision={"default": 3, "throughput": 5}, max_repetitions=14
            ),
        )
    ).experiment
    assert [per_metric.precision_for(m) for m in ("throughput", "transaction_rate")] == [5.0, 3.0]
    runs = schedule(plan_environment(params, "local-lab"), params.experiment.blocks_planned(), 1)
    assert max(r.block for r in runs) == 13
    plain = load_params(write(tmp_path, lambda d: d["experiment"].update(repetitions=6)))
    # the first blocks are those of a campaign without precision: the same run order
    first = schedule(plan_environment(plain, "local-lab"), 6, 1)
    assert [r.run_id for r in runs[: len(first)]] == [r.run_id for r in first]
