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
# # Significance vs the baseline

# %% tags=["parameters"]
# Defaults: the `analysis` section of params.yaml and the pipeline's paths
# (relative to the project root), so this notebook gives in JupyterLab what
# `dvc repro` gives. `benchlib report` (papermill) passes the same values.
from benchlib.analysis import default_parameters

globals().update(default_parameters())

# %%
import json

from IPython.display import Markdown, display

from benchlib.analysis import figures, load_tables, normalize, report, resolve, stats

figures.use_report_renderer()  # headless kernels need it; the report page carries plotly.js once
runs, metrics = load_tables(runs_path, metrics_path)
out = resolve(out_dir)
out.mkdir(parents=True, exist_ok=True)

# %%
values = normalize.with_cpu_at_target(metrics, runs, target_gbps=cpu_target_gbps,
                                      per_transactions=rr_per_transactions, per_connections=crr_per_connections)
family = values[values["metric"].isin(family_metrics)]
summary = stats.summarize(family, runs, alpha=alpha)
comparisons = stats.compare(family, runs, baseline=baseline, alpha=alpha, correction=correction,
                            noise_band_pct=noise_band_pct, seed=seed, contrasts=contrasts)
display(Markdown(
    f"Each scenario against **{baseline}**"
    + (f", plus the contrasts {', '.join(f'{a} vs {b}' for a, b in contrasts)}" if contrasts else "")
    + f": {len(comparisons)} comparisons over the metrics "
    f"{', '.join(f'`{m}`' for m in family_metrics)}, two-sided Mann-Whitney U, "
    f"{comparisons['correction'].iloc[0] if len(comparisons) else correction} correction at alpha = {alpha}. "
    "Verdicts: `~ within noise` (not significant after correction), `negligible` (significant, but the "
    "95 % CI of the change lies inside the noise band), otherwise the change in % with its 95 % CI and "
    "whether that is better or worse for the metric."))

# %%
# With few runs and many comparisons no result can reach significance: say so
# instead of letting "~ within noise" read as "no difference".
tested = comparisons.dropna(subset=["p"])
if len(tested):
    floor = min(stats.smallest_p(r.n, r.n_base) for r in tested.itertuples())
    floor_adj = floor * len(tested) if correction == "holm" else floor
    if floor_adj >= alpha:
        display(Markdown(
            f"**Caveat: too few runs for this family.** With these run counts the smallest possible p-value is "
            f"{floor:.2g}; after {correction} over {len(tested)} comparisons it is at least {floor_adj:.2g} "
            f">= alpha = {alpha}, so every verdict is `~ within noise` whatever the data. More runs per "
            "configuration (10 planned), fewer metrics in `family_metrics` or `correction='fdr_bh'` help."))

# %% [markdown]
# ## Headline table

# %%
table = stats.headline(summary, comparisons, baseline=baseline)
table.style.hide(axis="index").format({"delta_pct": "{:+.1f}", "p_adj": "{:.3g}"}, na_rep="")

# %% [markdown]
# ## Contrasts
# Comparisons against another reference than the baseline (`analysis.contrasts`),
# corrected in the same family as the headline table.

# %%
contrast_rows = comparisons[comparisons["baseline"] != baseline]
if contrast_rows.empty:
    display(Markdown("No contrasts configured, or their scenarios were not measured."))
else:
    display(contrast_rows[["test", "metric", "side", "unit", "scenario", "baseline", "n", "n_base", "median",
                           "median_base", "delta_pct", "p_adj", "verdict"]]
            .rename(columns={"baseline": "reference", "median_base": "median_reference"})
            .style.hide(axis="index").format({"median": "{:.4g}", "median_reference": "{:.4g}",
                                              "delta_pct": "{:+.1f}", "p_adj": "{:.3g}"}, na_rep=""))

# %%
comparisons.drop(columns=["u"]).to_csv(out / "significance.csv", index=False)
_ = (out / "metrics.json").write_text(json.dumps(
    {"baseline": baseline, "alpha": alpha, "correction": correction, "cpu_target_gbps": cpu_target_gbps,
     **stats.to_metrics_dict(summary, comparisons, baseline)}, indent=2, allow_nan=False))

# %% [markdown]
# ## Caveats
# Configurations flagged by the checks: fewer than 6 runs, CV above 5 %,
# drift (Spearman correlation of value with run order, p < alpha), failed
# runs. Failed runs are excluded from the statistics and counted here.

# %%
flagged, failed = report.caveats(summary, runs)
display(Markdown(f"{len(flagged)} flagged configuration(s), {int(failed['failed_runs'].sum()) if len(failed) else 0} "
                 "failed run(s)."))
if len(flagged):
    display(flagged.style.hide(axis="index").format(precision=3, na_rep=""))
if len(failed):
    display(failed.style.hide(axis="index").format(na_rep=""))
