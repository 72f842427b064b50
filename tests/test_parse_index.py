"""Incremental parse: records parsed before and unchanged are not read again, and the tables are the
ones a parse that reads every record writes (rows, order, values, schema and identity stamp)."""

import shutil
from pathlib import Path

import polars as pl
import pytest

from benchlib.records import integrity, layout
from benchlib.tables import parse_index, tidy
from benchlib.vocabulary import schema

# A real campaign's raw records, as `benchlib collect` wrote them (see test_tidy.REAL_CAMPAIGN).
REAL_CAMPAIGN = Path(__file__).resolve().parent / "fixtures" / "raw" / "local-cilium-demo-001"
N_RECORDS = 36


@pytest.fixture(params=[False, True], ids=["one-process", "worker-pool"])
def parallel(request, monkeypatch):
    if request.param:  # small chunks through the pool: reused and new records meet within and across chunks
        monkeypatch.setattr(tidy, "PARALLEL_MIN_RECORDS", 10)
        monkeypatch.setattr(tidy, "PARSE_CHUNK", 7)
        monkeypatch.setattr(tidy, "TASKS_AHEAD", 1)
    return request.param


@pytest.fixture
def campaign(tmp_path):
    dst = tmp_path / "raw" / REAL_CAMPAIGN.name
    shutil.copytree(REAL_CAMPAIGN, dst)
    return dst


def assert_same_tables(got: Path, expected: Path) -> None:
    """The tables (and index) in ``got`` are those in ``expected``: frames, schemas and parse identity."""
    for name in (*tidy.TABLES, "parse_index"):
        a, b = pl.read_parquet(got / f"{name}.parquet"), pl.read_parquet(expected / f"{name}.parquet")
        assert a.schema == b.schema, name
        assert a.equals(b), name
    for name in tidy.TABLES:
        assert schema.parse_identity(got / f"{name}.parquet") == schema.parse_identity(expected / f"{name}.parquet")
    assert pl.read_parquet_metadata(got / parse_index.INDEX) == pl.read_parquet_metadata(expected / parse_index.INDEX)


def full(campaign: Path, out: Path) -> tidy.Parsed:
    return tidy.parse_campaign(campaign, out)


def incremental(campaign: Path, out: Path, log=None) -> tidy.Parsed:
    return tidy.parse_campaign(campaign, out, incremental=True, log=log or (lambda m: pytest.fail(m)))


def test_a_record_added_is_the_only_one_read(campaign, tmp_path, parallel):
    held = layout.find(campaign)[17]
    aside = tmp_path / "aside"
    shutil.move(held, aside)
    out = tmp_path / "out"
    assert full(campaign, out).runs == N_RECORDS - 1
    shutil.move(aside, held)
    parsed = incremental(campaign, out)
    assert (parsed.read, parsed.reused, parsed.runs) == (1, N_RECORDS - 1, N_RECORDS)
    full(campaign, tmp_path / "full")
    assert_same_tables(out, tmp_path / "full")
    again = incremental(campaign, out)  # nothing new: nothing read, the same tables
    assert (again.read, again.reused) == (0, N_RECORDS)
    assert_same_tables(out, tmp_path / "full")


def _rewrite(rec: Path, name: str, old: str, new: str) -> None:
    """Change a record's file and its checksums, as a record measured otherwise would be."""
    path = rec / name
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    integrity.write_checksums(rec)


def test_a_changed_record_is_read_again(campaign, tmp_path, parallel):
    out = tmp_path / "out"
    full(campaign, out)
    before = schema.read_metrics(out / "metrics.parquet")
    rec = next(r for r in layout.find(campaign) if "tcp_stream" in str(r))
    _rewrite(rec, "stdout-0.txt", "THROUGHPUT=", "THROUGHPUT=1")
    parsed = incremental(campaign, out)
    assert (parsed.read, parsed.reused) == (1, N_RECORDS - 1)
    full(campaign, tmp_path / "full")
    assert_same_tables(out, tmp_path / "full")
    assert not schema.read_metrics(out / "metrics.parquet").equals(before)


def test_a_record_corrupted_since_is_verified_and_refused(campaign, tmp_path):
    out = tmp_path / "out"
    full(campaign, out)
    rec = layout.find(campaign)[3]
    (rec / "stdout-0.txt").write_text("garbage\n")
    with pytest.raises(tidy.RecordError, match=f"{rec}/stdout-0.txt: checksum mismatch"):
        incremental(campaign, out)
    messages = []
    parsed = tidy.parse_campaign(campaign, out, skip_corrupt=True, incremental=True, log=messages.append)
    assert (parsed.read, parsed.reused, parsed.runs) == (1, N_RECORDS - 1, N_RECORDS - 1)
    assert "skipped 1 corrupt record(s)" in messages[0]


def test_a_removed_record_leaves_the_tables(campaign, tmp_path, parallel):
    out = tmp_path / "out"
    full(campaign, out)
    gone = layout.find(campaign)[0]
    shutil.rmtree(gone)
    parsed = incremental(campaign, out)
    assert (parsed.read, parsed.reused, parsed.runs) == (0, N_RECORDS - 1, N_RECORDS - 1)
    full(campaign, tmp_path / "full")
    assert_same_tables(out, tmp_path / "full")
    assert str(gone) not in schema.read_runs(out / "runs.parquet")["record"].to_list()


@pytest.mark.parametrize(
    "spoil, why",
    [
        (lambda out: (out / parse_index.INDEX).write_bytes(b"not parquet"), "parse_index.parquet is unreadable"),
        (lambda out: (out / parse_index.INDEX).write_bytes(b""), "parse_index.parquet is unreadable"),
        (lambda out: (out / "metrics.parquet").unlink(), "metrics.parquet is missing"),
        (
            lambda out: shutil.copy(out / "runs.parquet", out / "profiles.parquet"),
            "profiles.parquet is not the profiles table",
        ),
    ],
    ids=["garbage", "empty", "a-table-removed", "a-table-replaced"],
)
def test_an_index_that_cannot_be_used_means_a_full_parse_said_so(campaign, tmp_path, spoil, why):
    out = tmp_path / "out"
    full(campaign, out)
    spoil(out)
    messages = []
    parsed = incremental(campaign, out, log=messages.append)
    assert (parsed.read, parsed.reused) == (N_RECORDS, 0)
    assert len(messages) == 1 and "parse: reading every record, not only the new ones" in messages[0]
    assert why in messages[0]
    full(campaign, tmp_path / "full")
    assert_same_tables(out, tmp_path / "full")


def test_an_index_of_another_benchlib_or_directory_is_not_used(campaign, tmp_path, monkeypatch):
    out = tmp_path / "out"
    full(campaign, out)
    monkeypatch.setattr(parse_index, "code_digest", lambda: "another benchlib")
    messages = []
    assert incremental(campaign, out, log=messages.append).reused == 0
    assert "written by another version of benchlib" in messages[0]
    moved = tmp_path / "elsewhere" / campaign.name
    shutil.copytree(campaign, moved)
    messages = []
    assert incremental(moved, out, log=messages.append).reused == 0  # the runs table names each record's path
    assert f"describes the records of {campaign}, not {moved}" in messages[0]


def test_a_full_parse_reads_every_record_and_writes_the_index(campaign, tmp_path):
    out = tmp_path / "out"
    full(campaign, out)
    parsed = full(campaign, out)
    assert (parsed.read, parsed.reused) == (N_RECORDS, 0)
    index = pl.read_parquet(out / parse_index.INDEX)
    runs = schema.read_runs(out / "runs.parquet")
    assert index["record"].to_list() == runs["record"].to_list()  # in run order, as the tables
    assert index["run_id"].to_list() == runs["run_id"].to_list()
    assert index["fingerprint"].to_list() == [integrity.fingerprint(p) for p in runs["record"]]


def test_a_fingerprint_changes_with_any_file_of_the_record(campaign):
    rec = layout.find(campaign)[0]
    before = integrity.fingerprint(str(rec))
    assert integrity.fingerprint(str(rec)) == before
    (rec / "extra.txt").write_text("x")
    added = integrity.fingerprint(str(rec))
    assert added != before
    (rec / "extra.txt").unlink()
    meta = rec / "meta.json"
    meta.write_bytes(meta.read_bytes())  # the same bytes, written again: mtime and ctime differ
    assert integrity.fingerprint(str(rec)) not in (before, added)
