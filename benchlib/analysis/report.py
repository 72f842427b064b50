"""Execute the analysis notebooks and render them into one offline HTML report.

The notebooks' jupytext .py files are the source of truth; papermill gets
them as notebook objects, so no .ipynb has to exist before execution.

    python -m benchlib.analysis.report [notebooks/01_....py ...] [--out-dir reports]
        [--parameters params.yaml]
"""
from __future__ import annotations

import argparse
from pathlib import Path

import jupytext
import nbformat
import pandas as pd
import papermill
import yaml
from jinja2 import DictLoader
from nbconvert import HTMLExporter
from plotly.offline import get_plotlyjs

from . import project_root, resolve
from .stats import CONFIG, failed_runs

NOTEBOOKS = ("01_cpu_normalization.py", "02_significance.py", "03_figures.py", "04_reference.py")

# The lab template, with plotly.js inlined once in the head and none of the
# CDN scripts (require.js, MathJax, mermaid) the report does not need.
_TEMPLATE = """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js -%}
<script type="text/javascript">window.PlotlyConfig = {MathJaxConfig: 'local'};</script>
<script type="text/javascript">{{ resources.plotly_js }}</script>
{%- endblock html_head_js -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
"""


def _distinct(values: pd.Series) -> str:
    return ", ".join(sorted({str(v) for v in values.dropna() if str(v)}))


def setup_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Where and with what the runs were measured, per campaign and environment."""
    df = runs.assign(tool_with_version=runs["tool"] + " " + runs["tool_version"].fillna(""),
                     cpus=runs["client_cpus"].astype(str) + " client / " + runs["server_cpus"].astype(str) + " server")
    return (df.groupby(["campaign", "environment"], dropna=False)
            .agg(kernel=("kernel", _distinct), tools=("tool_with_version", _distinct),
                 client_nodes=("client_node", _distinct), server_nodes=("server_node", _distinct),
                 cpus_per_side=("cpus", _distinct), nodes_share_kernel=("nodes_share_kernel", _distinct),
                 first_run=("started_at", "min"), last_run=("ended_at", "max"))
            .reset_index())


def shared_kernel_note(runs: pd.DataFrame) -> str:
    """A sentence for the environments whose client and server nodes ran on one kernel, or ''."""
    shared = sorted(runs.loc[runs["nodes_share_kernel"].fillna(False).astype(bool), "environment"].unique())
    if not shared:
        return ""
    return (f"In {', '.join(shared)} the client and server nodes run on one kernel and share its CPUs "
            "(namespaces or local nodes of one machine): per-side CPU is that of each side's CPU set, "
            "not of a machine of its own, and an inter-node link is not a NIC.")


def method_table(runs: pd.DataFrame) -> pd.DataFrame:
    """How each test was run: scenarios, runs per configuration, blocks, outcomes, run length."""
    per_config = runs.groupby(["campaign", "environment", "test", "scenario"], dropna=False).size()
    reps = per_config.groupby(["campaign", "environment", "test"], dropna=False).agg(["min", "max"])
    df = (runs.groupby(["campaign", "environment", "test"], dropna=False)
          .agg(kind=("kind", _distinct), streams=("streams", _distinct), message_size=("message_size", _distinct),
               scenarios=("scenario", _distinct), blocks=("block", "nunique"), runs=("run_id", "size"),
               ok=("outcome", lambda o: int((o == "ok").sum())), median_duration_s=("duration_s", "median"),
               attempts_max=("attempts", "max"))
          .reset_index())
    df["runs_per_scenario"] = [f"{lo}" if lo == hi else f"{lo}-{hi}" for lo, hi in reps.to_numpy()]
    df["failed"] = df["runs"] - df["ok"]
    return df


def caveats(summary: pd.DataFrame, runs: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(flagged configurations, failed runs per configuration with reasons)."""
    flagged = summary.loc[summary["flags"] != "", CONFIG + ["n", "cv_pct", "drift_rho", "drift_p", "flags"]]
    return flagged.reset_index(drop=True), failed_runs(runs)


def execute_notebook(source: str | Path, output: str | Path, parameters: dict | None = None,
                     kernel_name: str = "python3") -> Path:
    """Run a jupytext .py notebook with papermill at the project root; write the executed .ipynb."""
    output = resolve(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    papermill.execute_notebook(jupytext.read(resolve(source)), str(output), parameters=parameters or {},
                               kernel_name=kernel_name, cwd=str(project_root()), progress_bar=False)
    return output


def render_report(executed: list[str | Path], output: str | Path,
                  title: str = "CNI network benchmark report") -> Path:
    """Concatenate executed notebooks into one HTML page: code hidden, plotly.js inlined once, no CDN."""
    cells = []
    for path in executed:
        cells += nbformat.read(resolve(path), as_version=4).cells
    merged = nbformat.v4.new_notebook(cells=cells, metadata={"title": title})
    exporter = HTMLExporter(extra_loaders=[DictLoader({"benchlib_report.html.j2": _TEMPLATE})],
                            template_file="benchlib_report.html.j2",
                            exclude_input=True, exclude_input_prompt=True, exclude_output_prompt=True)
    html, _ = exporter.from_notebook_node(merged, resources={"plotly_js": get_plotlyjs()})
    output = resolve(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(html, encoding="utf-8")
    return output


def build_report(sources: list[str | Path], out_dir: str | Path = "reports",
                 parameters: dict | None = None, title: str = "CNI network benchmark report") -> Path:
    """Execute each notebook into <out_dir>/notebooks/ and render <out_dir>/report.html."""
    out = resolve(out_dir)
    executed = [execute_notebook(src, out / "notebooks" / (Path(src).stem + ".ipynb"), parameters)
                for src in sources]
    return render_report(executed, out / "report.html", title=title)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchlib.analysis.report", description=__doc__.split("\n")[0])
    parser.add_argument("notebooks", nargs="*", default=[f"notebooks/{n}" for n in NOTEBOOKS],
                        help="jupytext .py notebooks, in report order")
    parser.add_argument("--out-dir", default="reports")
    parser.add_argument("--parameters", help="YAML file of papermill parameters passed to every notebook")
    args = parser.parse_args(argv)
    parameters = yaml.safe_load(resolve(args.parameters).read_text()) if args.parameters else {}
    parameters.setdefault("out_dir", args.out_dir)
    print(build_report(args.notebooks, args.out_dir, parameters))


if __name__ == "__main__":
    main()
