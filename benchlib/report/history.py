"""What `benchlib history` prints: per configuration, each campaign's median with its interval in the
order measured, and its change against the campaign before it where one was judged."""

from __future__ import annotations

import polars as pl

from .format import change, missing, reading, unit, verdict_word

CHANGED = "<- changed"


def _when(t) -> str:
    return t.strftime("%Y-%m-%d %H:%M") if t is not None else "-"


def _median(r: dict) -> str:
    interval = "" if missing(r["ci_low"]) else f" [{reading(r['ci_low'])}, {reading(r['ci_high'])}]"
    return f"{reading(r['median'])}{interval}" if not missing(r["median"]) else "-"


def _change(r: dict) -> str:
    """The change against the campaign before with its interval, "-20.0 % [-23.0, -16.9] ", or ""."""
    if missing(r["delta_pct"]):
        return ""
    if missing(r["delta_low"]):
        return f"{change(r['delta_pct'])} % "
    return f"{change(r['delta_pct'])} % [{change(r['delta_low'])}, {change(r['delta_high'])}] "


def text(history: pl.DataFrame) -> str:
    """The plain-text history: the campaigns in order, the changes first counted, then per configuration
    one line per campaign (date, n, median [95 % CI], change vs the campaign before, verdict)."""
    if history.is_empty():
        return "benchlib history: no campaign with a successful run"
    order = history.select("campaign", "started_at").unique("campaign").sort("started_at")
    changed = history.filter(pl.col("changed").fill_null(False))
    out = [
        f"benchlib history: {len(order)} campaign(s), in the order measured: "
        + ", ".join(f"{c} ({_when(t)})" for c, t in order.iter_rows()),
        f"Changes against the campaign before (significant and beyond the threshold): {len(changed)}",
        "",
    ]
    keys = ["environment", "test", "scenario", "metric", "side"]
    for key, rows in history.sort(*keys, "started_at").group_by(keys, maintain_order=True):
        env, test, scenario, metric, side = key
        first = rows.row(0, named=True)
        where = f" ({side})" if side not in (None, "none") else ""
        out.append(f"{env} {test} {scenario}: {metric}{where}, {unit(first['unit'])}")
        for r in rows.iter_rows(named=True):
            line = f"  {r['campaign']:<24} {_when(r['started_at'])}  n={r['n']:<4} {_median(r)}"
            if r["previous"] is not None:
                line += f"  vs {r['previous']}: {_change(r)}{verdict_word(r)}"
                if r["changed"]:
                    line += f"  {CHANGED}"
            out.append(line)
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def to_json(history: pl.DataFrame) -> list[dict]:
    """The history's rows as JSON values (times in ISO 8601, NaN as null)."""
    rows = history.with_columns(pl.col("started_at").dt.to_string("%Y-%m-%dT%H:%M:%S%z")).fill_nan(None)
    return rows.to_dicts()
