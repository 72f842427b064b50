"""Are a campaign's raw records whole and as DVC committed them? Each problem names its record. And a
campaign's records as another git revision had them, fetched through DVC (`campaign_records`).

A record's SHA256SUMS is the record's own word: rewrite a file and its SHA256SUMS with it and the
record still agrees with itself. So the records are checked first against what DVC committed of
them: each stage output below data/raw/<campaign> (dvc.lock, or a .dvc file) has a `.dir` listing
in DVC's cache, every file's md5 as `dvc repro` or `dvc commit` recorded it (fetched from the remote
if the cache lacks it). A file whose bytes differ from it, a record that is not in it (added by hand)
and a record or file of it that is missing are named. An environment DVC has never committed is
checked against SHA256SUMS only, and said so.

`dvc pull` without the remote's `verify` option trusts the remote: a corrupted object comes back
as a record file with other bytes, silently. With `verify true` DVC refuses it, but its error
names only the stage output (data/raw/<campaign>/<env>), not the record. This check names the
record and file in both cases.
"""

from __future__ import annotations

import io
import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from ..base.errors import RecordError
from ..settings.names import require_name
from . import layout, record, survey


@dataclass(frozen=True)
class Output:
    """A DVC output holding records of the campaign, as DVC committed it."""

    path: str  # as DVC names it, relative to the project
    within: str  # the part of the campaign directory it holds ('' for all of it)
    hash_name: str  # DVC's hash of each file ('md5'; 'md5-dos2unix' for what DVC 2 committed)
    files: dict[str, str] | None  # path below the campaign directory -> md5; None: never committed
    cache_dir: str  # DVC's cache of file objects (<cache>/files/md5), for its layout xx/yyyy


def dvc_outputs(root: Path, campaign: str) -> tuple[list[Output], str | None]:
    """The DVC outputs of the project at ``root`` that hold records of ``campaign`` (an output of the
    campaign's directory, of one below it or above it), and a problem or None. No DVC repository: none."""
    from dvc.exceptions import NotDvcRepoError  # imported here: dvc is slow to import and most commands need none of it
    from dvc.repo import Repo

    cdir = os.path.realpath(layout.campaign_dir(campaign, root / "data" / "raw"))
    top = f"data/raw/{campaign}"
    outputs = []
    try:
        with Repo(str(root)) as repo:
            for out in repo.index.outs:
                where = os.path.realpath(out.fs_path)
                within = os.path.relpath(where, cdir) if where.startswith(cdir + os.sep) else ""
                if not within and not (cdir == where or cdir.startswith(where + os.sep)):
                    continue
                outputs.append(_output(out, cdir, within, repo.cache.local.path))
    except NotDvcRepoError:
        return [], None
    except RecordError as exc:
        return outputs, str(exc)
    except Exception as exc:  # noqa: BLE001 (dvc raises many kinds: dvc.yaml, the lock, the cache, the remote)
        return outputs, f"{top}: DVC cannot list what it tracks there: {' '.join(str(exc).split())}"
    return outputs, None


def _output(out, cdir: str, within: str, cache_dir: str) -> Output:
    path = os.path.relpath(out.fs_path, out.repo.root_dir)
    if not out.hash_info or not out.hash_info.value:
        return Output(path, within, out.hash_name, None, cache_dir)
    if not out.hash_info.isdir:
        files = {os.path.relpath(os.path.realpath(out.fs_path), cdir): out.hash_info.value}
    else:
        tree = out.get_dir_cache()  # the .dir listing, pulled from the remote if the cache lacks it
        if tree is None:
            raise RecordError(
                f"{path}: DVC's listing of it ({out.hash_info.value}) is in neither the DVC cache nor a "
                f"remote: cannot check its records against what DVC committed (`dvc fetch {out.stage.addressing}`)"
            )
        # the campaign's files only: an output above the campaign directory holds other campaigns too
        base = os.path.realpath(out.fs_path)
        prefix = within + os.sep if within else ""
        skip = () if within else tuple(os.path.relpath(cdir, base).split(os.sep)) if cdir != base else ()
        files = {
            prefix + os.sep.join(key[len(skip) :]): hash_info.value
            for key, _, hash_info in tree
            if key[: len(skip)] == skip
        }
    return Output(path, within, out.hash_name, files, cache_dir)


def _workspace_files(top: Path) -> list[Path]:
    """Every regular file below ``top``, hidden ones included (DVC commits those too), links and
    special files left out (`layout.foreign` names them)."""
    found, todo = [], [top]
    while todo:
        path = todo.pop()
        try:
            with os.scandir(path) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        todo.append(Path(entry.path))
                    elif entry.is_file(follow_symlinks=False):
                        found.append(Path(entry.path))
        except (FileNotFoundError, NotADirectoryError):
            continue
    return found


def _dvc_hash(data: bytes, name: str) -> str:
    from dvc_data.hashfile.hash import fobj_md5  # DVC's own hash (md5-dos2unix: DVC 2's, text files without CR)

    return fobj_md5(io.BytesIO(data), name=name)


def _record_of(name: str) -> tuple[str, str]:
    """(record directory, file in it) of a path below the campaign directory; a path not in a record
    (fewer than five parts) is its own record, with no file."""
    parts = name.split(os.sep)
    return ("/".join(parts[:4]), "/".join(parts[4:])) if len(parts) > 4 else (name, "")


def _listed(record_dir: Path, names: list[str]) -> str:
    return f"{record_dir}: {', '.join(names)}" if names[0] else str(record_dir)


def against_dvc(cdir: Path, out: Output) -> list[str]:
    """What of the workspace differs from what DVC committed of ``out``, by record: files with other
    bytes, records and files DVC does not know, records and files missing."""
    assert out.files is not None
    here = {}  # path below the campaign directory -> DVC's hash of its bytes now
    problems = []
    start = len(str(cdir)) + 1
    for path in _workspace_files(cdir / out.within):
        name = str(path)[start:]
        try:
            here[name] = _dvc_hash(layout.read_file(str(path.parent), path.name), out.hash_name)
        except RecordError as exc:  # taken by a link or a FIFO since the walk
            problems.append(str(exc))
        except OSError as exc:
            problems.append(f"{path}: unreadable: {exc.strerror}")
    changed, unknown, missing = defaultdict(list), defaultdict(list), defaultdict(list)
    for name, md5 in here.items():
        rec, file = _record_of(name)
        if name not in out.files:
            unknown[rec].append(file)
        elif md5 != out.files[name]:
            changed[rec].append(file)
    for name in out.files.keys() - here.keys():
        rec, file = _record_of(name)
        missing[rec].append(file)
    known = {_record_of(name)[0] for name in out.files}
    present = {_record_of(name)[0] for name in here}
    for rec, files in sorted(changed.items()):
        problems.append(
            f"{_listed(cdir / rec, sorted(files))}: not as DVC committed {out.path} "
            "(changed since `dvc repro` or `dvc commit` recorded it; `dvc checkout` restores it)"
        )
    for rec, files in sorted(unknown.items()):
        if rec in known:
            problems.append(f"{_listed(cdir / rec, sorted(files))}: not in what DVC committed of {out.path}")
        else:
            problems.append(
                f"{cdir / rec}: a record DVC does not track: not in what it committed of {out.path} "
                "(added by hand? `dvc commit` only what `benchlib collect` measured)"
            )
    gone = not os.path.lexists(cdir / out.within)
    fetched = 0
    for rec, files in sorted(missing.items()):
        if _behind_a_link(cdir, rec):
            continue  # `layout.foreign` names the link; what DVC tracks there is not looked at through it
        files.sort()
        lost = [f for f in files if not os.path.isfile(_object(out, out.files[_join(rec, f)]))]
        for file in lost:
            problems.append(
                f"{_listed(cdir / rec, [file])}: missing, and its object {out.files[_join(rec, file)]} is not in "
                "the cache (lost or corrupt in the remote, or not pulled yet)"
            )
        kept = len(files) - len(lost)
        if gone:  # nothing of the output was checked out (a failed pull): counted, not listed
            fetched += kept
        elif kept == len(files) and rec not in present:
            problems.append(
                f"{cdir / rec}: missing, though DVC tracks it in {out.path} (`dvc checkout` restores it "
                "from the DVC cache)"
            )
        elif kept:
            problems.append(
                f"{_listed(cdir / rec, [f for f in files if f not in lost])}: missing, though DVC tracks "
                f"them in {out.path} (`dvc checkout` restores them from the DVC cache)"
            )
    if fetched:
        problems.append(
            f"{fetched} more file(s) are in the cache but not in the workspace ({out.path}): DVC checks out "
            "an output whole; once the files above are back, `dvc checkout` restores them"
        )
    return problems


def _behind_a_link(cdir: Path, rel: str) -> bool:
    """Whether the campaign directory, or a directory on the way to ``rel`` below it (``rel`` itself
    included), is a link."""
    path = cdir
    for part in [""] + (rel.split(os.sep) if rel else []):
        path = path / part
        if os.path.islink(path):
            return True
    return False


def _join(rec: str, file: str) -> str:
    return f"{rec}/{file}" if file else rec


def _object(out: Output, md5: str) -> str:
    return os.path.join(out.cache_dir, md5[:2], md5[2:])


@dataclass(frozen=True)
class Verified:
    records: int  # record directories checked
    problems: list[str]
    notes: list[str]  # what was checked against SHA256SUMS only, and why
    against_dvc: bool  # whether some of it was checked against what DVC committed


def verify_campaign(root: Path, campaign: str) -> Verified:
    """The records of a campaign under data/raw: links and special files, what DVC committed of
    them, then each record's SHA256SUMS."""
    cdir = layout.campaign_dir(campaign, root / "data" / "raw")
    problems = layout.foreign(cdir)
    outputs, problem = dvc_outputs(root, campaign)
    problems += [problem] if problem else []
    committed = [out for out in outputs if out.files is not None]
    for out in committed:
        if not _behind_a_link(cdir, out.within):  # else `layout.foreign` names the link, and nothing is read through it
            problems += against_dvc(cdir, out)
    records, found = survey.survey(cdir, None)
    problems += found
    for path in records:
        try:
            record.load(path)  # its checksums, then every field against the schema
        except RecordError as exc:
            problems.append(str(exc))
    notes = _untracked(cdir, campaign, committed) if not problem else []
    if not records and not problems:
        problems.append(f"{cdir}: no records (not collected here, or not pulled: `dvc pull`)")
    return Verified(len(records), list(dict.fromkeys(problems)), notes, bool(committed))


def _untracked(cdir: Path, campaign: str, committed: list[Output]) -> list[str]:
    """One line for the campaign if DVC has committed none of it, else one for each environment
    directory it has not: those are checked against their SHA256SUMS only."""
    fallback = "its records are checked against their own SHA256SUMS only"
    if not committed:
        return [
            f"data/raw/{campaign}: not tracked by DVC (never committed: no output of dvc.lock or a .dvc file): {fallback}"
        ]
    if any(not out.within for out in committed):
        return []
    covered = {out.within.split(os.sep)[0] for out in committed}
    try:
        envs = sorted(
            e.name for e in os.scandir(cdir) if e.is_dir(follow_symlinks=False) and not e.name.startswith(".")
        )
    except (FileNotFoundError, NotADirectoryError):
        envs = []
    return [
        f"data/raw/{campaign}/{env}: not tracked by DVC (never committed: no output of dvc.lock or a .dvc file): {fallback}"
        for env in envs
        if env not in covered
    ]


def campaign_records(spec: str, root: Path) -> Path:
    """The directory of campaign ``spec``'s records: an id under ``root``/data/raw, or REV:ID, the campaign
    as git revision REV of the project had it (`_from_revision`). Refused, naming ``spec``, where it holds
    no records, or what `parse` would name regardless of a plan (an incomplete record, a copy, a file where
    a record should be): no plan to check another campaign against, but those are refused, not skipped."""
    rev, _, name = spec.rpartition(":")
    require_name(name, f"campaign {spec!r}")
    raw_root = _from_revision(root, rev, name) if rev else root / "data" / "raw"
    cdir = layout.campaign_dir(name, raw_root)
    if not cdir.is_dir():
        known = sorted(p.name for p in raw_root.iterdir() if p.is_dir()) if raw_root.is_dir() else []
        raise RecordError(f"campaign {spec}: no raw records in {cdir} (campaigns there: {', '.join(known) or 'none'})")
    problems = survey.survey(cdir, None)[1]
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise RecordError(f"campaign {spec}: {problems[0]}{more}")
    return cdir


def _from_revision(root: Path, rev: str, name: str) -> Path:
    """A raw root holding campaign ``name`` as git revision ``rev`` of the project at ``root`` had it, fetched
    through DVC (its cache or remote) into a temporary directory that lives as long as this process."""
    import atexit
    import shutil
    import tempfile

    from dvc.api import DVCFileSystem
    from dvc.exceptions import DvcException
    from dvc_data.index import DataIndexError
    from scmrepo.exceptions import SCMError

    tmp = Path(tempfile.mkdtemp(prefix="benchlib-compare-"))
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    try:
        fs = DVCFileSystem(str(root), rev=rev)
        src = f"data/raw/{name}"
        if not fs.isdir(src):
            raise RecordError(f"campaign {rev}:{name}: revision {rev} has no {src}")
        try:
            fs.get(src, str(tmp / name), recursive=True)
        except (DataIndexError, FileNotFoundError):  # a .dir manifest or a file in neither cache nor remote
            raise RecordError(f"campaign {rev}:{name}: {src} of revision {rev} {_not_fetched(root)}") from None
        tracked = [os.path.relpath(out.fs_path, fs.repo.root_dir) for out in fs.repo.index.outs]
    except (DvcException, SCMError, DataIndexError) as exc:
        raise RecordError(f"campaign {rev}:{name}: {type(exc).__name__}: {' '.join(str(exc).split())}") from None
    if not any(p == src or p.startswith(src + "/") or src.startswith(p + "/") for p in tracked):
        # git has the directory (DVC's .gitignore in it), but that revision's dvc.lock tracks another campaign
        raise RecordError(
            f"campaign {rev}:{name}: revision {rev} has {src} but DVC tracks no records there (its dvc.lock "
            f"and .dvc files track {', '.join(p for p in tracked if p.startswith('data/raw/')) or 'no raw records'}): "
            "give the revision that measured it (`git log -- dvc.lock`)"
        )
    return tmp


def _not_fetched(root: Path) -> str:
    """Where the records of a revision were looked for, and how to fetch them (one line): the remotes
    of the project's DVC config, as `dvc pull` would use them."""
    from dvc.repo import Repo

    try:
        with Repo(str(root)) as repo:
            names, default = sorted(repo.config.get("remote", {})), repo.config.get("core", {}).get("remote")
    except Exception:  # only the hint depends on it: a config DVC cannot read names no remote
        names, default = [], None
    if not names:
        return (
            "is not in the DVC cache and no DVC remote is configured: add the remote it was pushed to "
            "(`dvc remote add -d NAME URL`), then `dvc fetch --all-commits` (or `dvc pull` on that revision)"
        )
    if default:
        return (
            f"is in neither the DVC cache nor the default remote {default!r}: `dvc push` it where it was "
            "measured, or fetch it from the remote that has it (`dvc fetch -r NAME --all-commits`)"
        )
    return (
        f"is not in the DVC cache and no default remote is set (remotes: {', '.join(names)}): "
        "`dvc fetch -r NAME --all-commits` (or `dvc pull -r NAME` on that revision)"
    )
