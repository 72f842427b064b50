"""`benchlib --help` and every subcommand's help explain themselves."""

import argparse
import re
import subprocess
import time

import pytest

from benchlib import cli
from benchlib.settings.loading import load_params
from tests.conftest import REPO, unrecorded_default_params, venv_env


@pytest.mark.parametrize(
    "args, expected",
    [
        ([], "dvc repro"),
        (["validate"], "Touches nothing"),
        (["collect"], "resumes"),
        (["parse"], "checksums"),
        (["lab"], "clean"),
        (["lab", "clean"], "no longer running"),
        (["lab", "probe"], "kernel"),
    ],
)
def test_help(args, expected):
    proc = subprocess.run(["benchlib", *args, "--help"], cwd=REPO, env=venv_env(), capture_output=True, text=True)
    assert proc.returncode == 0
    assert expected in " ".join(proc.stdout.split())


@pytest.mark.parametrize("script, expected", [("reproduce.sh", "--preset FILE"), ("test.sh", "--fast")])
def test_the_readmes_scripts_explain_themselves_without_setting_anything_up(script, expected):
    proc = subprocess.run(["bash", f"scripts/{script}", "--help"], cwd=REPO, capture_output=True, text=True, timeout=10)
    assert proc.returncode == 0 and expected in proc.stdout, proc.stderr
    assert "#" not in proc.stdout.splitlines()[0] and "[setup]" not in proc.stdout + proc.stderr


def test_validate_prints_the_plan(tmp_path):
    params = unrecorded_default_params(tmp_path)
    proc = subprocess.run(
        ["benchlib", "--params", str(params), "validate"], cwd=REPO, env=venv_env(), capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    experiment = load_params(REPO / "params.yaml").experiment
    blocks, profiled = experiment.repetitions, experiment.profile_runs
    assert (
        "local-lab: 4 scenarios" in proc.stdout
        and f"16 configurations x {blocks} blocks = {16 * blocks} runs" in proc.stdout
    )
    assert f"= {16 * blocks} runs + {16 * profiled} profiled" in proc.stdout


def test_bad_params_exit_2_with_the_key(tmp_path):
    bad = tmp_path / "params.yaml"
    text = (REPO / "params.yaml").read_text()
    bad.write_text(re.sub(r"repetitions: \d+", "repetitions: -1", text, count=1))
    proc = subprocess.run(
        ["benchlib", "--params", str(bad), "validate"], cwd=REPO, env=venv_env(), capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert "experiment.repetitions" in proc.stderr


def test_a_command_outside_a_project_says_which_project_it_uses(tmp_path):
    proc = subprocess.run(
        ["benchlib", "validate"], cwd=tmp_path, env=venv_env(), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    assert f"no project (dvc.yaml) at or above {tmp_path.resolve()}: using the project at {REPO}" in proc.stderr
    inside = subprocess.run(
        ["benchlib", "validate"], cwd=REPO / "notebooks", env=venv_env(), capture_output=True, text=True, timeout=300
    )
    assert inside.returncode == 0 and "no project" not in inside.stderr, inside.stderr


def test_an_ascii_only_terminal_gets_one_line_not_a_traceback():
    env = {**venv_env(), "PYTHONIOENCODING": "ascii"}
    proc = subprocess.run(
        ["benchlib", "--params", "/nonexistent/päräms–µs.yaml", "validate"],
        cwd=REPO,
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.decode("ascii").splitlines() == ["benchlib: error: /nonexistent/p?r?ms??s.yaml: file not found"]


def test_version_names_the_package_and_the_git_revision():
    proc = subprocess.run(["benchlib", "--version"], cwd=REPO, env=venv_env(), capture_output=True, text=True)
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    assert proc.returncode == 0, proc.stderr
    assert re.fullmatch(
        rf"benchlib \d+\.\d+\.\d+ \(git {head}(-dirty: [^;)]+ changed)?(; [^)]+ from a pipeline run here)?\)\n",
        proc.stdout,
    ), proc.stdout


def test_version_tells_changed_code_from_what_a_pipeline_run_rewrote(tmp_path):
    def git(*args):
        subprocess.run(
            ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", *args],
            check=True,
            capture_output=True,
        )

    for name in ("dvc.lock", "reports/metrics.json", "benchlib/a.py", "params.yaml"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("1\n")
    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "c")
    head = subprocess.run(
        ["git", "-C", str(tmp_path), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    assert cli.version_text(tmp_path).endswith(f"(git {head})")
    (tmp_path / "dvc.lock").write_text("2\n")
    (tmp_path / "reports/metrics.json").write_text("2\n")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "new").write_text("untracked: not a change of the checkout\n")
    assert cli.version_text(tmp_path).endswith(
        f"(git {head}; dvc.lock and reports/metrics.json from a pipeline run here)"
    )
    (tmp_path / "benchlib/a.py").write_text("2\n")
    assert cli.version_text(tmp_path).endswith(
        f"(git {head}-dirty: benchlib/a.py changed; dvc.lock and reports/metrics.json from a pipeline run here)"
    )


@pytest.mark.parametrize("preset", ["pipelines/local-lab/params-mesh-envoy.yaml"])
def test_params_works_before_or_after_the_command(preset):
    runs = [
        subprocess.run(["benchlib", *argv], cwd=REPO, env=venv_env(), capture_output=True, text=True)
        for argv in (["--params", preset, "validate"], ["validate", "--params", preset])
    ]
    assert [r.returncode for r in runs] == [0, 0], [r.stderr for r in runs]
    assert runs[0].stdout == runs[1].stdout and "envoy-hbone" in runs[0].stdout
    missing = subprocess.run(
        ["benchlib", "validate", "--params", "no-such.yaml"], cwd=REPO, env=venv_env(), capture_output=True, text=True
    )
    assert missing.returncode == 2 and "no-such.yaml" in missing.stderr


@pytest.mark.slow  # analyses a whole campaign's tables
def test_summary_names_the_findings_and_the_report_or_says_what_is_missing(tmp_path):
    import sys

    sys.path.insert(0, str(REPO / "tests" / "analysis"))
    from benchlib.analysis import load_tables
    from tests.support.analysis_tables import analysed

    fixture = REPO / "tests" / "fixtures" / "tidy" / "lab-default-002"
    analysis, _ = analysed(*load_tables(fixture / "runs.parquet", fixture / "metrics.parquet"), tmp_path)
    proc = subprocess.run(
        ["benchlib", "summary", "--analysis", str(analysis), "--report", str(tmp_path / "r.html")],
        cwd=REPO,
        env=venv_env(),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("Campaign lab-default-002 in local-lab:") and "**" not in proc.stdout
    assert re.match(r"\d+ of \d+ primary comparisons are significant", lines[1])
    assert any(re.match(r"  - \S+ vs host, .*: [+-]\d", line) for line in lines[2:])
    assert lines[-1] == f"Report: {tmp_path / 'r.html'} (not rendered yet: benchlib report)"
    missing = subprocess.run(
        ["benchlib", "summary", "--analysis", str(tmp_path / "none")],
        cwd=REPO,
        env=venv_env(),
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 2 and "benchlib analyse" in missing.stderr


def small_project(tmp_path):
    """A project of its own (dvc.yaml, the repository's environments, a one-scenario params.yaml)
    whose campaign has no record: its data/raw/ is the temporary directory's."""
    (tmp_path / "dvc.yaml").write_text("stages: {}\n")
    (tmp_path / "pipelines").symlink_to(REPO / "pipelines")
    (tmp_path / "params.yaml").write_text(
        "experiment: {campaign: log-test, environments: [local-lab], repetitions: 1}\n"
        "tests: {tcp_rr: {tool: netperf, kind: TCP_RR, duration_s: 2, message_size: 1}}\n"
        "environments: {local-lab: {scenarios: [host]}}\nanalysis: {baseline: host}\n"
    )
    return tmp_path


@pytest.mark.parametrize("options", [[], ["-q"], ["--verbose"]])
def test_a_campaign_command_logs_to_the_campaign_log_and_options_go_before_or_after(tmp_path, options):
    project = small_project(tmp_path)
    runs = [
        subprocess.run(["benchlib", *argv], cwd=project, env=venv_env(), capture_output=True, text=True, timeout=300)
        for argv in ([*options, "parse"], ["parse", *options])
    ]
    for proc in runs:
        assert proc.returncode == 2, proc.stderr
        errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("benchlib: error: ")]
        assert len(errors) == 1 and "1 of 1 planned runs not recorded yet" in errors[0], proc.stderr
        # the command's own header is a file-only line: on the terminal with -v alone
        assert ("benchlib parse (benchlib " in proc.stderr) == (options[:1] in (["-v"], ["--verbose"])), proc.stderr
    log = (project / "data" / "raw" / "log-test.log").read_text()
    assert log.count(" INFO command: benchlib parse (benchlib ") == 2, log
    assert log.count(" ERROR benchlib: benchlib: error: ") == 2 and "not recorded yet" in log, log


def test_what_a_kernel_prints_on_stderr_goes_to_the_log_not_the_terminal(tmp_path, capfd, caplog):
    import logging
    import time

    from benchlib.report import render as report

    nb = tmp_path / "nb.py"
    nb.write_text("# %%\nimport os\nos.write(2, b'kernel-stderr-marker\\n')\nprint('cell output')\n")
    with caplog.at_level(logging.WARNING, logger="kernel"):
        report.execute_notebook(nb, tmp_path / "nb.ipynb")
        deadline = time.monotonic() + 10  # the reader thread logs the kernel's last lines as it exits
        while time.monotonic() < deadline and not any("kernel-stderr-marker" in r.getMessage() for r in caplog.records):
            time.sleep(0.1)
    assert any(r.name == "kernel" and r.getMessage() == "kernel-stderr-marker" for r in caplog.records), caplog.text
    assert "kernel-stderr-marker" not in capfd.readouterr().err
    assert "cell output" in (tmp_path / "nb.ipynb").read_text()  # a cell's own output stays in the notebook


def test_bash_completion_completes_commands_options_and_files():
    script = subprocess.run(
        ["benchlib", "completion", "bash"], cwd=REPO, env=venv_env(), capture_output=True, text=True, timeout=60
    )
    assert script.returncode == 0, script.stderr

    def complete(*words: str) -> list[str]:
        cmd = (
            f"source /dev/stdin; COMP_WORDS=({' '.join(repr(w) for w in words)}); "
            f'COMP_CWORD={len(words) - 1}; _shtab_benchlib; printf "%s\\n" "${{COMPREPLY[@]}}"'
        )
        proc = subprocess.run(
            ["bash", "-c", cmd], input=script.stdout, cwd=REPO, capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.split()

    assert complete("benchlib", "do") == ["doctor"]
    assert complete("benchlib", "completion", "") == ["bash", "zsh"]
    assert "--params" in complete("benchlib", "doctor", "--") and "--quiet" in complete("benchlib", "doctor", "--")
    assert complete("benchlib", "--params", "params.y") == ["params.yaml"]
    zsh = subprocess.run(["benchlib", "completion", "zsh"], cwd=REPO, env=venv_env(), capture_output=True, text=True)
    assert zsh.returncode == 0 and zsh.stdout.startswith("#compdef benchlib")


@pytest.mark.slow  # starts JupyterLab
def test_lab_sh_needs_only_uv_and_starts_jupyterlab():
    """scripts/lab.sh up to JupyterLab itself (`--version` goes to `jupyter lab`): no set-up as root, no apt."""
    proc = subprocess.run(
        ["bash", "scripts/lab.sh", "--version"], cwd=REPO, env=venv_env(), capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr
    assert re.fullmatch(r"4\.\d+\.\d+\n", proc.stdout), proc.stdout
    assert "[setup]" not in proc.stderr and "apt-get" not in proc.stderr, proc.stderr


def test_a_campaign_log_that_cannot_be_written_stops_nothing(tmp_path):
    project = small_project(tmp_path)
    (project / "data" / "raw").mkdir(parents=True)
    (project / "data" / "raw" / "log-test.log").mkdir()  # where the log file should be: a directory
    proc = subprocess.run(
        ["benchlib", "parse"], cwd=project, env=venv_env(), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert lines[0].startswith(f"benchlib: no log file: {project / 'data' / 'raw' / 'log-test.log'}: "), lines
    assert lines[1].startswith("benchlib: error: ") and "not recorded yet" in lines[1], lines


@pytest.fixture
def terminal(capsys):
    """benchlib's terminal handler writing to the captured stderr, removed after the test."""
    import logging

    from benchlib.base import logs

    def setup(verbosity):
        logs.setup(verbosity)
        return capsys

    yield setup
    root = logging.getLogger()
    for handler in [h for h in root.handlers if h.get_name() == "benchlib"]:
        root.removeHandler(handler)


@pytest.mark.parametrize("quiet", [False, True])
def test_quiet_hides_a_measured_runs_progress_line_not_a_failed_run_or_the_result(terminal, quiet):
    from dataclasses import replace

    from benchlib.base import logs
    from benchlib.measure import runner
    from benchlib.measure.plan import plan_environment, schedule
    from tests.conftest import SHORT_TESTS, short_params

    capsys = terminal(logs.QUIET if quiet else logs.NORMAL)
    plan = plan_environment(short_params("p", ["host"], SHORT_TESTS, repetitions=2), "local-lab")
    first, second = schedule(plan, 2, seed=1)[:2]
    progress = runner.Progress(total=4, done=0)
    progress.report(first, "ok", "12,345 trans/s")
    progress.report(replace(second, block=1), "failed", "netperf exited 1")
    logs.get().info("collect: local-lab: 1 ok, 1 failed", extra=logs.RESULT)
    logs.get().info("an ordinary message")
    lines = capsys.readouterr().err.splitlines()
    measured = [ln for ln in lines if ln.startswith("[1/4] block 1 host") and " ok " in ln]
    assert len(measured) == (0 if quiet else 1), lines
    assert len([ln for ln in lines if ln.startswith("[2/4] block 2 host") and "failed" in ln]) == 1, lines
    assert "collect: local-lab: 1 ok, 1 failed" in lines
    assert ("an ordinary message" in lines) == (not quiet)


def test_quiet_collect_prints_its_counts_and_the_log_keeps_the_progress(tmp_path, lab_env):
    """A real one-run campaign on the lab with -q, then another without (lab_env: the lab tier)."""
    from tests.conftest import require_root

    require_root()
    project = small_project(tmp_path)
    deadline = time.monotonic() + 1200

    def collect(*options: str, campaign: str) -> subprocess.CompletedProcess:
        params = project / f"{campaign}.yaml"
        params.write_text((project / "params.yaml").read_text().replace("log-test", campaign))
        while True:
            proc = subprocess.run(
                ["benchlib", *options, "--params", str(params), "collect", "--env", "local-lab"],
                cwd=project,
                env=venv_env(),
                capture_output=True,
                text=True,
                timeout=600,
            )
            if proc.returncode == 2 and "another measurement runs" in proc.stderr and time.monotonic() < deadline:
                time.sleep(10)  # another test measures on this machine: wait for it
                continue
            assert proc.returncode == 0, proc.stderr[-3000:]
            return proc

    counts = "collect: local-lab: 1 ok, 0 failed, 0 disturbed, 0 recorded before, 1 planned"
    quiet = collect("-q", campaign="quiet")
    assert quiet.stderr.splitlines() == [counts], quiet.stderr
    log = (project / "data" / "raw" / "quiet.log").read_text()
    assert re.search(r" INFO benchlib\.progress: \[1/1\] block 1 host +tcp_rr +ok ", log), log
    loud = collect(campaign="loud")
    assert re.search(r"^\[1/1\] block 1 host +tcp_rr +ok .* elapsed \d+:\d\d ETA 0:00$", loud.stderr, re.M), loud.stderr
    assert loud.stderr.splitlines()[-1] == counts, loud.stderr


def test_a_bare_benchlib_lists_every_command_with_its_description():
    proc = subprocess.run(["benchlib"], cwd=REPO, env=venv_env(), capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr  # a usage error: nothing was done
    listed = {line.split()[0]: " ".join(line.split()[1:]) for line in proc.stderr.splitlines() if line.startswith("  ")}
    sub = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert listed == {c.dest: " ".join(c.help.split()) for c in sub._choices_actions}
    assert "collect" in listed and "COMMAND --help" in proc.stderr


def _commands(parser, words):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield [*words, name], sub
                yield from _commands(sub, [*words, name])


def test_every_command_help_shows_examples_and_exit_codes():
    commands = list(_commands(cli.build_parser(), []))
    assert len(commands) >= 13
    for words, parser in commands:
        text = parser.format_help()
        examples = text[text.index("Examples:") :].splitlines()[1]
        assert examples.startswith("  ") and "benchlib " + " ".join(words) in examples or "dvc" in examples, words
        assert "Exit codes: 0 " in " ".join(text.split()) or "those of LAB_COMMAND" in text, words
    proc = subprocess.run(["benchlib", "verify", "--help"], cwd=REPO, env=venv_env(), capture_output=True, text=True)
    assert proc.returncode == 0 and "  dvc pull && benchlib verify\n" in proc.stdout
    assert "Exit codes: 0 all is whole; 2 with the list of problems" in " ".join(proc.stdout.split())
