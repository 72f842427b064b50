"""The caps on what benchlib reads from users and from records, in one place.

Anything beyond a cap is refused in one line naming the file (or record) and the cap, before it is held
whole: a params path that never ends (/dev/zero, a FIFO), a gzip that unpacks to gigabytes, a stack ten
thousand frames deep, a sample count no machine can take, a JSON document nested so deep that reading it
would exhaust Python's stack. Each cap is far above what real campaigns write.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import stat
from pathlib import Path

import orjson

MIB = 1024 * 1024
# params.yaml, an environment definition, report parameters: real ones are a few KiB
CONFIG_BYTES = 4 * MIB
# one file of a raw record (meta.json, cpu.json, SHA256SUMS, a tool's output, the gzipped profile): the
# largest real ones are a fortio JSON with its histogram and a profile of a long run, a few MiB
RECORD_FILE_BYTES = 256 * MIB
# a JSON file the analysis or compare wrote and reads back (settings, result.json): a few KiB
ANALYSIS_FILE_BYTES = 64 * MIB
# a profile's folded stacks unpacked: a real profile is ~1 MiB of perf script text and far less folded
PROFILE_BYTES = 256 * MIB
# frames of one stack: perf keeps at most kernel.perf_event_max_stack frames of a sample (127 by default;
# real kernel stacks are under 200 frames), so 1024 leaves room for a raised sysctl and user-space frames
STACK_DEPTH = 1024
# samples of one profile: 10 kHz on 1000 CPUs for a day is under 10^12; also keeps sums within int64
PROFILE_SAMPLES = 10**12
# nesting of a JSON document benchlib reads back (a record's meta.json and cpu.json, an analysis' settings):
# real ones are under 10 deep; far below Python's recursion limit, so that neither json's parser nor
# anything that walks the document (the schema, the facts' flattening) can run out of stack
JSON_DEPTH = 64


def size_text(n: int) -> str:
    return f"{n // MIB} MiB" if n >= MIB else f"{n} bytes"


def read_file(path: str | os.PathLike, cap: int, error: type[Exception]) -> bytes:
    """A regular file's bytes, at most ``cap`` of them; ``error`` (naming the file and the cap) for a
    device, FIFO or socket (which may never end) or a larger file. FileNotFoundError passes through."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO without a writer must not block the open
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{path}: not a regular file (a device, FIFO or socket); benchlib reads files only")
        data = read_capped(fd, st.st_size, cap)
    finally:
        os.close(fd)
    if len(data) > cap:
        raise error(f"{path}: larger than {size_text(cap)}, the cap on such a file")
    return data


def read_capped(fd: int, size: int, cap: int) -> bytes:
    """At most ``cap`` + 1 bytes of the open regular file ``fd`` of ``size`` bytes (its fstat): all it
    holds, one more telling a file beyond the cap. Reads ask for the size, not the cap: a file object's
    read of ``cap`` + 1 bytes allocates them first (256 MiB for each of a record's small files: about a
    sixth of a parse's CPU time), and its buffer and wrapper cost more than the read of a small file."""
    parts, total = [], 0
    while total <= cap:
        part = os.read(fd, min(max(size + 1 - total, io.DEFAULT_BUFFER_SIZE), cap + 1 - total))
        if not part:
            break
        parts.append(part)
        total += len(part)
    return b"".join(parts)


def read_text(path: str | os.PathLike, cap: int, error: type[Exception]) -> str:
    """read_file, decoded as UTF-8 (UnicodeDecodeError passes through)."""
    return read_file(path, cap, error).decode("utf-8")


def gunzip(data: bytes, cap: int, name: str | Path, error: type[Exception]) -> bytes:
    """A gzip's contents, unpacked as a stream and refused (``error`` naming ``name`` and the cap) as soon
    as they pass ``cap``: a small gzip can unpack to gigabytes."""
    with gzip.GzipFile(fileobj=io.BytesIO(data)) as f:
        out = f.read(cap + 1)
    if len(out) > cap:
        raise error(f"{name}: unpacks to more than {size_text(cap)}, the cap on it")
    return out


# 20 digits in a row (each digit mapped to 0 first: ten times faster than a regular expression) may be
# an integer beyond 64 bits, which orjson reads as a float and json exactly
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_NUMBER = b"0" * 20
_NOT_BRACKETS = bytes(sorted(set(range(256)) - set(b"[]{}")))
TOO_DEEP = f"nested deeper than {JSON_DEPTH} levels, the cap on a JSON document benchlib reads"


def parse_json(data: bytes | str):
    """A JSON document benchlib wrote and reads back, as json.loads reads it, by orjson where it reads
    the same (meta.json and cpu.json by json were about a tenth of a parse's CPU time): what orjson
    refuses (NaN and Infinity, which json.dumps writes, other encodings than UTF-8) or reads otherwise
    (integers beyond 64 bits) goes to json, and so do errors, named in its words. A document nested
    deeper than JSON_DEPTH is a ValueError before either parser recurses into it."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if _too_deep(raw):
        raise ValueError(TOO_DEEP)
    if _LONG_NUMBER not in raw.translate(_DIGITS_AS_ZERO):
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
    try:
        return json.loads(data)
    except RecursionError:  # not JSON at all, so the scan could not measure it: json's own words are lost
        raise ValueError(TOO_DEEP) from None


def _too_deep(raw: bytes) -> bool:
    """Whether the JSON document ``raw`` nests arrays and objects deeper than JSON_DEPTH, told by byte
    operations only (no parser, no loop over characters): exact for a valid document; for one that is
    not, the parser says what is wrong."""
    if raw.count(b"[") + raw.count(b"{") <= JSON_DEPTH:  # the usual case: too few brackets to nest that deep
        return False
    encoding = json.detect_encoding(raw)
    if encoding not in ("utf-8", "utf-8-sig"):
        raw = raw.decode(encoding, "surrogatepass").encode("utf-8", "surrogatepass")
    # escaped backslashes, then escaped quotes, out: every quote left opens or closes a string, and the
    # text between the strings holds the structure
    outside = b"".join(raw.replace(b"\\\\", b"").replace(b'\\"', b"").split(b'"')[::2])
    brackets = outside.translate(None, _NOT_BRACKETS)
    for _ in range(JSON_DEPTH):  # each pass takes off the innermost level
        inner = brackets.replace(b"[]", b"").replace(b"{}", b"")
        if len(inner) == len(brackets):
            return False  # all taken apart, or not JSON
        brackets = inner
    return bool(brackets)
