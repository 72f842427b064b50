"""Numbers as text: each formatter's digits, and the change text with and without the instrument's
resolution, as the report, the summary and `benchlib compare` show them."""

from __future__ import annotations

import datetime as dt
import math

import pytest

from benchlib.analysis import resolution
from benchlib.report import format as fmt


@pytest.mark.parametrize(
    ("formatter", "value", "text"),
    [
        (fmt.median, 17043.2, "1.704e+04"),
        (fmt.median, math.nan, "-"),
        (fmt.median, None, "-"),
        (fmt.caption, 20000.0, "20000"),
        (fmt.caption, 462.6123, "462.6"),
        (fmt.reading, 17043.2, "17,043"),
        (fmt.reading, 0.0001234, "0.000123"),
        (fmt.reading, 12.3456, "12.35"),
        (fmt.level, 0.9792, "97.92 %"),
        (fmt.change, 3.24, "+3.2"),
        (fmt.whole_change, -2.6, "-3"),
    ],
)
def test_each_formatter_writes_its_kind_of_number(formatter, value, text):
    assert formatter(value) == text


def test_an_interval_without_finite_bounds_is_the_value_alone():
    assert fmt.interval(12.345, 11.0, 13.5) == "12.35 [11, 13.5]"
    assert fmt.interval(12.345, math.nan, math.nan) == "12.35"


def test_numbers_in_text_are_rewritten_for_reading():
    assert fmt.numbers_in("1.7e+04 [1.663e+04, 1.734e+04]") == "17,000 [16,630, 17,340]"


ROW = {"delta_pct": 30.77, "delta_low": 25.9, "delta_high": 30.8, "ci_level": 0.95, "unit": "us"}


def test_the_change_text_quotes_the_interval_at_its_level():
    assert fmt.change_text(ROW) == "+30.8 [+25.9, +30.8] @ 95 %"
    assert fmt.change_text({**ROW, "delta_pct": math.nan}) == ""


def test_below_the_resolution_the_change_is_in_whole_percent_and_steps():
    below = {**ROW, "below_resolution": True, "step": 1.0, "delta_low_res": 18.2, "delta_high_res": 38.5}
    interval = {**below, "unresolved": resolution.INTERVAL, "steps": 4.0}
    change = {**below, "unresolved": resolution.CHANGE, "steps": 1.0}
    assert fmt.change_text(interval) == "+31 % [+18, +38] ± 1 step @ 95 % (4 steps of 1 µs; interval below resolution)"
    assert fmt.change_text(change) == "+31 % (1 step of 1 µs: below resolution) [+18, +38] ± 1 step @ 95 %"


def test_the_mde_text_says_why_there_is_none():
    assert fmt.mde_text({"n_attainable": 12, "n": 8, "mde_pct": math.nan}) == "not attainable at n = 8 (needs n >= 12)"
    assert fmt.mde_text({"n_attainable": None, "n": 8, "mde_pct": 4.26}) == "4.3"
    assert fmt.mde_text({"n_attainable": None, "n": 8, "mde_pct": math.nan}) == ""


def test_the_spreadsheet_carries_the_change_text_after_the_resolution_columns():
    from benchlib.report import tables
    from tests.support.analysis_tables import report_comparisons

    comparisons = resolution.annotate(report_comparisons("tests/fixtures/tidy/lab-default-003")[3])
    sheet = tables.spreadsheet(comparisons)
    assert "u" not in sheet.columns and sheet.columns[sheet.columns.index("finer_metric") + 1] == "change"
    below = sheet.filter("below_resolution").row(0, named=True)
    assert resolution.BELOW in below["change"] and below["change"] == fmt.change_text(below)


def test_p_values_units_and_verdicts_as_a_reader_reads_them():
    assert [fmt.p_value(p) for p in (0.0, 0.0004, 0.001, 0.0123, 0.5, None, float("nan"))] == [
        "< 0.001",
        "< 0.001",
        "0.001",
        "0.012",
        "0.5",
        "",
        "",
    ]
    assert [fmt.unit(u) for u in ("us", "us per transaction", "Gbit/s", "", None)] == [
        "µs",
        "µs per transaction",
        "Gbit/s",
        "",
        "",
    ]
    # the word from the verdict's kind and direction, never from its text
    finding = {"verdict": "-33.7 % [-35.4, -32.2] worse", "verdict_kind": "finding", "verdict_direction": "worse"}
    assert fmt.verdict_word({**finding, "delta_pct": -33.7}) == "worse"
    assert fmt.verdict_word({**finding, "verdict": "reworded", "delta_pct": -33.7}) == "worse"
    widened = {**finding, "verdict": "+31 % [+18, +38] worse (± 1 step of 1 us)", "delta_pct": 31.0}
    assert (
        fmt.verdict_word({**widened, "unresolved": "interval", "step": 1.0, "unit": "us"}) == "worse (± 1 step of 1 µs)"
    )
    steps = {
        **finding,
        "verdict": "worse by 4 steps of 1 us (below resolution)",
        "delta_pct": 3.0,
        "unresolved": "change",
    }
    assert fmt.verdict_word(steps) == "worse by 4 steps of 1 µs (below resolution)"
    assert fmt.verdict_word({"verdict": "~ within noise", "verdict_kind": "noise", "verdict_direction": "none"}) == (
        "~ within noise"
    )
    r = {"delta_pct": -5.0, "delta_low": -6.0, "delta_high": -4.0, "ci_level": 0.98}
    assert (
        fmt.change_text(r) == "-5.0 [-6.0, -4.0] @ 98 %" and fmt.change_text(r, with_level=False) == "-5.0 [-6.0, -4.0]"
    )


def test_a_time_span_is_to_the_minute_in_utc_and_names_the_date_once_within_a_day():
    utc = dt.UTC
    first = dt.datetime(2026, 11, 23, 22, 30, 5, tzinfo=utc)
    assert fmt.time_span(first, dt.datetime(2026, 11, 23, 22, 36, 59, tzinfo=utc)) == "2026-11-23 22:30-22:36 UTC"
    assert (
        fmt.time_span(first, dt.datetime(2026, 11, 24, 1, 5, tzinfo=dt.timezone(dt.timedelta(hours=2))))
        == "2026-11-23 22:30-23:05 UTC"
    )
    assert (
        fmt.time_span(first, dt.datetime(2026, 11, 24, 1, 5, tzinfo=utc))
        == "2026-11-23 22:30 UTC to 2026-11-24 01:05 UTC"
    )
    assert fmt.time_span(None, first) == "-"
