"""What the report says of how the campaign was measured: where and with what (the setup table), how each
test ran (the method table), what is flagged, and the commit of the code that built it. Pure builders
over the runs table, apart from `code_revision`, which asks git."""

from __future__ import annotations

import subprocess
from pathlib import Path

import polars as pl

from ..analysis import project_root
from ..analysis.stats import CONFIG, failed_runs
from ..base import escape


def _distinct(col: str) -> pl.Expr:
    """The distinct non-empty values of a column, sorted and joined: one cell per group."""
    v = pl.col(col).drop_nulls().cast(pl.String)
    return v.filter(v != "").unique().sort().str.join(", ")


def setup_table(runs: pl.DataFrame) -> pl.DataFrame:
    """Where and with what the runs were measured, per campaign and environment."""
    df = runs.with_columns(
        tool_with_version=pl.col("tool") + " " + pl.col("tool_version").fill_null(""),
        cpus=pl.format("{} client / {} server", "client_cpus", "server_cpus"),
    )
    return (
        df.group_by("campaign", "environment")
        .agg(
            kernel=_distinct("kernel"),
            tools=_distinct("tool_with_version"),
            client_nodes=_distinct("client_node"),
            server_nodes=_distinct("server_node"),
            cpus_per_side=_distinct("cpus"),
            nodes_share_kernel=_distinct("nodes_share_kernel"),
            first_run=pl.col("started_at").min(),
            last_run=pl.col("ended_at").max(),
        )
        .sort("campaign", "environment")
    )


def shared_kernel_note(runs: pl.DataFrame) -> str:
    """A Markdown sentence for the environments whose client and server nodes ran on one kernel, or ''."""
    shared = sorted(runs.filter(pl.col("nodes_share_kernel").fill_null(False))["environment"].unique())
    if not shared:
        return ""
    return (
        f"In {', '.join(escape.page(e) for e in shared)} the client and server nodes run on one kernel and share its CPUs "
        "(namespaces or local nodes of one machine): per-side CPU is that of each side's CPU set, "
        "not of a machine of its own, and an inter-node link is not a NIC."
    )


def method_table(runs: pl.DataFrame) -> pl.DataFrame:
    """How each test was run: CPU placement, scenarios, runs per configuration, blocks, outcomes, run length."""
    keys = ["campaign", "environment", "test"]
    reps = runs.group_by(*keys, "scenario").len().group_by(keys).agg(lo=pl.col("len").min(), hi=pl.col("len").max())
    return (
        runs.group_by(keys)
        .agg(
            kind=_distinct("kind"),
            streams=_distinct("streams"),
            message_size=_distinct("message_size"),
            cpu_placement=_distinct("cpu_placement"),
            scenarios=_distinct("scenario"),
            blocks=pl.col("block").n_unique(),
            runs=pl.len(),
            ok=(pl.col("outcome") == "ok").sum(),
            disturbed=(pl.col("outcome") == "disturbed").sum(),
            median_duration_s=pl.col("duration_s").median(),
            attempts_max=pl.col("attempts").max(),
        )
        .join(reps, on=keys)
        .with_columns(
            runs_per_scenario=pl.when(pl.col("lo") == pl.col("hi"))
            .then(pl.col("lo").cast(pl.String))
            .otherwise(pl.format("{}-{}", "lo", "hi")),
            failed=pl.col("runs") - pl.col("ok"),
        )
        .drop("lo", "hi")
        .sort(keys)
    )


def caveats(summary: pl.DataFrame, runs: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(flagged configurations, failed runs per configuration with reasons)."""
    flagged = summary.filter(pl.col("flags") != "").select(
        *CONFIG, "n", "cv_pct", "drift_rho", "drift_p", "excluded", "flags"
    )
    return flagged, failed_runs(runs)


def code_revision(root: Path | None = None) -> str | None:
    """The commit of the code building the report ("git 1a2b3c4", "+ uncommitted changes" when tracked
    files other than a pipeline run's own outputs differ); None outside a git checkout."""
    root = root or project_root()
    git = ["git", "-C", str(root)]
    try:
        rev = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10)
        # dvc.lock and reports/metrics.json are rewritten by every pipeline run: not a change of the code
        diff = subprocess.run(
            [*git, "diff", "--quiet", "HEAD", "--", ".", ":!dvc.lock", ":!reports/metrics.json"],
            capture_output=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if rev.returncode != 0:
        return None
    return f"git {rev.stdout.strip()}" + (" + uncommitted changes" if diff.returncode == 1 else "")
