"""Are a campaign's raw records whole after `dvc pull`? Each problem names the record it belongs to.

`dvc pull` without the remote's `verify` option trusts the remote: a corrupted object comes back
as a record file with other bytes, silently. With `verify true` DVC refuses it, but its error
names only the stage output (data/raw/<campaign>/<env>), not the record. This check reads DVC's
listing of each output (dvc.lock and the output's `.dir` object, from the cache or the remote) to
name the record and file whose object is missing, then checks every record present against its
SHA256SUMS.
"""

from __future__ import annotations

from pathlib import Path

from . import record
from .errors import RecordError


def dvc_listing(root: Path, campaign: str) -> tuple[dict[str, tuple[str, bool]], str | None]:
    """({path under root: (md5, whether its object is in the cache)} of every file DVC tracks under
    data/raw/<campaign>, as dvc.lock and the outputs' listings say (fetched from the remote if the
    cache lacks them), problem or None)."""
    from dvc.api import DVCFileSystem  # imported here: dvc is slow to import and most commands need none of it

    top = f"data/raw/{campaign}"
    try:
        fs = DVCFileSystem(str(root))
        if not fs.exists(top):
            return {}, None
        found: dict[str, dict] = fs.find(top, detail=True)  # pyright: ignore[reportAssignmentType] (fsspec's find gives a dict with detail=True; typed as a list)
        cache = fs.repo.cache.local  # dvc's own idea of where its cache is (cache.dir may be configured)
    except Exception as exc:  # noqa: BLE001 (dvc raises many kinds: the remote, the lock, the cache)
        return {}, f"{top}: DVC cannot list what it tracks there: {exc}"
    return {
        path: (info["md5"], Path(cache.oid_to_path(info["md5"])).is_file())
        for path, info in found.items()
        if info.get("md5")
    }, None  # only tracked files have one


def listing_problems(root: Path, listing: dict[str, tuple[str, bool]]) -> list[str]:
    """What of DVC's listing is missing from the workspace, by record and file. DVC checks out
    an output whole, so files whose objects did arrive are counted, not listed."""
    problems, fetched = [], 0
    for name, (md5, cached) in sorted(listing.items()):
        path = root / name
        if path.is_file():
            continue  # its bytes are the record's SHA256SUMS' to judge (DVC lists a present file's own hash)
        if cached:
            fetched += 1
        else:
            problems.append(
                f"{path.parent.relative_to(root)}: {path.name}: missing, and its object {md5} is not "
                "in the cache (lost or corrupt in the remote, or not pulled yet)"
            )
    if fetched:
        problems.append(
            f"{fetched} more file(s) are in the cache but not in the workspace: DVC checks out an "
            "output whole; once the files above are back, `dvc checkout` restores them"
        )
    return problems


def verify_campaign(root: Path, campaign: str) -> tuple[int, list[str]]:
    """(records verified, problems) of a campaign under data/raw: DVC's listings, then SHA256SUMS."""
    cdir = record.campaign_dir(campaign, root / "data" / "raw")
    problems = []
    listing, problem = dvc_listing(root, campaign)
    problems += [problem] if problem else listing_problems(root, listing)
    records = record.find(cdir) if cdir.is_dir() else []
    for path in records:
        try:
            record.verify(path)
        except RecordError as exc:
            problems.append(str(exc))
    if not records and not problems:
        problems.append(f"{cdir}: no records (not collected here, or not pulled: `dvc pull`)")
    return len(records), problems
