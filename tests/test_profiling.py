"""Profiled runs: the setting, the schedule, the plan checks, and perf on the real lab."""

import gzip
import json

import polars as pl
import pytest

from benchlib.analysis import profiles
from benchlib.base.errors import ConfigError, TargetError
from benchlib.measure import runner
from benchlib.measure.plan import plan_environment, planned_definitions, planned_params, schedule
from benchlib.profiling import bpfstats, perf_record, stacks
from benchlib.records import layout, migrations, record
from benchlib.settings.campaign import Params
from benchlib.tables import tidy
from benchlib.targets.lab import LabTarget
from benchlib.vocabulary import schema
from tests.conftest import SHORT_TESTS, lab_target, require_root, short_params
from tests.support.campaigns import outcomes


def profiled_params(
    campaign: str, scenarios: list[str], tests: dict, repetitions: int = 1, profile_runs: int = 1, **experiment
) -> Params:
    params = short_params(campaign, scenarios, tests, repetitions=repetitions, retries=1)
    data = params.model_dump(mode="json")
    data["experiment"].update(profile_runs=profile_runs, **experiment)
    return Params.model_validate(data)


# -- the setting --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "experiment, message",
    [
        ({"repetitions": 2, "profile_runs": 3}, "experiment.profile_runs: 3 is more than repetitions (2)"),
        ({"repetitions": 2, "profile_hz": True}, "experiment.profile_hz"),
        ({"repetitions": 2, "profile_hz": 0}, "experiment.profile_hz"),
        ({"repetitions": 2, "profile_runs": -1}, "experiment.profile_runs"),
    ],
)
def test_a_wrong_profile_setting_is_one_error_naming_the_key(tmp_path, experiment, message):
    from benchlib.settings.loading import load_params

    path = tmp_path / "params.yaml"
    path.write_text(
        json.dumps(
            {
                "experiment": {"campaign": "c", "environments": ["local-lab"], **experiment},
                "tests": {"rr": SHORT_TESTS["rr"]},
            }
        )
    )
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_params(path)


def test_the_default_campaign_profiles_three_runs_per_configuration():
    from benchlib.settings.loading import load_params
    from tests.conftest import REPO

    e = load_params(REPO / "params.yaml").experiment
    # three: the fewest whose interval can call a change (profile_contrasts), in blocks 0-2
    assert (e.profile_runs, e.profile_hz) == (3, 499) and e.profile_runs <= e.repetitions


# -- the schedule -------------------------------------------------------------------------


def test_profiled_run_k_goes_into_block_k_and_measured_runs_keep_their_ids():
    tests = {"rr": SHORT_TESTS["rr"], "stream": SHORT_TESTS["stream"]}
    plain = plan_environment(short_params("s", ["host", "bridge"], tests, repetitions=3), "local-lab")
    runs = schedule(plain, 3, seed=1, profile_runs=2)
    configs = {(r.scenario, r.test) for r in runs}
    profiled = [r for r in runs if r.profiled]
    assert sorted((r.block, r.scenario, r.test) for r in profiled) == sorted(
        (k, s, t) for k in range(2) for s, t in configs
    )
    assert {r.run_id.rsplit("/", 1)[1] for r in profiled} == {"p000", "p001"}
    measured = [r for r in runs if not r.profiled]
    assert sorted(r.run_id for r in measured) == sorted(r.run_id for r in schedule(plain, 3, seed=1))
    # shuffled among their block's measured runs, by the same seed
    blocks = [r.block for r in runs]
    assert blocks == sorted(blocks) and schedule(plain, 3, seed=1, profile_runs=2) == runs
    assert [r.profiled for r in runs if r.block == 0] != sorted(r.profiled for r in runs if r.block == 0)
    assert schedule(plain, 3, seed=1, profile_runs=0) == schedule(plain, 3, seed=1)


def test_the_plan_of_a_campaign_names_its_profiled_runs():
    params = profiled_params("s", ["host"], {"rr": SHORT_TESTS["rr"]}, repetitions=2)
    assert sorted(planned_params(params)) == [
        "local-lab/host/rr/p000",
        "local-lab/host/rr/r000",
        "local-lab/host/rr/r001",
    ]
    assert set(planned_definitions(params)) == set(planned_params(params))


# -- the plan checks: values in, messages out ----------------------------------------------

OK = {
    "target": "lab",
    "target_profiles": True,
    "perf_version": "perf version 6.1.192",
    "kptr_restrict": 0,
    "perf_event_paranoid": 2,
    "root": True,
}


@pytest.mark.parametrize(
    "change, needles",
    [
        ({}, []),
        ({"kptr_restrict": 1}, []),  # root reads kernel addresses at 1
        ({"perf_version": None}, ["experiment.profile_runs", "`perf` is not on PATH", "profile_runs: 0"]),
        ({"kptr_restrict": 2}, ["kptr_restrict is 2", "sysctl -w kernel.kptr_restrict=0", "profile_runs: 0"]),
        ({"kptr_restrict": 1, "root": False, "perf_event_paranoid": -1}, ["kptr_restrict is 1"]),
        (
            {"root": False, "perf_event_paranoid": 2, "kptr_restrict": 0},
            ["perf_event_paranoid is 2", "kernel.perf_event_paranoid=-1"],
        ),
        ({"target": "ssh", "target_profiles": False}, ["experiment.profile_runs: target ssh cannot profile"]),
    ],
)
def test_plan_problems_name_the_setting_and_its_fix(change, needles):
    problems = perf_record.plan_problems(**{**OK, **change})
    assert len(problems) == (1 if needles else 0)
    for needle in needles:
        assert needle in problems[0]
    assert all("\n" not in p for p in problems)


def test_perf_leaves_its_bpf_events_out_only_where_kallsyms_names_the_programs():
    assert perf_record.bpf_event_flags(1) == ["--no-bpf-event"]
    assert perf_record.bpf_event_flags(0) == perf_record.bpf_event_flags(None) == []


def test_two_problems_are_two_lines():
    problems = perf_record.plan_problems(**{**OK, "perf_version": None, "kptr_restrict": 2})
    assert len(problems) == 2


def test_a_campaign_without_perf_on_path_stops_before_any_run(tmp_path, lab_env, monkeypatch):
    require_root()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    params = profiled_params("noperf", ["host"], {"rr": SHORT_TESTS["rr"]})
    plan = plan_environment(params, "local-lab")
    with pytest.raises(TargetError, match=r"experiment.profile_runs: `perf` is not on PATH"):
        runner.run_environment(params, plan, lab_target(lab_env, ["host"]), raw_root=tmp_path, log=lambda m: None)
    assert layout.find(tmp_path / "noperf") == []


def test_a_target_on_other_machines_cannot_profile(tmp_path, lab_env):
    class Elsewhere(LabTarget):
        can_profile = False
        kind = "ssh"

    params = profiled_params("elsewhere", ["host"], {"rr": SHORT_TESTS["rr"]})
    plan = plan_environment(params, "local-lab")
    with pytest.raises(TargetError, match="experiment.profile_runs: target ssh cannot profile"):
        runner.run_environment(
            params, plan, Elsewhere(lab_env, ["host"], log=lambda m: None), raw_root=tmp_path, log=lambda m: None
        )


# -- records ----------------------------------------------------------------------------


def test_a_version_4_record_is_a_measured_run_without_a_profile(v1_record):
    rec = record.load(v1_record)
    assert (rec.profiled, rec.profile, rec.profile_folded) == (False, None, None)
    meta = rec.meta_json()
    assert meta["schema_version"] == migrations.SCHEMA_VERSION and meta["profiled"] is False and meta["profile"] is None


# -- the real lab ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def profiled_campaign(tmp_path_factory, lab_env):
    """host and veth-routed, TCP_RR, one block: a measured and a profiled run of each."""
    require_root()
    raw = tmp_path_factory.mktemp("raw")
    rr = {**SHORT_TESTS["rr"], "duration_s": 2}
    params = profiled_params("prof", ["host", "veth-routed"], {"rr": rr})
    plan = plan_environment(params, "local-lab")
    counts = runner.run_environment(params, plan, lab_target(lab_env, plan.scenarios), raw_root=raw, log=lambda m: None)
    cdir = layout.campaign_dir("prof", raw)
    out = tmp_path_factory.mktemp("processed")
    parsed = tidy.parse_campaign(cdir, out)
    return {"counts": counts, "dir": cdir, "out": out, "parsed": parsed, "params": params}


def test_a_profiled_campaign_has_one_profiled_run_per_configuration(profiled_campaign):
    c = profiled_campaign
    assert outcomes(c["counts"]) == {
        "planned": 4,
        "already_done": 0,
        "ok": 4,
        "failed": 0,
        "disturbed": 0,
        "unwatched": 0,
    }
    found = sorted(p.relative_to(c["dir"]).as_posix() for p in layout.find(c["dir"]))
    assert found == [
        "local-lab/host/rr/p000",
        "local-lab/host/rr/r000",
        "local-lab/veth-routed/rr/p000",
        "local-lab/veth-routed/rr/r000",
    ]
    for path in layout.find(c["dir"]):
        rec = record.load(path)
        assert rec.profiled == path.name.startswith("p")
        if not rec.profiled:
            assert rec.profile is None and not (path / layout.PROFILE).exists()
            continue
        assert layout.PROFILE in (path / layout.CHECKSUMS).read_text()
        folded = stacks.read_folded(rec.profile_folded)
        assert stacks.kernel_symbols(folded) and rec.profile["kernel_symbols"] is True
        assert rec.profile["samples"] == sum(folded.values()) > 0
        assert rec.profile["frequency_hz"] == 499 and rec.profile["command"][:3] == ["perf", "record", "-a"]
        # perf saw every task's name (netserver's test process too), none is ":<pid>"
        assert not [s for s in folded if stacks.split(s)[1].startswith(":")]
        assert set(rec.profile["cpus"]) == {"client", "server"}
        # the samples of the CPU window alone: about hz x window x CPUs
        n_cpus = len({c for cs in rec.profile["cpus"].values() for c in cs})
        assert 0.8 < rec.profile["samples"] / (499 * rec.profile["window_s"] * n_cpus) < 1.1
        assert len(rec.profile_folded) < 1 << 20
        gzip.decompress(rec.profile_folded)


def test_a_campaign_without_profile_runs_has_no_profiles(short_campaign):
    for path in layout.find(short_campaign["dir"]):
        assert path.name.startswith("r") and not (path / layout.PROFILE).exists()
        assert record.load(path).profile is None


def test_parse_keeps_profiled_runs_out_of_runs_and_metrics(profiled_campaign):
    out = profiled_campaign["out"]
    runs, metrics = schema.read_runs(out / "runs.parquet"), schema.read_metrics(out / "metrics.parquet")
    assert sorted(runs["run_id"]) == ["local-lab/host/rr/r000", "local-lab/veth-routed/rr/r000"]
    assert not metrics["run_id"].str.contains("/p").any()
    prun = schema.read(out / "profile_runs.parquet", "profile_runs")
    profiles = schema.read(out / "profiles.parquet", "profiles")
    assert sorted(prun["run_id"]) == ["local-lab/host/rr/p000", "local-lab/veth-routed/rr/p000"]
    assert set(profiles["run_id"]) == set(prun["run_id"])
    assert prun["metric"].to_list() == ["transaction_rate"] * 2 and (prun["value"] > 1000).all()
    assert prun["kernel_symbols"].all() and (prun["outcome"] == "ok").all()
    assert set(profiles["category"]) <= set(stacks.CATEGORIES)
    sums = profiles.group_by("run_id").agg(pl.col("samples").sum()).join(prun, on="run_id")
    # the lab's TCP_RR shares one CPU set: every sample is the path's, side total
    assert (sums["samples"] <= sums["samples_right"]).all()
    assert set(profiles["side"]) <= {"client", "server", schema.TOTAL_SIDE}
    p = profiled_campaign["parsed"]
    assert (p.runs, p.profiled) == (2, 2)


def test_veth_routed_spends_more_in_backlog_and_veth_per_transaction(profiled_campaign):
    out = profiled_campaign["out"]
    prun = schema.read(out / "profile_runs.parquet", "profile_runs")
    profiles = schema.read(out / "profiles.parquet", "profiles")

    def per_transaction(scenario: str, frame: str) -> float:
        run = prun.filter(pl.col("scenario") == scenario).row(0, named=True)
        frames = profiles.filter(pl.col("run_id") == run["run_id"])
        inclusive = frames.filter(pl.col("stack").str.split(";").list.contains(frame))["samples"].sum()
        return inclusive / run["value"] / run["window_s"]

    for frame in ("process_backlog", "veth_xmit"):
        assert per_transaction("veth-routed", frame) > per_transaction("host", frame), frame


def test_an_empty_profile_table_has_its_schema(short_campaign, tmp_path):
    tidy.parse_campaign(short_campaign["dir"], tmp_path)
    for name in ("profile_runs", "profiles", "profile_bpf"):
        df = schema.read(tmp_path / f"{name}.parquet", name)
        assert df.is_empty() and df.schema == schema._SCHEMAS[name]


def test_a_perf_that_fails_fails_only_its_profiled_run(tmp_path, lab_env, monkeypatch):
    require_root()
    before = bpfstats.STATS.read_text()
    real = perf_record.Recorder.__init__

    def broken(self, cpus, hz, version):
        real(self, cpus, hz, version)
        self.argv = [*self.argv[:-2], "--no-such-option", *self.argv[-2:]]

    monkeypatch.setattr(perf_record.Recorder, "__init__", broken)
    params = profiled_params("broken", ["host"], {"rr": SHORT_TESTS["rr"]})
    plan = plan_environment(params, "local-lab")
    counts = runner.run_environment(params, plan, lab_target(lab_env, ["host"]), raw_root=tmp_path, log=lambda m: None)
    assert counts["ok"] == 1 and counts["failed"] == 1
    rec = record.load(tmp_path / "broken" / "local-lab/host/rr/p000")
    assert rec.outcome == "failed" and rec.failure_reason.startswith("perf: ")
    assert "record exited" in rec.failure_reason and rec.profile is None and rec.profile_folded is None
    assert bpfstats.STATS.read_text() == before  # the BPF counting the run turned on is off again


def test_the_window_keeps_the_samples_of_its_time_and_cpus_without_their_time():
    script = (
        "netperf 10/10 [000] 100.500000: cpu-clock:ppp: \n\tffff tcp_sendmsg ([kernel.kallsyms])\n\n"
        "netperf 10/10 [000] 99.000000: cpu-clock:ppp: \n\tffff tcp_recvmsg ([kernel.kallsyms])\n\n"
        "chromium 20/20 [001] 100.600000: cpu-clock:ppp: \n\tffff schedule ([kernel.kallsyms])\n\n"
    )
    events: set[str] = set()
    kept = list(perf_record._window(script.splitlines(keepends=True), 100.0, 101.0, frozenset({0}), events))
    assert stacks.fold(kept) == {"cpu0;netperf;tcp_sendmsg": 1}
    assert events == {"cpu-clock"}


def test_a_cluster_profiles_only_where_its_nodes_run_on_this_kernel():
    from pathlib import Path
    from types import SimpleNamespace

    from benchlib.targets.kubernetes import KubernetesTarget

    here = Path("/proc/sys/kernel/random/boot_id").read_text().strip()

    def target(boot_ids: dict) -> SimpleNamespace:
        nodes = {name: {"boot_id": b} for name, b in boot_ids.items()}
        return SimpleNamespace(placements={"s": SimpleNamespace(details={"nodes": nodes})})

    assert KubernetesTarget.profile_unavailable(target({"n1": here, "n2": here}), "s") is None
    assert (
        KubernetesTarget.profile_unavailable(target({"n1": here, "ip-10-0-1-2": "other"}), "s")
        == "node(s) ip-10-0-1-2 run on another machine's kernel"
    )
    assert KubernetesTarget.can_profile and LabTarget.can_profile


def test_validate_without_perf_on_path_is_one_error_and_exit_2(tmp_path):
    import subprocess

    from tests.conftest import REPO

    path = tmp_path / "params.yaml"
    path.write_text(
        json.dumps(
            {
                "experiment": {"campaign": "c", "environments": ["local-lab"], "repetitions": 2, "profile_runs": 1},
                "tests": {"rr": {**SHORT_TESTS["rr"], "duration_s": 2}},
            }
        )
    )
    env = {"PATH": str(REPO / ".venv" / "bin"), "HOME": str(tmp_path)}
    r = subprocess.run(
        [str(REPO / ".venv/bin/benchlib"), "--params", str(path), "validate"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "experiment.profile_runs: `perf` is not on PATH" in r.stderr


def test_a_profiled_ebpf_run_records_each_programs_runs_and_restores_the_setting(tmp_path, lab_env):
    """The kernel's per-program accounting of the lab's tc BPF programs, per transaction."""
    require_root()
    before = bpfstats.STATS.read_text()
    rr = {**SHORT_TESTS["rr"], "duration_s": 2}
    # what this test reads is the kernel's count, not a measured number (short_params tolerates other load)
    params = profiled_params("bpf", ["ebpf-host-routing"], {"rr": rr})
    plan = plan_environment(params, "local-lab")
    runner.run_environment(params, plan, lab_target(lab_env, plan.scenarios), raw_root=tmp_path, log=lambda m: None)
    assert bpfstats.STATS.read_text() == before
    path = tmp_path / "bpf" / "local-lab/ebpf-host-routing/rr/p000"
    rec = record.load(path)
    assert "error" not in rec.profile["bpf"], rec.profile["bpf"]
    # the programs' own frames are named in the stacks, with or without perf's BPF events
    # (perf_record.bpf_event_flags: this machine leaves them out and perf script reads /proc/kallsyms)
    stacks_text = "\n".join(stacks.read_folded(rec.profile_folded))
    assert "_from_pod" in stacks_text and "_from_wire" in stacks_text, rec.profile["command"]
    t = bpfstats.table(rec.run_id, rec.profile["bpf"])
    ours = t.filter(pl.col("name").is_in(["from_pod", "from_wire"]))
    # both hooks of both nodes ran on every transaction's packets, at a known device
    assert set(ours["name"]) == {"from_pod", "from_wire"} and (ours["run_cnt"] > 0).all()
    assert (ours["run_time_ns"] > 0).all() and ours["attach"].str.contains("tc ingress").all()
    # parsed into profile_bpf, and per transaction in the analysis
    out = tmp_path / "processed"
    tidy.parse_campaign(tmp_path / "bpf", out)
    bpf = schema.read(out / "profile_bpf.parquet", "profile_bpf")
    assert set(bpf["run_id"]) == {rec.run_id}
    per = profiles.bpf_programs(bpf, schema.read(out / "profile_runs.parquet", "profile_runs"))
    per = per.filter(pl.col("name").is_in(["from_pod", "from_wire"]))
    assert len(per) == 4 and (per["unit"] == "µs per transaction").all()
    # each transaction's request and response cross each hook once or not at all
    assert (per["runs_per_unit"] > 0.5).all() and (per["runs_per_unit"] < 2.5).all()
    assert (per["cpu_per_unit"] > 0).all() and (per["cpu_per_unit"] < 50).all()
