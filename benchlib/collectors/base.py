"""What every collector shares: the test spec base models, the Collector protocol, invocations,
servers, reading output."""

from __future__ import annotations

import json
import math
import re
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Literal, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from ..base.errors import ParseError

# Caps on the tests' numbers, each beyond what any host or tool takes, so that no value overflows a tool's
# argument or the plan: requests or queries per second, and bytes of one message or buffer
MAX_RATE = 10**9
MAX_MESSAGE_BYTES = 2**30


def _takes_bool(annotation) -> bool:
    return annotation is bool or any(_takes_bool(a) for a in typing.get_args(annotation))


def _describe(annotation) -> str:
    """A type as a message names it: `int or 'max'`, not `Union`."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _describe(args[0])
    if origin is typing.Literal:
        return " or ".join(map(repr, args))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in args if a is not type(None))
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


class Strict(BaseModel):
    """A settings model: unknown keys refused, values frozen, no boolean taken for a number, no
    infinity or NaN (a timeout of .inf overflows, and a record's meta.json must stay JSON)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_numbers(cls, value, info: ValidationInfo):
        # pydantic would read `repetitions: true` as 1: a boolean is a number only where one is meant
        field = cls.model_fields.get(info.field_name or "")
        if isinstance(value, bool) and field is not None and not _takes_bool(field.annotation):
            raise ValueError(f"{value!r} is a boolean; expected {_describe(field.annotation)}")
        return value


# Every test parameter a raw record keeps (test_params), in its order, with the value it has for a tool
# that does not use it: records kept every field of one model common to all tools, and a campaign's
# records must read the same whichever code wrote them.
RECORDED_PARAMS = {
    "tool": None,
    "kind": None,
    "duration_s": None,
    "streams": 1,
    "message_size": None,
    "timeout_s": None,
    "bitrate": None,
    "qps": None,
    "connection_close": False,
}


class Spec(Strict):
    """One test: a tool invocation with its parameters. Each collector subclasses it with its
    ``tool`` (the Literal that picks the model) and ``kind`` Literals and the fields it uses."""

    tool: str
    kind: str = Field(description="test kind; the tool's collector lists the allowed ones (KINDS)")
    duration_s: float = Field(gt=0, le=3600, description="length of one run")
    streams: int = Field(
        1,
        ge=1,
        le=256,
        description=("parallel instances, results summed (iperf3 -P streams, fortio connections, dnsperf clients)"),
    )
    timeout_s: float | None = Field(
        None, gt=0, le=86_400, description="kill the run after this; default duration + 30 s"
    )

    @classmethod
    def tool_name(cls) -> str:
        return typing.get_args(cls.model_fields["tool"].annotation)[0]

    @classmethod
    def kinds(cls) -> tuple[str, ...]:
        return typing.get_args(cls.model_fields["kind"].annotation)

    @field_validator("kind", mode="before")
    @classmethod
    def _kind_of_tool(cls, kind):
        # before the Literal's own check, whose message would not say which tool
        if kind not in cls.kinds():
            raise ValueError(f"{kind!r} is not a kind {cls.tool_name()} runs; allowed: {list(cls.kinds())}")
        return kind

    @property
    def run_timeout_s(self) -> float:
        return self.timeout_s if self.timeout_s is not None else self.duration_s + 30

    def test_params(self) -> dict:
        """The parameters a raw record keeps: RECORDED_PARAMS in their order, then any other field."""
        own = self.model_dump()
        recorded = {key: own.pop(key, default) for key, default in RECORDED_PARAMS.items()}
        return {**recorded, **own}


class WholeSecondsSpec(Spec):
    """A test of a tool whose duration option takes whole seconds (it would truncate a fraction)."""

    @field_validator("duration_s")
    @classmethod
    def _whole_seconds(cls, duration_s: float) -> float:
        if duration_s != int(duration_s):
            raise ValueError(f"{cls.tool_name()} runs whole seconds, got {duration_s}")
        return duration_s


class PacedSpec(Spec):
    """A test of a tool that offers requests at a set rate."""

    qps: Annotated[int, Field(gt=0, le=MAX_RATE)] | Literal["max"] = Field(
        None, validate_default=True, description=("offered requests (queries) per second, or 'max' for no pacing")
    )

    @field_validator("qps", mode="before")
    @classmethod
    def _qps_given(cls, qps, info: ValidationInfo):
        # required, with a message that says what to write
        if qps is None:
            raise ValueError(f"{cls.tool_name()} {info.data.get('kind', '')} needs qps: a number or 'max'")
        return qps


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


# the model of one collector's tests
SpecT = TypeVar("SpecT", bound=Spec)


@runtime_checkable
class Collector(Protocol[SpecT]):
    """What the runner and the tidy step need from a tool's module, whose tests' model is SpecT."""

    @property
    def Spec(self) -> type[SpecT]:
        """Its tests' model."""
        ...

    KINDS: tuple[str, ...]  # the test kinds it runs

    @property
    def SERVER(self) -> Server | None:
        """Started on the server side of each scenario before its first run."""
        ...

    VERSION_COMMAND: list[str]  # run on the client side once per campaign session
    # every program it runs on either side: the scripts/setup.sh profile that installs it, and how
    # (doctor's fixes, the local cluster's pod image)
    PROGRAMS: dict[str, tuple[str, str]]

    def version(self, output: str, /) -> str:
        """The version in what VERSION_COMMAND printed (stdout then stderr)."""
        ...

    def build(self, spec: SpecT, host: str, client_cpus: list[int], server_cpus: list[int]) -> list[Invocation]:
        """The client command lines of one run of a test against ``host``."""
        ...

    def parse(self, kind: str, stdouts: Sequence[bytes | str]) -> dict[str, float]:
        """Metrics of one run from what its client processes printed (bytes as recorded, or text);
        ParseError if impossible."""
        ...

    def warmup_s(self, spec: SpecT) -> float:
        """Seconds the tool runs before its measured interval (the CPU window starts after)."""
        ...

    def expected_wall_s(self, spec: SpecT) -> float:
        """How long a run takes, for estimates."""
        ...

    def server_wait_s(self, spec: SpecT) -> float:
        """Seconds the server idles after the test before it reports, on a timer of its own that a
        target may fire early (Target.end_server_wait); 0 for tools that report at once."""
        ...


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
