"""The one schema of a raw record's meta.json and cpu.json: every field's type and range, as the current
schema version has them (`record.migrate` brings older versions there first).

A record is read back by code that trusts its types: a count that is text, a CPU list that is a number
or a mapping that is a list would otherwise fail deep inside the tables' writer or the statistics, far
from the record. `check_meta` and `check_cpu` refuse such a record at once, in one line naming the record,
the file and the field (``.../r003: meta.json: foreign_cpu.measured_cores: 'abc' is not a number``).
Strict: no text read as a number, no boolean as a number, no number as text. Mappings whose keys depend on
the target (placement, target, test_params, scenario_definition) are open: their other keys are kept as
recorded, their depth bounded by limits.parse_json. Integers that become table columns stay within 64 bits.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, NotRequired, get_args

from pydantic import AfterValidator, ConfigDict, Field, TypeAdapter, ValidationError, with_config
from typing_extensions import TypedDict  # pydantic's TypedDict before Python 3.12

from ..base import limits
from ..base.errors import RecordError
from ..collectors import TOOLS
from ..host import cpu
from ..settings.environment import MAX_CPU
from ..vocabulary.schema import SIDES

Outcome = Literal["ok", "failed", "disturbed"]  # disturbed: other processes took the run's CPUs
OUTCOMES = get_args(Outcome)
INT64_MAX = 2**63 - 1

Int64 = Annotated[int, Field(ge=-INT64_MAX - 1, le=INT64_MAX)]
Count = Annotated[int, Field(ge=0, le=INT64_MAX)]  # counters, ids, sizes: whole numbers >= 0 a table can hold
Cpu = Annotated[int, Field(ge=0, le=MAX_CPU)]
Number = Annotated[float, Field(allow_inf_nan=False)]
Share = Annotated[float, Field(ge=0, allow_inf_nan=False)]  # cores, seconds: finite, >= 0
Edges = Annotated[list[Count], Field(min_length=2, max_length=2)]  # a counter at the window's start and end


def _one_of(allowed: tuple[str, ...]):
    """A validator: the text is one of ``allowed`` (a Literal of names known only at run time)."""

    def check(text: str) -> str:
        if text not in allowed:
            raise ValueError(f"is not one of {list(allowed)}")
        return text

    return check


def _aware_time(text: str) -> str:
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError("is not an ISO 8601 time") from None
    if t.tzinfo is None:
        raise ValueError("is a time without a time zone")
    return text


def _rate(value: object) -> object:
    if value is None or value == "max" or (type(value) is int and 0 < value <= INT64_MAX):
        return value
    raise ValueError("is not a rate (a whole number > 0, 'max' or null)")


def _with_kernel(versions: dict) -> dict:
    if not isinstance(versions.get("kernel"), str):
        raise ValueError("names no kernel version")
    return versions


def _both_edges(bpf: dict) -> dict:
    if ("before" in bpf) != ("after" in bpf):
        raise ValueError("holds the counters of one edge of the window only (before and after go together)")
    return bpf


def _cpu_numbers(counters: dict) -> dict:
    if not all(c.isascii() and c.isdigit() and len(c) <= 7 for c in counters):
        raise ValueError("is keyed by something else than CPU numbers")
    return counters


Time = Annotated[str, AfterValidator(_aware_time)]
# Each part of a record a TypedDict (validated as the mapping it is, no object built: half the time of
# a model), strict; keys of an open part that are not named here are not looked at.
STRICT = ConfigDict(strict=True)
CLOSED = ConfigDict(strict=True, extra="forbid")


@with_config(STRICT)
class TestParams(TypedDict):
    tool: str
    kind: str
    streams: Annotated[int, Field(ge=1, le=INT64_MAX)]
    message_size: NotRequired[Count | None]
    duration_s: NotRequired[Share | None]
    timeout_s: NotRequired[Share | None]
    qps: NotRequired[Annotated[object, AfterValidator(_rate)]]
    connection_close: NotRequired[bool]


@with_config(CLOSED)
class Attempt(TypedDict):
    outcome: Outcome
    reason: str | None
    started_at: Time


@with_config(STRICT)
class Mesh(TypedDict):
    kind: NotRequired[str]
    proxy: NotRequired[str | None]
    proxy_version: NotRequired[str | None]
    proxies: NotRequired[dict[str, dict[str, Any]]]


@with_config(STRICT)
class BigTcp(TypedDict):
    size: NotRequired[Count | None]


@with_config(STRICT)
class Placement(TypedDict):
    client_node: str
    server_node: str
    client_cpus: list[Cpu]
    server_cpus: list[Cpu]
    nodes_share_kernel: NotRequired[bool | None]
    services: NotRequired[Count | None]
    mesh: NotRequired[Mesh | None]
    ip_family: NotRequired[Literal[4, 6]]
    big_tcp: NotRequired[BigTcp | None]
    cpu_placement: NotRequired[Literal["split", "shared"]]
    cluster: NotRequired[str | None]


@with_config(STRICT)
class Machine(TypedDict):
    cpu_model: NotRequired[str | None]
    cpus: NotRequired[Count | None]
    memory: NotRequired[str | None]


@with_config(STRICT)
class Cluster(TypedDict):  # one cluster of a campaign over several (kubernetes.clusters)
    versions: Annotated[dict[str, str | None], AfterValidator(_with_kernel)]
    machine: NotRequired[Machine | None]


@with_config(STRICT)
class Target(TypedDict):
    versions: Annotated[dict[str, str | None], AfterValidator(_with_kernel)]  # every tool's, as it printed it
    machine: NotRequired[Machine | None]
    clusters: NotRequired[dict[str, Cluster]]


@with_config(STRICT)
class Process(TypedDict):
    side: str
    version: NotRequired[str | None]
    cpu_ticks: Edges
    peak_rss_kib: Count
    bytes: NotRequired[Edges | None]


@with_config(STRICT)
class Definition(TypedDict):
    scenario: dict[str, Any]
    environment: dict[str, Any]
    files: dict[str, str]


@with_config(STRICT)
class BpfProgram(TypedDict):
    id: Count
    type: NotRequired[str]
    name: NotRequired[str]
    run_cnt: NotRequired[Count]
    run_time_ns: NotRequired[Count]


@with_config(STRICT)
class BpfHook(TypedDict):
    id: NotRequired[Count | None]
    prog_id: NotRequired[Count | None]
    kind: NotRequired[str | None]
    devname: NotRequired[str | None]


@with_config(STRICT)
class BpfNamespace(TypedDict):
    netns: NotRequired[str | None]
    net: NotRequired[list[dict[str, list[BpfHook] | None]] | None]


@with_config(STRICT)
class Bpf(TypedDict):
    error: NotRequired[str]
    before: NotRequired[list[BpfProgram]]
    after: NotRequired[list[BpfProgram]]
    attached: NotRequired[list[BpfNamespace]]


@with_config(STRICT)
class Profile(TypedDict):
    perf_version: NotRequired[str | None]
    event: NotRequired[str | None]
    frequency_hz: NotRequired[Count | None]
    kernel: NotRequired[str | None]
    cpus: dict[str, list[Cpu]]
    attribution: NotRequired[str | None]
    window_s: NotRequired[Share | None]
    samples: Annotated[int, Field(ge=1, le=limits.PROFILE_SAMPLES)]
    kernel_symbols: NotRequired[bool | None]
    command: NotRequired[list[str]]
    bpf: NotRequired[Annotated[Bpf, AfterValidator(_both_edges)] | None]


@with_config(STRICT)
class Taker(TypedDict):
    name: str
    pid: Count
    cores: Share
    reaped: NotRequired[list[str]]


@with_config(STRICT)
class ForeignCpu(TypedDict):
    window_s: NotRequired[Number | None]
    cores: NotRequired[Share | None]
    cpus: NotRequired[dict[str, Share] | None]
    measured_cores: Share | None
    top: list[Taker]
    steal_cores: NotRequired[Share | None]


@with_config(STRICT)
class Quiet(TypedDict):
    window_s: NotRequired[Share | None]
    unavailable: NotRequired[str | None]
    frozen: NotRequired[dict[str, Count] | None]


@with_config(CLOSED)
class Meta(TypedDict):
    """meta.json of the current schema version."""

    schema_version: int
    campaign: str
    environment: str
    scenario: str
    test: str
    run_id: str
    block: Count
    order: Count
    tool: Annotated[str, AfterValidator(_one_of(TOOLS))]
    kind: str
    test_params: TestParams
    commands: Annotated[list[list[str]], Field(min_length=1)]
    exit_codes: list[Int64 | None]
    started_at: Time
    ended_at: Time
    outcome: Outcome
    failure_reason: str | None
    attempts: Annotated[list[Attempt], Field(min_length=1)]
    placement: Placement
    target: Target
    processes: dict[str, Process]
    scenario_definition: Definition | None
    profiled: bool
    profile: Profile | None
    foreign_cpu: ForeignCpu | None
    quiet: Quiet | None


@with_config(STRICT)
class Surveyed(TypedDict):
    """What `record.survey` reads of a meta.json of any version, before its checksums are verified."""

    run_id: str
    test_params: NotRequired[dict[str, Any]]
    scenario_definition: NotRequired[Definition | None]


Counters = Annotated[list[int], Field(min_length=len(cpu.FIELDS), max_length=len(cpu.FIELDS))]


@with_config(CLOSED)
class Snapshot(TypedDict):
    wall: Number
    mono: Number
    counters: Annotated[dict[str, Counters], AfterValidator(_cpu_numbers)]


@with_config(CLOSED)
class SideCpu(TypedDict):
    node: str
    cpus: list[Cpu]
    start: Snapshot
    end: Snapshot


def _both_sides(sides: dict) -> dict:
    if set(sides) != set(SIDES):
        raise ValueError(f"are {sorted(sides)}, not {list(SIDES)}")
    return sides


@with_config(CLOSED)
class CpuDoc(TypedDict):
    """cpu.json: the clock's ticks per second and each side's counters."""

    clk_tck: Annotated[int, Field(ge=1, le=10**9)]
    sides: Annotated[dict[Annotated[str, AfterValidator(_one_of(SIDES))], SideCpu], AfterValidator(_both_sides)]


_META, _CPU, _SURVEYED = TypeAdapter(Meta), TypeAdapter(CpuDoc), TypeAdapter(Surveyed)


def check_meta(doc: object, where: str) -> None:
    """Whether meta.json ``doc`` (migrated to the current version) is of the schema's types and ranges;
    RecordError naming ``where`` (the record and the file) and the field if not."""
    _checked(_META, doc, where)


def check_cpu(doc: object, where: str) -> None:
    _checked(_CPU, doc, where)


def check_surveyed(doc: object, where: str) -> dict:
    """``doc`` if what survey reads of it is of the schema's types, else RecordError."""
    _checked(_SURVEYED, doc, where)
    assert isinstance(doc, dict)  # the schema's Surveyed is a mapping
    return doc


def _checked(schema: TypeAdapter, doc: object, where: str) -> None:
    if not isinstance(doc, dict):
        raise RecordError(f"{where}: {shown(doc)} is not a JSON object")
    try:
        schema.validate_python(doc)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise RecordError(f"{where}: {problem(errors[0])}{more}") from None


# what each kind of pydantic error says of the value, in a record's words
_SAYS = {
    "float_type": "is not a number",
    "float_parsing": "is not a number",
    "finite_number": "is not a finite number",
    "int_type": "is not a whole number",
    "int_parsing": "is not a whole number",
    "int_from_float": "is not a whole number",
    "bool_type": "is not true or false",
    "string_type": "is not text",
    "dict_type": "is not a mapping",
    "list_type": "is not a list",
    "none_required": "is not null",
}


def problem(error) -> str:
    """One pydantic error as ``field.path: value says-what``."""
    field = _field(error["loc"])
    kind, ctx, value = error["type"], error.get("ctx") or {}, error.get("input")
    if kind == "missing":
        return f"{field}: missing"
    if kind == "extra_forbidden":
        return f"{field}: not a field of this record's schema version"
    if kind in _SAYS:
        says = _SAYS[kind]
    elif kind == "less_than_equal" and ctx.get("le") == INT64_MAX:
        says = "is beyond a 64-bit integer"
    elif kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        bound = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=", "less_than": "<"}[kind]
        says = f"is not {bound} {next(iter(ctx.values()))}"
    elif kind == "literal_error":
        says = f"is not one of {ctx.get('expected')}"
    elif kind == "too_short":
        says = f"has {ctx.get('actual_length')} items, fewer than {ctx.get('min_length')}"
    elif kind == "too_long":
        says = f"has more items than {ctx.get('max_length')}"
    elif kind == "string_pattern_mismatch":
        says = "is not a CPU number"
    elif kind == "value_error":
        says = error["msg"].removeprefix("Value error, ")
    else:
        says = error["msg"]
    return f"{field}: {shown(value)} {says}" if field else f"{shown(value)} {says}"


def _field(loc: tuple) -> str:
    """A pydantic location as a field path: ``attempts[0].outcome``, ``processes.envoy.cpu_ticks[1]``."""
    out = ""
    for part in loc:
        if part == "[key]":
            continue
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            text = part if part.isprintable() and len(part) <= 60 else repr(part[:57]) + "..."
            out += f".{text}" if out else text
    return out


def shown(value) -> str:
    """A value of a record as a message quotes it: its repr, cut short."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
