"""`benchlib`: the commands dvc.yaml calls, and a few for people."""

from __future__ import annotations

import argparse
import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import shtab
import yaml

from . import collectors, config, escape, logs, machine, profiling, record, runner, store, tidy
from .errors import BenchlibError
from .plan import Plan, plan_environment, validate_all
from .targets import Target, lab

FILE = shtab.FILE  # completes --params with file names
PER_RUN_OVERHEAD_S = 0.2  # spawn, CPU sampling and record writing, measured on the lab
EXIT_ERROR = 2  # a BenchlibError: the message says what to fix
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


log = logs.get()
RESULT = logs.RESULT  # log.info(line, extra=RESULT): a command's result, on the terminal even with -q


def _interrupt(signum, frame) -> None:
    # Once only: a second signal must not cut the teardown short.
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    raise KeyboardInterrupt


def _stop_on_signals() -> None:
    """Ctrl-C, SIGTERM (dvc, shells, kill) and SIGHUP (a closed terminal or SSH session) all stop
    the collection and tear the target down. Under dvc, the death of dvc does too."""
    for sig in STOP_SIGNALS:
        if sig == signal.SIGHUP and signal.getsignal(sig) == signal.SIG_IGN:
            continue  # nohup: the user asked to outlive the terminal
        signal.signal(sig, _interrupt)  # SIGINT too where a background job inherited it ignored
    if "DVC_STAGE" in os.environ:
        machine.die_with_parent(signal.SIGTERM)


def _print(text: str, **kw) -> None:
    """A command's output on stdout: names and reasons in it come from records, so their control
    characters are written as escapes (stderr's messages get the same from benchlib.logs)."""
    print(escape.printable(text), **kw)


def _params(args) -> config.Params:
    return config.load_params(args.params)


# The commands of the pipeline's stages: their messages, and what their libraries log or warn
# (papermill, the notebooks' kernels), also go to the campaign's log file. Set up here, not in the
# commands: where messages go changes no stage's output, so logs.py is no stage's dependency.
CAMPAIGN_COMMANDS = ("collect", "parse", "analyse", "report")


def _campaign_log(args) -> None:
    params = _params(args)
    path = logs.campaign_log(config.project_root() / "data" / "raw", params.experiment.campaign)
    try:
        logs.to_file(path)
    except OSError as exc:  # a read-only data/raw (pulled records, say) must not stop parse or the report
        log.warning(f"benchlib: no log file: {path}: {exc.strerror or exc}")
        return
    command = " ".join([args.command, *(["--env", args.env] if args.command == "collect" else [])])
    logs.get("command").info(f"benchlib {command} ({version_text()}), {params.source} -> {path}")


def _target(plan: Plan, log=print) -> Target:
    """The plan's target, told which servers and client commands its tools need."""
    tools = runner.tools(plan)
    env, kw = (
        plan.environment,
        {"servers": collectors.servers(tools), "commands": collectors.client_commands(tools), "log": log},
    )
    if env.target == "lab":
        return lab.LabTarget(env, plan.scenarios, **kw)
    if env.target == "kubernetes":
        from .targets.kubernetes import KubernetesTarget

        return KubernetesTarget(env, plan.scenarios, **kw)
    if env.target == "ssh":
        from .targets.ssh import SshTarget

        return SshTarget(env, plan.scenarios, **kw)
    raise config.ConfigError(f"environment {env.name}: unknown target {env.target!r}")


def cmd_validate(args) -> int:
    params = _params(args)
    plans = validate_all(params)
    for plan in plans:
        target = _target(plan)
        runs = runner.schedule(
            plan,
            params.experiment.repetitions,
            params.experiment.seed,
            target.interleaves_scenarios,
            params.experiment.profile_runs,
        )
        seconds = sum(
            runner.expected_run_s(target, r.spec) + PER_RUN_OVERHEAD_S + (profiling.EXTRA_S if r.profiled else 0.0)
            for r in runs
        )
        if params.experiment.profile_runs and not target.perf_is_remote:  # validate contacts no host
            # the targets whose perf runs here collect as root (the lab, the local cluster): root's permissions
            profiling.check_plan(target.kind, target.profiles, root=True)
        cdir = record.campaign_dir(params.experiment.campaign)
        done = sum(record.exists(cdir, r.run_id) for r in runs)
        _print(
            f"{plan.environment.name}: {len(plan.scenarios)} scenarios {plan.scenarios}, "
            f"{len(plan.tests)} tests {list(plan.tests)}: {len(plan.configurations())} configurations "
            f"x {params.experiment.repetitions} blocks "
            f"= {sum(not r.profiled for r in runs)} runs + {sum(r.profiled for r in runs)} profiled, about {seconds / 60:.1f} min; {done} already recorded "
            f"in {cdir}"
        )
    from .analysis import planning  # scipy and statsmodels only here

    for line in planning.planned_power(params, plans, config.project_root(), args.pilot, tidy.build_tables):
        _print(line)
    _print(f"{params.source} is valid")
    return 0


def cmd_collect(args) -> int:
    params = _params(args)
    plan = plan_environment(params, args.env)
    _stop_on_signals()
    with machine.exclusive(f"benchlib collect --env {args.env}, campaign {params.experiment.campaign}"):
        counts = runner.run_environment(params, plan, _target(plan, log.info), log=log.info)
    log.info(
        f"collect: {args.env}: {counts['ok']} ok, {counts['failed']} failed, "
        f"{counts['already_done']} recorded before, {counts['planned']} planned",
        extra=RESULT,
    )
    return 0


def cmd_verify(args) -> int:
    campaign = args.campaign or _params(args).experiment.campaign
    config.require_name(campaign, "campaign")
    checked = store.verify_campaign(config.project_root(), campaign)
    for note in checked.notes:
        log.info(f"verify: {note}", extra=RESULT)
    if checked.problems:
        raise BenchlibError(
            f"campaign {campaign}: {len(checked.problems)} problem(s) after {checked.records} record(s) were "
            "checked:\n  " + "\n  ".join(checked.problems)
        )
    how = "as DVC committed them and as their SHA256SUMS say" if checked.against_dvc else "by their SHA256SUMS"
    _print(f"verify: {checked.records} records of {campaign} are whole, {how}")
    return 0


def cmd_parse(args) -> int:
    params = _params(args)
    cdir = record.campaign_dir(params.experiment.campaign)
    planned = runner.planned_params(params)
    records, problems = record.survey(cdir, planned, runner.planned_definitions(params))
    if problems and not args.skip_corrupt:
        raise record.RecordError(
            f"{cdir}: {len(problems)} record(s) do not match the plan of "
            f"{params.source} (--skip-corrupt lists and skips them):\n  " + "\n  ".join(problems)
        )
    if problems:
        log.warning(
            f"parse: skipped {len(problems)} record(s) that do not match the plan (--skip-corrupt):\n  "
            + "\n  ".join(problems)
        )
    missing = [rid for rid in planned if not record.exists(cdir, rid)]
    if missing:
        envs = sorted({rid.split("/")[0] for rid in missing})
        what = (
            f"{cdir}: {len(missing)} of {len(planned)} planned runs not recorded yet (the first: {missing[0]}): "
            f"run {' and '.join(f'`benchlib collect --env {e}`' for e in envs)}"
        )
        if not args.skip_corrupt:
            raise record.RecordError(f"{what} (--skip-corrupt parses the {len(planned) - len(missing)} recorded)")
        log.warning(f"parse: {what}; parsing the {len(records)} recorded that match the plan (--skip-corrupt)")
    out = Path(args.out) if args.out else config.project_root() / "data" / "processed"
    parsed = tidy.parse_campaign(
        cdir, out, skip_corrupt=args.skip_corrupt, log=log.warning, records=records, plan=runner.plan_digest(params)
    )
    _print(
        f"parse: {parsed.runs} runs ({parsed.failed} failed), {parsed.metric_rows} metric rows, "
        f"{parsed.profiled} profiled runs ({parsed.profile_rows} stack rows) -> {out}"
    )
    return 0


def cmd_analyse(args) -> int:
    import polars as pl

    from . import analysis
    from .analysis import analyse, profiles

    params = _params(args)
    validate_all(params)  # the baseline and contrasts name scenarios of the campaign's environments
    paths = {name: analysis.resolve(p) for name, p in analyse.PROCESSED.items()}
    runs_path = analyse.PROCESSED["runs"]
    # a missing or broken table is named here
    runs, metrics = analysis.load_tables(runs_path, analyse.PROCESSED["metrics"])
    # written by parse when the campaign has profiled runs; absent files are empty tables
    profile_stacks, profile_runs = profiles.read_tables(paths["profiles"], paths["profile_runs"])
    parse = analyse.check_inputs(
        paths, runs, metrics, profile_runs, params.experiment.campaign, runner.plan_digest(params), params.source
    )
    measured = sorted(runs["scenario"].unique())
    baseline = params.analysis.baseline
    if baseline not in measured:
        raise config.ConfigError(
            f"{params.source}: analysis.baseline: {baseline!r} has no run in {runs_path} "
            f"(campaign {params.experiment.campaign}); scenarios there: {', '.join(measured) or 'none'}"
        )
    out = Path(args.out) if args.out else Path(analyse.ANALYSIS_DIR)
    log.info(f"analyse: {len(runs)} runs, {len(metrics)} metric rows with the analysis section of {params.source}")
    result = analyse.run(runs, metrics, params.analysis, profile_stacks=profile_stacks, profile_runs=profile_runs)
    # metrics.json is no DVC-cached output (dvc.yaml: cache: false, persist: true): DVC cannot restore it,
    # so it is written with the tables as one set, which a failure leaves as it was
    metrics_json = args.metrics_json or "reports/metrics.json"
    analyse.write(
        result,
        out,
        runs_path,
        analyse.PROCESSED["metrics"],
        profile_paths=(analyse.PROCESSED["profile_runs"], analyse.PROCESSED["profiles"]),
        metrics_json=metrics_json,
        parse=parse,
    )
    significant = int((result.comparisons["p_adj"] < params.analysis.alpha).sum())
    base = runs.filter(pl.col("scenario") == baseline)
    failed_baseline = (
        f"; the baseline {baseline} has no successful run ({len(base)} failed), so nothing was compared with it"
        if not (base["outcome"] == "ok").any()
        else ""
    )
    _print(
        f"analyse: {len(result.comparisons)} comparisons ({significant} significant at alpha = "
        f"{params.analysis.alpha:g}){failed_baseline} -> {out}, {analysis.resolve(metrics_json)}"
    )
    return 0


def cmd_report(args) -> int:
    from .analysis import analyse
    from .report import render as report  # heavy imports (papermill, nbconvert) only when reporting

    params = _params(args)
    root = config.project_root()
    out_dir = Path(args.out_dir) if args.out_dir else root / "reports"
    analyse.load(args.analysis)  # a missing or partial analysis is named here, not in a notebook's traceback
    notebooks = [root / "notebooks" / name for name in report.NOTEBOOKS]
    log.info(f"report: executing {len(notebooks)} notebooks into {out_dir}")
    html = report.build_report(
        notebooks, out_dir, {"analysis_dir": str(args.analysis), "out_dir": str(out_dir)}, title=params.report.title
    )
    _print(f"report: {html}")
    return 0


EXIT_REGRESSION = 1  # compare: a significant regression beyond the threshold


def _from_revision(rev: str, name: str) -> Path:
    """A raw root holding campaign ``name`` as git revision ``rev`` of the project had it, fetched
    through DVC (its cache or remote) into a temporary directory that lives as long as this process."""
    import atexit
    import shutil
    import tempfile

    from dvc.api import DVCFileSystem
    from dvc.exceptions import DvcException
    from dvc_data.index import DataIndexError
    from scmrepo.exceptions import SCMError

    from .analysis.compare import CompareError

    tmp = Path(tempfile.mkdtemp(prefix="benchlib-compare-"))
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    try:
        fs = DVCFileSystem(str(config.project_root()), rev=rev)
        src = f"data/raw/{name}"
        if not fs.isdir(src):
            raise CompareError(f"campaign {rev}:{name}: revision {rev} has no {src}")
        try:
            fs.get(src, str(tmp / name), recursive=True)
        except (DataIndexError, FileNotFoundError):  # a .dir manifest or a file in neither cache nor remote
            raise CompareError(f"campaign {rev}:{name}: {src} of revision {rev} {_not_fetched()}") from None
        tracked = [os.path.relpath(out.fs_path, fs.repo.root_dir) for out in fs.repo.index.outs]
    except (DvcException, SCMError, DataIndexError) as exc:
        raise CompareError(f"campaign {rev}:{name}: {type(exc).__name__}: {' '.join(str(exc).split())}") from None
    if not any(p == src or p.startswith(src + "/") or src.startswith(p + "/") for p in tracked):
        # git has the directory (DVC's .gitignore in it), but that revision's dvc.lock tracks another campaign
        raise CompareError(
            f"campaign {rev}:{name}: revision {rev} has {src} but DVC tracks no records there (its dvc.lock "
            f"and .dvc files track {', '.join(p for p in tracked if p.startswith('data/raw/')) or 'no raw records'}): "
            "give the revision that measured it (`git log -- dvc.lock`)"
        )
    return tmp


def _not_fetched() -> str:
    """Where the records of a revision were looked for, and how to fetch them (one line): the remotes
    of the project's DVC config, as `dvc pull` would use them."""
    from dvc.repo import Repo

    try:
        with Repo(str(config.project_root())) as repo:
            names, default = sorted(repo.config.get("remote", {})), repo.config.get("core", {}).get("remote")
    except Exception:  # only the hint depends on it: a config DVC cannot read names no remote
        names, default = [], None
    if not names:
        return (
            "is not in the DVC cache and no DVC remote is configured: add the remote it was pushed to "
            "(`dvc remote add -d NAME URL`), then `dvc fetch --all-commits` (or `dvc pull` on that revision)"
        )
    if default:
        return (
            f"is in neither the DVC cache nor the default remote {default!r}: `dvc push` it where it was "
            "measured, or fetch it from the remote that has it (`dvc fetch -r NAME --all-commits`)"
        )
    return (
        f"is not in the DVC cache and no default remote is set (remotes: {', '.join(names)}): "
        "`dvc fetch -r NAME --all-commits` (or `dvc pull -r NAME` on that revision)"
    )


def load_campaign(spec: str):
    """Campaign ``spec`` (an id under data/raw/, or rev:id through DVC) as compare's tidy tables."""
    import polars as pl

    from .analysis.compare import Campaign, CompareError

    rev, _, name = spec.rpartition(":")
    config.require_name(name, f"campaign {spec!r}")
    raw_root = _from_revision(rev, name) if rev else config.project_root() / "data" / "raw"
    cdir = record.campaign_dir(name, raw_root)
    if not cdir.is_dir():
        known = sorted(p.name for p in raw_root.iterdir() if p.is_dir()) if raw_root.is_dir() else []
        raise CompareError(f"campaign {spec}: no raw records in {cdir} (campaigns there: {', '.join(known) or 'none'})")
    # No plan to check another campaign against, but what `parse` would name regardless (an
    # incomplete record, a copy, a file where a record should be) is refused, not skipped.
    problems = record.survey(cdir, None)[1]
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise CompareError(f"campaign {spec}: {problems[0]}{more}")
    try:
        runs, metrics = tidy.build_tables(cdir)
    except BenchlibError as exc:
        raise CompareError(f"campaign {spec}: {exc}") from None
    # Records say which campaign measured them: another campaign's records copied here would
    # compare a campaign with itself (a byte copy of A as B: nothing differs, nothing changed).
    foreign = runs.filter(pl.col("campaign") != name)
    if len(foreign):
        owners = ", ".join(sorted(set(foreign["campaign"])))
        more = f" and {len(foreign) - 1} more" if len(foreign) > 1 else ""
        raise CompareError(
            f"campaign {spec}: {len(foreign)} of {len(runs)} records were measured by campaign "
            f"{owners} ({record.META} 'campaign'), not {name}, e.g. {foreign['record'][0]}{more}: "
            "copied records are refused; compare the campaign that measured them"
        )
    return Campaign(spec, runs, metrics, tidy.build_facts(runs))


def cmd_compare(args) -> int:
    from .analysis import analyse, compare
    from .report import compare as output, render as report

    analysis = _params(args).analysis
    try:
        threshold = analysis.compare_threshold() if args.threshold is None else config.check_band(args.threshold)
    except ValueError as exc:
        raise config.ConfigError(f"--threshold: {exc}") from None
    a, b = load_campaign(args.a), load_campaign(args.b)
    res = compare.run(
        a,
        b,
        alpha=analysis.alpha,
        correction=args.correction or analysis.correction,
        threshold_pct=threshold,
        seed=analysis.seed,
        targets=analyse.targets(analysis),
    )
    _print(json.dumps(output.to_json(res), indent=1) if args.json else output.text(res))
    if args.junit:
        log.info(f"compare: JUnit -> {output.write_junit(res, Path(args.junit), strict_setup=args.strict_setup)}")
    if not args.no_html:
        root = config.project_root()
        out_dir = Path(args.out_dir) if args.out_dir else root / "reports"
        html = report.build_compare(res, out_dir)
        log.info(f"compare: report -> {html}")
    if args.strict_setup and len(res.differences):
        # not exit 1: that says "regression"; the campaigns' setups differ, which --strict-setup refuses
        fields = ", ".join(dict.fromkeys(res.differences["field"]))
        raise compare.CompareError(
            f"{res.a} vs {res.b}: the setup differs (--strict-setup): {fields}"
            + (f"; also {len(res.regressions)} regression(s)" if len(res.regressions) else "")
        )
    return EXIT_REGRESSION if len(res.regressions) else 0


class _PlainDumper(yaml.SafeDumper):
    """Writes shared sub-objects out in full: a manifest shows no YAML anchors."""

    def ignore_aliases(self, data) -> bool:
        return True


def cmd_render(args) -> int:
    env = config.load_environment(args.env)
    tools = sorted({t.tool for t in _params(args).tests.values()}) if args.params else ["netperf"]
    servers = collectors.servers(tools)
    if env.target == "kubernetes":
        from .targets.kubernetes import render

        items = render(env, list(env.scenarios), servers)
    elif env.target == "ssh":
        from .targets.ssh import render

        items = render(env, list(env.scenarios), servers)
    else:
        raise config.ConfigError(f"environment {env.name}: target {env.target} applies no manifests")
    for title, item in items:
        print(f"# --- {title}")
        if isinstance(item, Path):
            if not item.is_file():
                raise config.ConfigError(f"environment {env.name}: {title}: {item} not found")
            text = item.read_text()
            try:
                yaml.safe_load(text)
            except yaml.YAMLError as exc:
                raise config.ConfigError(f"{item}: not valid YAML: {exc}") from None
            print(text.rstrip())
        elif isinstance(item, str):
            print(item)
        else:
            print(yaml.dump(item, Dumper=_PlainDumper, sort_keys=False).rstrip())
    return 0


def cmd_lab_clean(args) -> int:
    # a collect starting its lab would race us; a running one owns what it built
    with machine.exclusive("benchlib lab clean"):
        removed = lab.clean_leftovers()
    _print(
        f"lab: {len(removed)} leftover namespace(s) and temporary director(ies) removed"
        if removed
        else "lab: nothing left over"
    )
    return 0


def cmd_lab_probe(args) -> int:
    env = config.load_environment(args.env)
    params = _params(args)
    tools = sorted({t.tool for t in params.tests.values()})
    lab.check_machine(
        env, collectors.client_commands(tools) + [s.argv[0] for s in collectors.servers(tools)]
    )  # what every scenario needs: stops here if missing
    problems = lab.scenario_problems(env, list(env.scenarios))
    ready = [s for s in env.scenarios if s not in problems]
    _print(
        f"lab: can run {len(ready)} of {len(env.scenarios)} scenarios {ready}; CPUs client/server: "
        f"{env.cpus.client if env.cpus else lab.default_cpus()[0]} / "
        f"{env.cpus.server if env.cpus else lab.default_cpus()[1]}"
    )
    for name, reasons in problems.items():
        for reason in reasons:
            _print(f"lab: cannot run scenario {name}: needs {reason}")
    return 1 if problems else 0


def cmd_doctor(args) -> int:
    from . import doctor

    params = _params(args)
    if args.profiles:
        _print(" ".join(doctor.setup_profiles(params)))
        return 0
    failed = total = 0
    for check in doctor.run(params):
        _print(check.line(), flush=True)
        total, failed = total + 1, failed + (not check.ok)
    _print(
        f"doctor: {total - failed} of {total} checks ok for {params.source}"
        + (f"; fix the {failed} FAIL line(s) above before `benchlib collect`" if failed else "")
    )
    return EXIT_ERROR if failed else 0


def cmd_completion(args) -> int:
    print(shtab.complete(build_parser(), shell=args.shell), end="")
    return 0


def cmd_summary(args) -> int:
    from .analysis import analyse, resolve
    from .report import summary

    a = analyse.load(resolve(args.analysis))
    report = resolve(args.report)
    where = str(report) if report.exists() else f"{report} (not rendered yet: benchlib report)"
    _print(summary.terminal_text(a.runs, a.comparisons, a.settings.baseline, where, args.top))
    return 0


def _doctor_timeout() -> str:
    from .doctor import API_TIMEOUT_S

    return f"{API_TIMEOUT_S:g}"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="benchlib",
        description="Rerunnable container-network benchmarks. `dvc repro` calls these commands; "
        "you can call them yourself to validate, collect, parse or clean up.",
        epilog="A new measurement needs a new experiment.campaign in params.yaml: raw records "
        "of a campaign are never overwritten, and an interrupted campaign resumes.",
    )
    p.add_argument(
        "--params",
        help="the campaign definition (default: params.yaml of the project "
        "around the working directory); before or after the command",
    ).complete = FILE  # pyright: ignore[reportAttributeAccessIssue] (shtab reads this attribute)
    _verbosity_options(p, None)
    p.add_argument("--version", action=_VersionAction, help="print the package version and git revision, then exit")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser(
        "validate",
        help="check params.yaml and the environments; print the run plan",
        description="Validate params.yaml and every environment it names, then print "
        "how many runs each environment has, the estimated time and how many "
        "are already recorded; then the planned power: from the spread of a "
        "previous campaign of the same configurations (data/processed, the newest "
        "campaign under data/raw, or --pilot), the minimum detectable effect of each "
        "primary comparison at the planned repetitions and the runs needed for the "
        "noise band and for 5 %. Touches nothing.",
    )
    s.add_argument(
        "--pilot", metavar="DIR", help="tidy tables (runs.parquet, metrics.parquet) of a previous campaign to plan from"
    )
    s.set_defaults(func=cmd_validate)

    s = sub.add_parser(
        "collect",
        help="run (or resume) one environment's measurements",
        description="Set up the environment's scenarios, run every configuration once per "
        "block in seeded random order, and write one raw record per run under "
        "data/raw/<campaign>/<environment>/. Runs already recorded are skipped, "
        "so running it again after an interruption resumes. Everything the "
        "target created is removed at the end, on error and on Ctrl-C.",
    )
    s.add_argument("--env", required=True, help="environment name (a folder under pipelines/)")
    s.set_defaults(func=cmd_collect)

    s = sub.add_parser(
        "parse",
        help="raw records -> data/processed/{runs,metrics}.parquet",
        description="Verify every raw record of the campaign against its checksums, "
        "re-parse the tool output and write the tidy tables.",
    )
    s.add_argument("--out", help="output directory (default: data/processed)")
    s.add_argument(
        "--skip-corrupt",
        action="store_true",
        help="skip records that fail verification or do not match the plan (counted and listed), "
        "and parse a campaign whose planned runs are not all recorded yet, instead of stopping",
    )
    s.set_defaults(func=cmd_parse)

    s = sub.add_parser(
        "verify",
        help="check a campaign's raw records after `dvc pull`",
        description="Check that every raw record of a campaign is whole: each file against "
        "what DVC committed of the stage output (dvc.lock: each file's md5), then against the "
        "record's own SHA256SUMS. Each changed or missing file, each record DVC does not track "
        "and each link or special file is named by its record, also when `dvc pull` refused or "
        "could not fetch an object. A campaign (or environment) DVC never committed is checked "
        "against SHA256SUMS only, and a line says so. "
        "Exit 0 when all is whole, 2 with the list of problems.",
    )
    s.add_argument("campaign", nargs="?", help="campaign id under data/raw/ (default: experiment.campaign)")
    s.set_defaults(func=cmd_verify)

    s = sub.add_parser(
        "analyse",
        help="analyse the tidy tables: CPU normalization, summaries, comparisons",
        description="Read data/processed/{runs,metrics}.parquet and analyse them with the analysis "
        "section of params.yaml: CPU at the target work rates, per-configuration "
        "medians with CIs and flags, comparisons against the baseline and the "
        "contrasts corrected within families, minimum detectable effects, the mesh "
        "comparisons and the published references beside ours. Writes "
        "data/analysis/*.parquet (with settings.json: the settings used) and "
        "reports/metrics.json. Measures nothing; `benchlib report` presents it.",
    )
    s.add_argument("--out", help="directory of the analysis tables (default: data/analysis)")
    s.add_argument("--metrics-json", help="where the headline numbers go (default: reports/metrics.json)")
    s.set_defaults(func=cmd_analyse)

    s = sub.add_parser(
        "doctor",
        help="check what the campaign needs here before it starts",
        description="Check, one line each, what the campaign of params.yaml needs before "
        "`benchlib collect`: for each environment, the tools its tests run and their "
        "versions, the mesh proxies (HAProxy, Envoy) its scenarios use, perf and the "
        "kernel settings it needs when experiment.profile_runs > 0; for the lab, root "
        "and the kernel features of each scenario (tried in a throwaway network "
        "namespace, as collect does); for a Kubernetes environment, the kubeconfig, the "
        f"API server ({_doctor_timeout()} s per request), the RBAC the target needs "
        "(SelfSubjectAccessReview), the nodes its placements need and the image on "
        "them; for ssh, a login to each host and the tools there. Each line reads ok or "
        "FAIL with the fix. Creates nothing but throwaway namespaces.",
        epilog="Exit codes: 0 every check passed; 2 a check failed (or params.yaml is invalid).",
    )
    s.add_argument(
        "--profiles",
        action="store_true",
        help="only print the scripts/setup.sh profiles the campaign needs (lab, mesh, cluster, cilium, "
        "calico), checking nothing",
    )
    s.set_defaults(func=cmd_doctor)

    s = sub.add_parser(
        "completion",
        help="print the shell completion script (bash or zsh)",
        description="Print a completion script for benchlib's commands and options, generated "
        'from this parser by shtab. Bash: `eval "$(benchlib completion bash)"` in '
        "~/.bashrc, or save it as ~/.local/share/bash-completion/completions/benchlib. "
        "Zsh: save it as _benchlib in a directory of $fpath.",
    )
    s.add_argument("shell", choices=["bash", "zsh"])
    s.set_defaults(func=cmd_completion)

    s = sub.add_parser(
        "summary",
        help="print what the campaign found and where the report is",
        description="Print the analysed campaign in a few lines: its runs, the largest significant "
        "primary findings with their intervals, and the report's path. "
        "scripts/reproduce.sh ends with it.",
    )
    s.add_argument("--analysis", default="data/analysis", help="what `benchlib analyse` wrote (default: %(default)s)")
    s.add_argument("--report", default="reports/report.html", help="the report's path (default: %(default)s)")
    s.add_argument("--top", type=int, default=5, help="how many findings to list (default: %(default)s)")
    s.set_defaults(func=cmd_summary)

    s = sub.add_parser(
        "report",
        help="render the analysis as the HTML report (notebooks, figures)",
        description="Execute the notebooks in notebooks/ with papermill on the tables "
        "`benchlib analyse` wrote: setup, method, CPU normalization, significance "
        "against the baseline, figures (HTML/SVG/PNG), the published reference "
        "numbers and the mesh section. Writes reports/notebooks/*.ipynb, "
        "reports/figures/, reports/significance.csv and reports/report.html (code "
        "hidden, opens offline). Computes no statistic of its own.",
    )
    s.add_argument("--analysis", default="data/analysis", help="the analysis tables (default: data/analysis)")
    s.add_argument("--out-dir", help="output directory (default: reports)")
    s.set_defaults(func=cmd_report)

    s = sub.add_parser(
        "compare",
        help="compare campaign B against campaign A: what differs, what changed; a CI gate",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Compare two campaigns measured with this project (ids under data/raw/), B against A.\n\n"
        "1. Metadata first: what the raw records of A and B say differently about the configurations "
        "measured in both (kernel, tool versions, target facts, CNI/kube-proxy settings, MTU, CPU "
        "placement, test parameters), leaving out session identifiers (lab ids, namespace and pod "
        "names, addresses, timestamps). A configuration measured with different test parameters is "
        "refused (exit 2), naming it and the fields.\n"
        "2. Per configuration (environment, scenario, test and its parameters, metric, side): both "
        "medians with distribution-free 95 % CIs, the change in % with its CI, two-sided Mann-Whitney "
        "U, the p-value corrected within its family (the primary family, each test's headline metric: "
        "--correction, Holm by default; every other metric: the Benjamini-Hochberg family of its kind, "
        "labelled FDR), the change's CI at the level that correction decided at, the minimum "
        "detectable effect, and a verdict by the metric's direction: '~ within noise', 'negligible' "
        "(significant, but the CI lies inside +/- the threshold), 'inconclusive' (test and CI "
        "disagree) or '+x % [lo, hi] better/worse' (where a value is <= 0, e.g. a rate fallen to 0, "
        "the change of the medians without a CI); a configuration whose every run failed in one "
        "campaign reads 'every run failed in A/B (k of n: reasons)', and failed runs are counted "
        "per configuration; a geometric mean of the changes per test.\n"
        "3. reports/compare-A-vs-B.html (papermill runs notebooks/compare.py; opens offline).",
        epilog="Exit codes: 0 no regression; 1 at least one regression: a significant 'worse' change beyond "
        "the threshold (a collapse to 0 included), or a configuration measured in A whose every run "
        "failed in B; 2 an error, one line on stderr: an unknown, empty, unparseable or copied campaign, "
        "a REV:ID whose records are in neither the DVC cache nor a remote, changed test parameters, or "
        "with --strict-setup a setup difference (after the output is written). The threshold is "
        "--threshold, else analysis.threshold_pct of params.yaml (a number or {metric: %, default: %}), "
        "else analysis.noise_band_pct.",
    )
    s.add_argument(
        "a",
        metavar="A",
        help="the reference campaign (e.g. the one before an upgrade): an id under "
        "data/raw/, or REV:ID to take it from git revision REV through DVC "
        "(its cache or remote, as `dvc pull` would)",
    )
    s.add_argument("b", metavar="B", help="the campaign compared against it (the same forms)")
    s.add_argument(
        "--threshold",
        type=float,
        metavar="PCT",
        help="practical threshold in %% for every metric: a significant change whose CI lies inside "
        "+/- PCT reads 'negligible' and fails no gate",
    )
    s.add_argument(
        "--correction",
        choices=["holm", "fdr_bh"],
        help="correction of the headline family (default: analysis.correction; fdr_bh for large sweeps)",
    )
    s.add_argument(
        "--junit",
        metavar="FILE",
        help="write a JUnit XML file: one test case per configuration "
        "and metric, failing on a regression; the setup "
        "differences as properties of the suite",
    )
    s.add_argument(
        "--strict-setup",
        action="store_true",
        help="treat a setup difference (kernel, tool versions, MTU, CNI config, ...: what step 1 lists) "
        "as a failure: one failing JUnit case per differing field (class 'setup') and exit 2 "
        "after the output is written. Without it the differences are listed (text, JSON, and "
        "JUnit properties setup.<field> of the test suite) but fail nothing",
    )
    s.add_argument("--json", action="store_true", help="print the result as JSON instead of tables")
    s.add_argument("--no-html", action="store_true", help="skip the HTML page (faster, e.g. in CI)")
    s.add_argument("--out-dir", help="where compare-A-vs-B.html goes (default: reports)")
    s.set_defaults(func=cmd_compare)

    s = sub.add_parser(
        "render",
        help="validate a cluster environment and print what it would apply",
        description="Validate pipelines/<env>/environment.yaml and print, in order, every "
        "manifest, helm command, values file, readiness check and command the "
        "target would apply or run. Contacts nothing.",
    )
    s.add_argument("--env", required=True, help="environment name (a folder under pipelines/)")
    s.set_defaults(func=cmd_render)

    lab_p = sub.add_parser(
        "lab", help="the embedded network-namespace lab", description="Inspect or clean the embedded lab."
    )
    lab_sub = lab_p.add_subparsers(dest="lab_command", required=True, metavar="LAB_COMMAND")
    s = lab_sub.add_parser(
        "clean",
        help="remove namespaces left by a killed campaign",
        description="Remove lab namespaces (and processes in them) whose campaign is "
        "no longer running. Namespaces of a live campaign are kept.",
    )
    s.set_defaults(func=cmd_lab_clean)
    s = lab_sub.add_parser(
        "probe",
        help="check privileges, tools and kernel features",
        description="Check that the lab can run here: root, the tools (ip, netperf, "
        "netserver, nft, ...) and the kernel features its scenarios need (network "
        "namespaces, veth, bridge, vxlan, the eBPF host-routing programs, "
        "WireGuard, IPsec ESP). Lists the scenarios this machine can run and, "
        "for each one it cannot, what is missing; exits 1 if any is missing. "
        "Creates nothing but throwaway namespaces to test them.",
    )
    s.add_argument("--env", default="local-lab", help="environment to probe (default: %(default)s)")
    s.set_defaults(func=cmd_lab_probe)
    _accept_global_options(sub)
    return p


def _verbosity_options(parser: argparse.ArgumentParser, default) -> None:
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=default if default is not None else 0,
        help="also debug messages, and on the terminal what libraries log (papermill, the "
        "notebooks' kernels), which otherwise goes only to the campaign's log file",
    )
    parser.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        default=default if default is not None else False,
        help="no progress lines: only warnings, errors and results",
    )


def _accept_global_options(sub: argparse._SubParsersAction) -> None:
    """Let every command take --params, -v and -q after its name too (`benchlib validate --params F`).
    SUPPRESS: a command that is not given one keeps the value given before the command."""
    for parser in set(sub.choices.values()):
        parser.add_argument(
            "--params", default=argparse.SUPPRESS, help="the campaign definition (as before the command)"
        ).complete = FILE
        _verbosity_options(parser, argparse.SUPPRESS)
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                _accept_global_options(action)


def version_text() -> str:
    """'benchlib 0.1.0 (git 1a2b3c4)', '-dirty' when the checkout has uncommitted changes to tracked files."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        text = f"benchlib {version('benchlib')}"
    except PackageNotFoundError:
        text = "benchlib (not installed)"
    root = Path(__file__).resolve().parent.parent
    try:
        rev = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
        )
        dirty = (
            subprocess.run(
                ["git", "-C", str(root), "diff", "--quiet", "HEAD", "--"], capture_output=True, timeout=10
            ).returncode
            != 0
        )
    except (OSError, subprocess.TimeoutExpired):
        return f"{text} (no git revision: git is not available)"
    if rev.returncode != 0:
        return f"{text} (no git revision: {root} is not a git checkout)"
    return f"{text} (git {rev.stdout.strip()}{'-dirty' if dirty else ''})"


class _VersionAction(argparse.Action):
    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_text())
        parser.exit()


def _tools_on_path() -> None:
    """Put the checkout's .tools/bin (fortio, from scripts/setup.sh) first on PATH, for the
    tools this process starts on this machine; targets elsewhere have their own PATH."""
    tools = Path(__file__).resolve().parent.parent / ".tools" / "bin"
    if tools.is_dir() and str(tools) not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = f"{tools}{os.pathsep}{os.environ.get('PATH', '')}"


def _ascii_safe_output() -> None:
    """A terminal that cannot show a character (an ASCII-only locale, PYTHONIOENCODING=ascii) gets
    '?' for it: a file name or a tool's output must never turn a message into a traceback."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="replace")


def main(argv: list[str] | None = None) -> int:
    _ascii_safe_output()
    args = build_parser().parse_args(argv)
    logs.setup(
        logs.VERBOSE if getattr(args, "verbose", 0) else logs.QUIET if getattr(args, "quiet", False) else logs.NORMAL
    )
    _tools_on_path()
    root, found = config.find_project()
    if not found:
        log.warning(f"benchlib: no project (dvc.yaml) at or above {Path.cwd()}: using the project at {root}")
    try:
        if args.command in CAMPAIGN_COMMANDS:
            _campaign_log(args)
        return args.func(args)
    except BenchlibError as exc:
        log.error(f"benchlib: error: {exc}")
        return EXIT_ERROR
    except OSError as exc:  # what the user's machine can cause: full or read-only disk, permissions, names
        where = " -> ".join(str(f) for f in (exc.filename, exc.filename2) if f is not None) or "(no path)"
        log.error(f"benchlib: error: {where}: {exc.strerror or exc}")
        return EXIT_ERROR
    except subprocess.TimeoutExpired as exc:
        log.error(f"benchlib: error: `{' '.join(map(str, exc.cmd))}` did not finish within {exc.timeout:g} s")
        return EXIT_ERROR
    except KeyboardInterrupt:
        log.warning("benchlib: interrupted; completed runs are kept, run the same command to resume")
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
