"""The resolution of each latency a collector reports, and comparisons that claim more precision than it.

A latency percentile is read from the tool's histogram or printed in whole units, so each run's value
is known only to one *step*; a median over runs of such values and a bootstrap interval of the ratio
of two such medians can still look exact ("+30.8 % [+30.8, +30.8]" when every run printed 17 us
against 13 us). This module says how large that step is, per value, and marks the comparisons whose
change or interval is finer than it.

Where each step comes from (sources read at the versions the lab runs):

* netperf 2.7 (src/netlib.c, src/hist.h): every transaction time is an integer of microseconds
  (``delta_micro``: gettimeofday difference). HIST_add files it in one of 100 sub-buckets per
  decade (HIST_NUM_OF_BUCKET 100: 0.1 us wide below 10 us, 1 us below 100 us, 10 us below 1 ms,
  100 us below 10 ms, ...). HIST_get_percentile interpolates linearly inside the sub-bucket the
  percentile falls in and truncates to ``int`` microseconds (P50/P90/P99_LATENCY, printed ``%d``).
  So a percentile is resolved to max(1 us, sub-bucket width): 1 us below 100 us (the samples are
  whole microseconds), 10 us from 100 us, 100 us from 1 ms; the digits inside a wider bucket are
  interpolation, not measurement. MIN_LATENCY is one integer sample: 1 us. MEAN_LATENCY is the sum
  of the integer samples over their count, printed ``%.2f``: 0.01 us; over the ~10^5-10^6
  transactions of a run the truncation of each sample is dithered by the path's own jitter, and its
  bias (about -0.5 us) is the same in every scenario, so it cancels in a comparison.
* fortio (stats/stats.go): the histogram's buckets, in units of ``-r`` (benchlib passes
  collectors.fortio.RESOLUTION_S = 10 us; fortio's default is 1 ms), end at 1, 2, ..., 11, 12, 14,
  ..., 20, 25, ..., 50, 60, ..., 100, 120, ..., 200, 250, ..., 500, 600, ..., 1000, 2000, 3000,
  4000, 5000, 7500, 10000, ..., 100000 units; CalcPercentile interpolates linearly inside the
  bucket the percentile falls in. The step is the width of that bucket (10 us up to 110 us, then
  20, 50, 100, 200, 500 us, ... at 10 us units).
* dnsperf 2.10 (collectors/dns.py): each answered query's latency is printed in seconds with six
  decimals; benchlib takes percentiles of those values (numpy's linear interpolation). Step 1 us.

The comparison (annotate) and the per-configuration summary (annotate_summary) gain a step; a
change whose interval is narrower than one step, or that is itself at most one step, is marked
``below_resolution`` and its text and verdict say so instead of quoting exact-looking digits.

stats.summarize already gives each scenario's percentiles an order-statistic interval: the median
over runs of the per-run percentile with a distribution-free (binomial) 95 % CI. That is the interval
the design asks for: the tools keep no per-transaction timings (netperf -j keeps only its
histogram), so the run is the unit and its percentile the sample. Its bounds are run values, hence
whole steps: annotate_summary marks a CI narrower than one step (e.g. [17, 17]) as such.
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from benchlib.analysis import stats
from benchlib.analysis.verdicts import Direction, Kind, Verdict
from benchlib.collectors import fortio

NETPERF_PERCENTILES = ("latency_p50", "latency_p90", "latency_p99")
NETPERF_SAMPLE = ("latency_min",)  # one sample, an integer of microseconds
NETPERF_MEAN = ("latency_mean",)  # printed with %.2f
NETPERF_MEAN_STEP_US = 0.01
NETPERF_SAMPLE_STEP_US = 1.0
FORTIO_PERCENTILES = tuple(fortio.PERCENTILES.values())
# fortio's histogramBucketValues (stats/stats.go): the upper ends of its buckets, in units of -r
FORTIO_BUCKET_ENDS = np.array(
    [
        0,
        1,
        2,
        3,
        4,
        5,
        6,
        7,
        8,
        9,
        10,
        11,
        12,
        14,
        16,
        18,
        20,
        25,
        30,
        35,
        40,
        45,
        50,
        60,
        70,
        80,
        90,
        100,
        120,
        140,
        160,
        180,
        200,
        250,
        300,
        350,
        400,
        450,
        500,
        600,
        700,
        800,
        900,
        1000,
        2000,
        3000,
        4000,
        5000,
        7500,
        10000,
        20000,
        30000,
        40000,
        50000,
        75000,
        100000,
    ],
    dtype=float,
)
FORTIO_UNIT_US = fortio.RESOLUTION_S * 1e6
DNS_PERCENTILES = ("dns_latency_p50", "dns_latency_p99")
DNS_STEP_US = 1.0  # dnsperf prints each query's latency in seconds with 6 decimals

# The metric that resolves what a coarse one cannot, in the same test: netperf's mean latency
# (0.01 us) beside its percentiles. fortio and dnsperf have no finer latency.
FINER = {m: "latency_mean" for m in (*NETPERF_PERCENTILES, *NETPERF_SAMPLE)}

BELOW = "below resolution"
# what is below the resolution: the change itself (at most one step), or only its interval (half-width
# below one step while the change is larger)
CHANGE, INTERVAL = "change", "interval"

# columns annotate() adds to the comparisons
COLUMNS = [
    "resolution",
    "resolution_base",
    "step",
    "steps",
    "delta_low_res",
    "delta_high_res",
    "unresolved",
    "below_resolution",
    "finer_metric",
]


def netperf_percentile_step(value_us: pl.Expr) -> pl.Expr:
    """The step of a netperf histogram percentile of this value (us): max(1 us, sub-bucket width),
    the sub-bucket being a hundredth of the value's decade."""
    # + 1e-9: log10(1000) is 2.9999999999999996 in floating point
    decade = pl.lit(10.0).pow((value_us.log10() + 1e-9).floor() - 1)
    return pl.max_horizontal(pl.lit(1.0), decade.fill_nan(1.0))


def fortio_bucket_width(value_us: np.ndarray, unit_us: float = FORTIO_UNIT_US) -> np.ndarray:
    """Width (us) of the fortio histogram bucket holding each value; buckets are ]start, end] in
    units of ``unit_us`` (fortio -r). Values at or below 0 fall in fortio's first bucket (1 unit
    here); above the last end (100000 units) the bucket runs to the run's maximum: NaN."""
    scaled = np.asarray(value_us, float) / unit_us
    idx = np.searchsorted(FORTIO_BUCKET_ENDS, scaled, side="left")
    widths = np.diff(FORTIO_BUCKET_ENDS, prepend=FORTIO_BUCKET_ENDS[0] - 1)  # the first: 1 unit
    out = np.full(scaled.shape, math.nan)
    inside = idx < len(FORTIO_BUCKET_ENDS)
    out[inside] = widths[idx[inside]] * unit_us
    return out


def step_expr(metric: pl.Expr, value: pl.Expr) -> pl.Expr:
    """The resolution (in the metric's unit, us) of ``value`` of ``metric``; null for metrics
    without one (rates, CPU: continuous)."""
    fortio_width = value.map_batches(
        lambda s: pl.Series(fortio_bucket_width(s.to_numpy()), dtype=pl.Float64), return_dtype=pl.Float64
    )
    return (
        pl.when(metric.is_in(NETPERF_PERCENTILES))
        .then(netperf_percentile_step(value))
        .when(metric.is_in(NETPERF_SAMPLE))
        .then(pl.lit(NETPERF_SAMPLE_STEP_US))
        .when(metric.is_in(NETPERF_MEAN))
        .then(pl.lit(NETPERF_MEAN_STEP_US))
        .when(metric.is_in(FORTIO_PERCENTILES))
        .then(fortio_width)
        .when(metric.is_in(DNS_PERCENTILES))
        .then(pl.lit(DNS_STEP_US))
        .otherwise(pl.lit(None, dtype=pl.Float64))
    )


def with_resolution(df: pl.DataFrame, value: str = "value", name: str = "resolution") -> pl.DataFrame:
    """``df`` (a metrics-shaped table, or any with a ``metric`` column) with the resolution of each
    row's ``value`` column in column ``name`` (null where the metric has none)."""
    return df.with_columns(step_expr(pl.col("metric"), pl.col(value).cast(pl.Float64)).alias(name))


def annotate_summary(summary: pl.DataFrame) -> pl.DataFrame:
    """stats.summarize's table plus ``resolution`` (the step at the median), ``ci_steps`` (the
    CI's width in steps) and ``ci_below_resolution`` (the CI is narrower than one step: the runs
    agree to within the instrument's step, not exactly)."""
    return (
        with_resolution(summary, "median")
        .with_columns(
            ci_steps=(pl.col("ci_high") - pl.col("ci_low")) / pl.col("resolution"),
        )
        .with_columns(ci_below_resolution=(pl.col("ci_steps") < 1).fill_null(False))
    )


def steps_text(steps: float, step: float, unit: str) -> str:
    """A count of instrument steps as a verdict and the change text state it: "4 steps of 1 us"."""
    k = abs(steps)
    count = f"{k:.0f}" if k >= 10 else f"{k:.2g}"
    return f"{count} step{'' if count == '1' else 's'} of {step:g} {unit}"


def _verdict(r: dict) -> Verdict:
    """The verdict, without a precise change where the change is below the resolution."""
    v, kind, way = r["verdict"], Kind(r["verdict_kind"]), Direction(r["verdict_direction"])
    if not r["below_resolution"]:
        return Verdict(v, kind, way)
    if kind == Kind.FINDING:  # below the resolution, so a change with its interval (a finite delta)
        word = stats.SAME_MEDIAN if way == Direction.NONE else way
        steps = steps_text(r["steps"], r["step"], r["unit"])
        if r["unresolved"] == CHANGE:
            return Verdict(f"{word} by {steps} ({BELOW})", kind, way)
        return Verdict(
            f"{r['delta_pct']:+.0f} % [{r['delta_low_res']:+.0f}, {r['delta_high_res']:+.0f}] {word} "
            f"(± 1 step of {r['step']:g} {r['unit']})",
            kind,
            way,
        )
    step_pct = 100 * r["step"] / r["median_base"]
    if kind == Kind.NEGLIGIBLE and step_pct > r["noise_band_pct"]:
        # significant, and one step wider than the band: not negligible, a change of no stated size or way
        return Verdict(
            f"not resolved: 1 step of {r['step']:g} {r['unit']} = {step_pct:.1f} % "
            f"> noise band {r['noise_band_pct']:g} %",
            Kind.FINDING,
            Direction.NONE,
        )
    return Verdict(v, kind, way)


def annotate(comparisons: pl.DataFrame) -> pl.DataFrame:
    """The comparisons (stats.compare's rows) with the instrument's resolution.

    Added columns:
      resolution, resolution_base: the step (metric unit) at median and at median_base (null: the
        metric is continuous, e.g. a rate or CPU);
      step: the coarser of the two; steps: (median - median_base) / step;
      delta_low_res, delta_high_res: the change's interval widened by one step each way
        (100 * step / median_base): each median is only known to one step, whatever n is;
      unresolved: "change" where the change is at most one step (its size is not resolved: each
        median is known to one step), "interval" where the change is larger but its interval's
        half-width is below one step (the interval claims a precision the instrument does not
        have), else null;
      below_resolution: unresolved is not null;
      finer_metric: a metric of the same test that resolves finer (netperf percentiles:
        latency_mean), else null;
    ``verdict`` is rewritten where it quoted a precise change below the resolution: "worse by 1 step
    of 1 us (below resolution)" (change), "+31 % [+18, +38] worse (± 1 step of 1 us)" (interval);
    and where "negligible" is claimed inside one step that is wider than the noise band.
    """
    q = 100 * pl.col("step") / pl.col("median_base")
    half_width_pct = (pl.col("delta_high") - pl.col("delta_low")) / 2
    df = (
        comparisons.with_columns(
            resolution=step_expr(pl.col("metric"), pl.col("median")),
            resolution_base=step_expr(pl.col("metric"), pl.col("median_base")),
        )
        .with_columns(step=pl.max_horizontal("resolution", "resolution_base"))
        .with_columns(
            steps=(pl.col("median") - pl.col("median_base")) / pl.col("step"),
            delta_low_res=pl.col("delta_low") - q,
            delta_high_res=pl.col("delta_high") + q,
            unresolved=pl.when(pl.col("step").is_null() | pl.col("delta_pct").is_nan())
            .then(None)
            .when((pl.col("median") - pl.col("median_base")).abs() <= pl.col("step"))
            .then(pl.lit(CHANGE))
            .when(half_width_pct < q)
            .then(pl.lit(INTERVAL)),
        )
        .with_columns(
            below_resolution=pl.col("unresolved").is_not_null(),
            finer_metric=pl.col("metric").replace_strict(FINER, default=None, return_dtype=pl.String),
        )
    )
    return df.with_columns(stats.verdict_columns([_verdict(r) for r in df.iter_rows(named=True)]))
