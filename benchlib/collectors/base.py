"""What every collector shares: the Collector protocol, invocations, servers, reading output."""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ..errors import ParseError

@dataclass(frozen=True)
class Invocation:
    """One client process of a run (a run with N streams has N of them)."""

    argv: list[str]
    client_cpu: int
    server_cpu: int


@dataclass(frozen=True)
class Server:
    """A long-running server process a collector needs on the server side."""

    name: str
    argv: list[str]
    port: int
    protocol: str = "tcp"
    # TCP ports besides `port` that a service in front of the server must
    # forward (netperf's data connections)
    data_ports: tuple[int, ...] = ()
    # the application protocol on `port` that a service-mesh proxy parses
    # ("http"), None for bytes it forwards as they are
    l7: str | None = None

    def ports(self) -> list[tuple[int, str]]:
        """Every (port, protocol) a client of this server connects to."""
        return [(self.port, self.protocol), *((p, "tcp") for p in self.data_ports)]


@runtime_checkable
class Collector(Protocol):
    """What the runner and the tidy step need from a tool's module."""

    KINDS: tuple[str, ...]  # the test kinds it runs
    SERVER: Server | None  # started on the server side of each scenario before its first run
    VERSION_COMMAND: list[str]  # run on the client side once per campaign session

    def version(self, output: str) -> str:
        """The version in what VERSION_COMMAND printed (stdout then stderr)."""

    def build(self, spec, host: str, client_cpus: list[int], server_cpus: list[int]) -> list[Invocation]:
        """The client command lines of one run of a TestSpec against ``host``."""

    def parse(self, kind: str, stdouts: list[bytes | str]) -> dict[str, float]:
        """Metrics of one run from what its client processes printed (bytes as recorded, or text);
        ParseError if impossible."""

    def warmup_s(self, spec) -> float:
        """Seconds the tool runs before its measured interval (the CPU window starts after)."""

    def expected_wall_s(self, spec) -> float:
        """How long a run takes, for estimates."""

    def server_wait_s(self, spec) -> float:
        """Seconds the server idles after the test before it reports, on a timer of its own that a
        target may fire early (Target.end_server_wait); 0 for tools that report at once."""


_NOT_UTF8 = re.compile("[\udc80-\udcff]")  # what `text` makes of bytes that are not UTF-8


def text(output: bytes | str) -> str:
    """What a process printed, as a parser reads it. Bytes that are not UTF-8 become lone
    surrogates (U+DC80-U+DCFF): a parser refuses them in a field it needs (`utf8`) and passes
    over them elsewhere, so one stray byte in a log line costs nothing."""
    return output.decode("utf-8", "surrogateescape") if isinstance(output, (bytes, bytearray)) else output


def utf8(tool: str, field: str, value: str) -> str:
    """``value`` of a field a parser needs, or a ParseError if the tool printed bytes there that are not UTF-8."""
    if _NOT_UTF8.search(value):
        raise ParseError(f"{tool} {field}: bytes that are not UTF-8 in {value[:80]!r}")
    return value


def finite(tool: str, metrics: dict[str, float]) -> dict[str, float]:
    """``metrics``, or a ParseError if one is not finite: a huge number the tool printed turns to
    infinity once scaled (seconds to us) or summed over streams."""
    for name, value in metrics.items():
        if not math.isfinite(value):
            raise ParseError(f"{tool}: {name} is {value} (the output holds an absurdly large number)")
    return metrics


def message(value, limit: int = 500) -> str:
    """A tool's own words in a ParseError: cut short, bytes that are not UTF-8 shown as \\udcNN."""
    return str(value)[:limit].encode("utf-8", "backslashreplace").decode()


def json_document(tool: str, output: bytes | str):
    """The JSON document a tool printed, or a ParseError (also for documents Python's parser
    refuses beyond syntax: integers of more than 4300 digits, nesting deeper than its recursion)."""
    try:
        return json.loads(text(output))
    except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        raise ParseError(f"{tool} output is not JSON ({str(exc)[:200]})") from None


def json_get(doc, *path):
    """The value at ``path`` in a JSON document, None where a key is missing or a level is no object."""
    for key in path:
        if not isinstance(doc, dict):
            return None
        doc = doc.get(key)
    return doc


def json_number(tool: str, doc, *path, minimum: float | None = None) -> float:
    """The number at ``path`` in a tool's JSON document, or a ParseError naming the path."""
    dotted = ".".join(map(str, path))
    for key in path:
        if not isinstance(doc, dict) or key not in doc:
            raise ParseError(f"{tool} JSON lacks {dotted}")
        doc = doc[key]
    if not isinstance(doc, (int, float)) or isinstance(doc, bool):
        raise ParseError(f"{tool} {dotted}={_short(doc)} is not a number")
    try:
        number = float(doc)  # an integer of 400 digits is no float
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):  # JSON's 1E999 reads as inf, NaN as nan
        raise ParseError(f"{tool} {dotted}={_short(doc)} is not a finite number")
    if minimum is not None and number < minimum:
        raise ParseError(f"{tool} {dotted}={_short(doc)} is below {minimum:g}")
    return number


def _short(value) -> str:
    """A JSON value in a message: its repr, cut short (a mutated document may hold megabytes)."""
    shown = repr(value)
    return shown if len(shown) <= 80 else shown[:77] + "..."
