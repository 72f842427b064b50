"""Run until precise on the real lab: collect adds looks of blocks until the target or the budget, and a
resumed collect takes the same decisions from the records."""

import shutil

from benchlib.commands.collect import precision_of
from benchlib.measure import plan as planning, runner
from benchlib.records import layout
from benchlib.tables import tidy
from tests.conftest import lab_target, require_root, short_params

RR = {"rr": {"tool": "netperf", "kind": "TCP_RR", "duration_s": 1, "message_size": 1}}


def test_collect_adds_looks_until_the_budget_and_resumes(lab_env, tmp_path):
    require_root()
    params = short_params("precise", ["host", "bridge"], RR, repetitions=6, retries=0)
    # a target no run can meet: every look is taken, up to the budget of 8 blocks
    exp = params.experiment.model_copy(update={"precision": 0.001, "max_repetitions": 8, "look_blocks": 2})
    params = params.model_copy(update={"experiment": exp})
    plan = planning.plan_environment(params, "local-lab")
    lines = []
    counts = runner.run_environment(
        params,
        plan,
        lab_target(lab_env, plan.scenarios),
        raw_root=tmp_path,
        log=lines.append,
        precision=precision_of(params, plan, tmp_path),
    )
    assert counts["ok"] == 2 * 8 and counts["planned"] == 2 * 8
    looks = [line for line in lines if line.startswith("collect: look")]
    assert len(looks) == 2, lines
    assert looks[0].startswith("collect: look 1 of 2 after 6 blocks: half-widths (target 0.001 %) rr bridge vs host")
    assert "budget left 2 blocks" in looks[0] and "budget left 0 blocks" in looks[1]
    assert any("budget of 8 blocks is spent" in line for line in lines)
    cdir = layout.campaign_dir("precise", tmp_path)
    runs, _ = tidy.build_tables(cdir)
    assert sorted(runs["block"].unique()) == list(range(8))
    # every recorded run is one the plan has, and all the runs expected are there
    every = planning.campaign_schedule(params)
    assert set(runs["run_id"]) <= {r.run_id for r in every}
    assert len(planning.expected_runs(params, every, cdir)) == 16

    # interrupted in the last look (one of its runs not recorded): resumed, that run is measured again
    # and the look judged again from the records, as before
    shutil.rmtree(cdir / layout.run_id("local-lab", "host", "rr", 7))
    again = []
    counts = runner.run_environment(
        params,
        plan,
        lab_target(lab_env, plan.scenarios),
        raw_root=tmp_path,
        log=again.append,
        precision=precision_of(params, plan, tmp_path),
    )
    assert counts["ok"] == 1 and counts["already_done"] == 15
    assert [line for line in again if line.startswith("collect: look")][0].startswith(looks[1][:60])
