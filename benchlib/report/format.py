"""Numbers as the report, the summary and `benchlib compare` write them: one formatter per kind of
number (a median in a table, a value in a caption, a change in %, a confidence level, ...), so that a
value reads the same wherever it is shown.

The analysis tables hold the numbers; the report's modules, the summary and compare's outputs write
them through these. A missing value (None or NaN) is the formatter's to show ("" or "-").
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Mapping

import numpy as np
import polars as pl

from ..analysis.profiles import MICROSECONDS
from ..analysis.resolution import BELOW, CHANGE, INTERVAL, steps_text
from ..analysis.verdicts import Direction, Kind

# Units as the tables store them (ASCII) and as a reader sees them.
UNITS = {"us": "µs"}
_UNIT_WORDS = re.compile(r"\b(" + "|".join(map(re.escape, UNITS)) + r")\b")


def unit(u: str | None) -> str:
    """A unit for reading: "us" -> "µs", "us per transaction" -> "µs per transaction"; "" if missing."""
    return _UNIT_WORDS.sub(lambda m: UNITS[m.group()], u) if u else ""


def p_value(p: float | None) -> str:
    """A p-value: "< 0.001" below a thousandth, else two significant digits (0.012, 0.5); "" if missing."""
    if missing(p):
        return ""
    assert p is not None
    return "< 0.001" if p < 0.001 else f"{p:.2g}"


def missing(v: float | None) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def median(v: float | None) -> str:
    """A median or interval bound in a table of text: four significant digits, "-" if missing."""
    return "-" if missing(v) else f"{v:.4g}"


def caption(v: float) -> str:
    """A value for a caption: four significant digits, never in exponent notation (20000, 462.6)."""
    return np.format_float_positional(v, precision=4, unique=True, fractional=False, trim="-")


def reading(v: float) -> str:
    """A measured value for reading: 4 significant digits, thousands grouped, no exponent below 1e9."""
    if v != v or abs(v) >= 1e9 or (v != 0 and abs(v) < 1e-3):
        return f"{v:.3g}"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.4g}"


def level(ci_level: float) -> str:
    """A confidence level (a fraction) in percent: "97.92 %"."""
    return f"{100 * ci_level:.4g} %"


def interval_wording(correction: str, alpha: float) -> str:
    """What the interval of a change is, in words that stay the same from campaign to campaign: the
    test it agrees with and that test's error rate. Its level (1 - the per-comparison threshold the
    correction stopped at) depends on how many comparisons were significant, so the method states it
    per family instead of each finding.

    Holm's intervals are not simultaneous ones (they claim no family-wise coverage once something is
    rejected, analysis.families.decision_level); they are the intervals that exclude 0 exactly where
    the corrected test is significant."""
    rate = f"{100 * alpha:g} %"
    if correction == "holm":
        return f"interval agreeing with the Holm-corrected test, {rate} family-wise error"
    if correction == "fdr_bh":
        return f"interval agreeing with the Benjamini-Hochberg test, {rate} false discovery rate"
    return f"interval agreeing with the {correction}-corrected test at {rate}"


def change(v: float) -> str:
    """A change in %, signed, one decimal: "+3.2"."""
    return f"{v:+.1f}"


def size(v: float) -> str:
    """A change's size in %, unsigned, one decimal, for a sentence that says which way: "3.2"."""
    return f"{abs(v):.1f}"


def whole_change(v: float) -> str:
    """A change in whole percent, signed (below the instrument's resolution): "+8"."""
    return f"{v:+.0f}"


def whole_change_interval(v: float, low: float | None, high: float | None) -> str:
    """A change in whole percent with its interval, "+23 % [+8, +48]"; the change alone where the
    interval is missing or not finite."""
    if low is None or high is None or not (math.isfinite(low) and math.isfinite(high)):
        return f"{round(v):+d} %"
    return f"{round(v):+d} % [{round(low):+d}, {round(high):+d}]"  # round(): no "-0"


def interval(v: float, low: float, high: float) -> str:
    """A value with its interval, or the value alone where the interval is not finite."""
    return f"{v:.4g} [{low:.4g}, {high:.4g}]" if math.isfinite(low) else f"{v:.4g}"


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[+-]\d+)?")


def numbers_in(text: str) -> str:
    """``text`` with each number in it written by reading(): "1.7e+04 [1.663e+04, 1.734e+04]" ->
    "17,000 [16,630, 17,340]"."""
    return _NUMBER.sub(lambda m: reading(float(m.group())), text)


def verdict_word(r: Mapping) -> str:
    """A comparison's verdict without the change it starts with, for a table whose change has a column
    of its own: a finding that states its change and way ("-33.7 % [-35.4, -32.2] worse") as its way
    ("worse"), with the step its interval was widened by where that is below the instrument's resolution
    ("worse (± 1 step of 1 µs)"); every other verdict ("~ within noise", "negligible", "inconclusive:
    ...", a change given in steps) as it is. ``r``: a comparison's row (verdict, verdict_kind,
    verdict_direction, delta_pct, and resolution.annotate's unresolved, step and unit where it has them)."""
    way, unresolved = r.get("verdict_direction"), r.get("unresolved")
    states_change = r.get("verdict_kind") == Kind.FINDING and not missing(r.get("delta_pct"))
    if not states_change or way in (None, Direction.NONE) or unresolved == CHANGE:
        return unit(r.get("verdict") or "")
    if unresolved == INTERVAL:
        return f"{way} (± 1 step of {r['step']:g} {unit(r['unit'])})"
    return str(way)


def change_text(r: dict, with_level: bool = True) -> str:
    """A comparison's change in % with its interval and the interval's level; "" without a change.

    Below the instrument's resolution (resolution.annotate's ``below_resolution``) in whole percent,
    in steps of the instrument, with the interval widened by one step each way. Where the change
    itself is at most one step: "+8 % (1 step of 10 us: below resolution) [-3, +21] ± 1 step @ 97.92 %";
    where only its interval is narrower than one step: "+31 % [+18, +38] ± 1 step @ 95 % (4 steps of 1
    us; interval below resolution)"."""
    if missing(r["delta_pct"]):
        return ""
    at = f" @ {level(r['ci_level'])}" if with_level else ""
    if not r.get("below_resolution"):
        return f"{change(r['delta_pct'])} [{change(r['delta_low'])}, {change(r['delta_high'])}]{at}"
    steps = steps_text(r["steps"], r["step"], unit(r["unit"]))
    widened = f"[{whole_change(r['delta_low_res'])}, {whole_change(r['delta_high_res'])}] ± 1 step{at}"
    if r["unresolved"] == CHANGE:
        return f"{whole_change(r['delta_pct'])} % ({steps}: {BELOW}) {widened}"
    return f"{whole_change(r['delta_pct'])} % {widened} ({steps}; interval {BELOW})"


def mde_text(r: dict) -> str:
    """A comparison's minimum detectable effect in %, or why there is none at its n."""
    if r["n_attainable"] is not None:
        return f"not attainable at n = {r['n']} (needs n >= {r['n_attainable']})"
    return "" if missing(r["mde_pct"]) else f"{r['mde_pct']:.1f}"


# CPU per unit of work in a figure's hover (plotly's d3 format: 3 significant digits, never an exponent),
# and a relative change there
CPU_D3 = ".3~r"
CHANGE_D3 = "+.0f"
# a differential flamegraph's colour scale ends here: a frame the baseline lacks, or one that more than
# doubled, is as red as it gets
RELATIVE_CAP = 100.0


def cpu_change(v: float) -> str:
    """A change of CPU per unit of work to sensible digits, signed: "+12", "+1.6", "+0.42"."""
    a = abs(v)
    return f"{v:+.0f}" if a >= 10 else f"{v:+.1f}" if a >= 0.95 else f"{v:+.2f}"


def cpu_value(v: float) -> str:
    """CPU per unit of work to sensible digits: "71.7", "0.42"."""
    return f"{v:.1f}" if abs(v) >= 0.95 else f"{v:.2f}"


def cpu_short_unit(cpu_unit: str, work_unit: str) -> str:
    """The unit after a CPU figure: µs alone (the text says per what), another CPU unit with the work it
    is per ("millicores/(Gbit/s)")."""
    return cpu_unit if cpu_unit == MICROSECONDS else f"{cpu_unit}/({work_unit})"


def cpu_change_interval(delta: float, low: float, high: float, short: str = "") -> str:
    """A change of CPU per unit with its interval: "+2.0 µs [+1.6, +2.4]", or "+2.0 [+1.6, +2.4]" without
    a unit (``short`` "": one named just before)."""
    return f"{cpu_change(delta)}{f' {short}' if short else ''} [{cpu_change(low)}, {cpu_change(high)}]"


def relative_change(v: float, capped: bool = False) -> str:
    """A relative change on a colour scale: "+50 %", "0 %", and at the cap "≥ +100 %"."""
    text = f"{v:+.0f} %" if v else "0 %"
    return f"≥ {text}" if capped and v > 0 else text


def time_span(first, last) -> str:
    """When a campaign ran, to the minute in UTC: "2026-11-23 22:30-22:36 UTC" within a day, else
    "2026-11-23 22:30 UTC to 2026-11-24 01:05 UTC"; "-" when either end is missing."""
    if first is None or last is None:
        return "-"
    first, last = (t.astimezone(dt.UTC) if t.tzinfo else t for t in (first, last))
    if first.date() == last.date():
        return f"{first:%Y-%m-%d %H:%M}-{last:%H:%M} UTC"
    return f"{first:%Y-%m-%d %H:%M} UTC to {last:%Y-%m-%d %H:%M} UTC"


def display_tables() -> None:
    """Show whole tables in notebooks and the report: polars elides rows and long strings by default."""
    pl.Config.set_tbl_rows(-1)
    pl.Config.set_tbl_cols(-1)
    pl.Config.set_fmt_str_lengths(200)
    pl.Config.set_tbl_hide_dataframe_shape(True)
