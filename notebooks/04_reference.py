# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Published reference: EKS m6i, 2026
# Source: "VPC CNI vs Cilium CNI Performance Comparison Benchmark" (2026-02-09,
# updated 2026-02-14); EKS 1.31, 3 x m6i.xlarge, Cilium 1.16.5; each value a
# median of at least 3 runs. Full provenance: `data/reference/README.md`.
# Repetitions were not published, so the changes below are plain ratios with
# no confidence interval and no significance test.

# %% tags=["parameters"]
# Paths are relative to the project root (the directory holding pyproject.toml).
metrics_path = "data/processed/metrics.parquet"
runs_path = "data/processed/runs.parquet"
out_dir = "reports/"
baseline = "host"
alpha = 0.05
correction = "holm"  # or "fdr_bh" for large sweeps (labelled FDR)
cpu_target_gbps = 100.0  # stream tests: CPU % needed for this throughput
rr_per_transactions = 10_000  # TCP_RR: CPU % per this many transactions/s
crr_per_connections = 10_000  # TCP_CRR: CPU % per this many connections/s
noise_band_pct = {"default": 2.0}  # +/- % band per metric inside which a change is negligible
family_metrics = ["throughput", "transaction_rate", "connection_rate", "latency_p50", "latency_p99",
                  "cpu_pct_at_target"]
seed = 0
reference_dir = "data/reference"

# %%
from IPython.display import display

from benchlib.analysis import figures, reference, resolve
from benchlib.schema import check_metrics, read_metrics, read_runs

figures.use_report_renderer()  # headless kernels need it; the report page carries plotly.js once
runs = read_runs(resolve(runs_path))
metrics = read_metrics(resolve(metrics_path))
check_metrics(metrics)
scenarios = reference.load_eks_scenarios(reference_dir)
scaling = reference.load_eks_service_scaling(reference_dir)

# %% [markdown]
# ## Scenario changes vs A (VPC CNI, kube-proxy iptables)

# %%
changes = reference.eks_relative_changes(scenarios)
changes.style.hide(axis="index").format({"change_pct": "{:+.1f}", "baseline_value": "{:g}", "value": "{:g}"})

# %% [markdown]
# ## Service scaling: 4 -> 104 -> 1000 ClusterIP services

# %%
growth = reference.eks_service_scaling_growth(scaling)
growth.style.hide(axis="index").format({"change_pct": "{:+.1f}", "value_from": "{:g}", "value_to": "{:g}"})

# %% [markdown]
# ## Ours next to theirs
# Only where both measure the same kind of change; absolute numbers are not
# comparable (cloud VMs with a 12.5 Gbit/s NIC vs network namespaces on one
# machine). Our side keeps its statistics (these claims are their own family
# for the correction).

# %%
both = reference.side_by_side(metrics, runs, changes, alpha=alpha, correction=correction,
                              noise_band_pct=noise_band_pct, seed=seed)
resolve(out_dir).mkdir(parents=True, exist_ok=True)
both.to_csv(resolve(out_dir) / "reference_side_by_side.csv", index=False)
display(both.style.hide(axis="index").format(precision=2, na_rep="–"))
fig = figures.reference_changes(both)
figures.write_figures({"reference_changes": fig}, resolve(out_dir) / "figures")
fig
