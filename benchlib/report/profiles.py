"""The CPU profiles' method in words: how each environment's profiles were taken (the tables:
benchlib.analysis.profiles)."""

from __future__ import annotations

import polars as pl

from .. import escape
from ..analysis.profiles import NO_PROFILES, NO_SYMBOLS


def method_text(method_table: pl.DataFrame) -> str:
    """One Markdown line per environment on how the profiles were taken (what the records say escaped),
    or NO_PROFILES."""
    if method_table.is_empty():
        return NO_PROFILES + "."
    lines = []
    for r in method_table.iter_rows(named=True):
        how = (
            "each side's samples from its own CPUs"
            if r["attribution"] == "cpu"
            else "client and server shared CPUs: one profile of both"
            if r["attribution"] == "shared"
            else "each side's samples from its own host's perf, on its CPUs"
            if r["attribution"] == "host"
            else f"attribution {escape.markdown(r['attribution'])}"
        )
        lines.append(
            f"{escape.markdown(r['environment'])}: `perf record -a -g` ({escape.markdown(r['perf_version'] or 'perf')}, "
            f"kernel {escape.markdown(r['kernel'])}), {escape.markdown(r['event'])} at "
            f"{escape.markdown(r['frequency_hz'])} Hz; {r['profiled_runs']} profiled run(s)"
            + (f" ({r['failed']} failed)" if r["failed"] else "")
            + f", {r['samples']:,} samples; {how}"
            + ("" if r["kernel_symbols"] else f"; {NO_SYMBOLS}")
            + ". Profiled runs are separate from the measured runs."
        )
    return "\n\n".join(lines)
