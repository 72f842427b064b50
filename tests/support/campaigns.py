"""Real campaigns' tables, and what a campaign counted."""

from __future__ import annotations

from tests.conftest import REPO

TIDY = REPO / "tests/fixtures/tidy/lab-default-003"  # real tables of the default campaign before profiled runs


def outcomes(counts: dict) -> dict:
    """A campaign's counts but the waits for quiet CPUs, which a busy machine adds to a clean campaign."""
    return {k: v for k, v in counts.items() if k not in ("quiet_waits", "quiet_wait_s")}
