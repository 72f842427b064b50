"""Every colour the report's figures give a meaning to, in one place: one per scenario (the same in
every figure of the report, the compare page and the blog export), one per CPU category, and the pair
"this campaign" vs "published".

A scenario's colour is decided once per campaign by ``scenario_colours``: the baseline is grey and
the other scenarios take the scenario palette in their natural order (kube-proxy-4 before
kube-proxy-1000). A figure that is given that mapping draws each scenario in it; a figure built
without one makes the same mapping from the scenarios it shows, the baseline's grey reserved even
where the baseline itself is not drawn (a forest plot of changes against it).

The CPU categories and the ours/published pair have palettes of their own, chosen apart from the
scenario colours (at least ``APART`` in CIELAB distance), so that a reader who learned "orange is
bridge" does not read an orange category as bridge.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from benchlib.profiling.stacks import CATEGORIES

# The baseline: the reference every other scenario is compared with, in a neutral grey.
BASELINE = "#595959"
# Okabe-Ito without its black (text, whiskers and the zero line are near-black): distinguishable
# with the common colour-vision deficiencies. Beyond seven scenarios the palette repeats.
SCENARIOS = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442")

# The CPU categories of a profile, none of them close to a scenario colour: the network layers in
# darker or stronger hues, the rest (idle, other, the application) in light greys.
CATEGORY: dict[str, str] = dict(
    zip(
        CATEGORIES,
        (
            "#A0A0A0",  # application
            "#AA4499",  # proxy
            "#DDCC77",  # syscall/socket
            "#332288",  # TCP/IP
            "#882255",  # netfilter/conntrack
            "#117733",  # eBPF
            "#999933",  # devices
            "#CC6677",  # softirq/backlog
            "#C2A5CF",  # scheduler
            "#E8E8E8",  # idle
            "#C8C8C8",  # other
            "#6B4226",  # other processes: no part of the path
        ),
        strict=True,
    )
)
UNKNOWN_CATEGORY = "#DDDDDD"

# This campaign's numbers against a published study's: dark and light, no scenario's colour.
OURS, PUBLISHED = "#1A1A1A", "#B0B0B0"

# The least CIELAB (1976) distance between a category or ours/published colour and a scenario colour.
APART = 20.0


def natural(name: str) -> tuple:
    """Sort key: kube-proxy-iptables-4 before kube-proxy-iptables-1000."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name))


def scenario_colours(scenarios: Iterable[str], baseline: str | None = None) -> dict[str, str]:
    """{scenario: colour}: the baseline grey, the others the scenario palette in natural order.

    Give it every scenario of the campaign (or of both campaigns compared), so that a figure showing
    only some of them draws those in the colours the others give them."""
    others = sorted({s for s in scenarios if s != baseline}, key=natural)
    colours = {s: SCENARIOS[i % len(SCENARIOS)] for i, s in enumerate(others)}
    return ({baseline: BASELINE} if baseline is not None else {}) | colours


def pick(colours: Mapping[str, str] | None, scenarios: Iterable[str], baseline: str | None) -> dict[str, str]:
    """``colours`` where given and holding every one of ``scenarios``, else the mapping of
    ``scenarios`` and ``baseline`` alone (scenario_colours)."""
    shown = list(scenarios)
    if colours is not None and all(s in colours for s in shown):
        return dict(colours)
    return scenario_colours(shown, baseline)


def lab(colour: str) -> tuple[float, float, float]:
    """A "#RRGGBB" colour in CIELAB (D65 white)."""
    rgb = [int(colour.lstrip("#")[i : i + 2], 16) / 255 for i in (0, 2, 4)]
    r, g, b = (c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb)
    xyz = (
        (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047,
        0.2126 * r + 0.7152 * g + 0.0722 * b,
        (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883,
    )
    fx, fy, fz = (t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116 for t in xyz)
    return 116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)


def distance(a: str, b: str) -> float:
    """The CIELAB (1976) distance of two colours: about 2.3 is just noticeable, 20 is plainly apart."""
    return sum((x - y) ** 2 for x, y in zip(lab(a), lab(b), strict=True)) ** 0.5
