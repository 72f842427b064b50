"""What a comparison's verdict says, as data: its kind and the direction it calls.

The verdict's sentence ("+12.3 % [+8.1, +16.0] better", "~ within noise") is for people; every
decision about a comparison (is it a finding, which way, is it tested at all) reads these two
columns instead, ``verdict_kind`` and ``verdict_direction``, so that a rewording of the sentence
changes no decision.
"""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple

# a verdict as the tables carry it: the sentence, then its kind and direction
VERDICT_COLUMNS = ("verdict", "verdict_kind", "verdict_direction")


class Kind(StrEnum):
    """What a comparison's verdict says."""

    FINDING = "finding"  # significant, and not shown to be inside the noise band
    NEGLIGIBLE = "negligible"  # significant, its interval inside the noise band
    NOISE = "noise"  # not significant
    INCONCLUSIVE = "inconclusive"  # the test and the interval of the change disagree
    INSUFFICIENT = "insufficient"  # too few runs on a side to test
    EXCLUDED = "excluded"  # not tested: the values there were not numbers
    FAILED = "failed"  # every run of the configuration failed in one campaign
    UNCOMPARED = "uncompared"  # no comparison to judge (a claim not measured, a reference without proxies)
    BASELINE = "baseline"  # the baseline's own row of a table, not compared with itself


class Direction(StrEnum):
    """Which way the verdict calls the change, by the metric's direction; NONE where it calls none."""

    BETTER = "better"
    WORSE = "worse"
    NONE = "none"


class Verdict(NamedTuple):
    """A verdict: its sentence, its kind and its direction."""

    text: str
    kind: Kind
    direction: Direction = Direction.NONE
