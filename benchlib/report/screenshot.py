"""A page's first screen as a PNG, as a reader's browser shows it: headless Chromium, after the
page's scripts (plotly) have run.

Chromium's own --screenshot mode is enough for one picture of the top of a page: the window size is
the screen, and a virtual time budget lets the scripts draw before the picture is taken.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from ..base.errors import BenchlibError

WIDTH, HEIGHT = 1400, 900  # a laptop's browser window: what a reader sees before scrolling
SCRIPT_BUDGET_MS = 20_000  # virtual time the page's scripts get before the picture (plotly draws in well under)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class ScreenshotError(BenchlibError, RuntimeError):
    """Chromium is missing, or took no picture of the page."""


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if not found:
        raise ScreenshotError(
            "no Chromium on PATH (chromium, chromium-browser or google-chrome): apt-get install chromium"
        )
    return found


def first_screen(page: Path, width: int = WIDTH, height: int = HEIGHT, timeout_s: float = 180) -> bytes:
    """The top ``width`` x ``height`` pixels of ``page`` (an HTML file), as PNG bytes."""
    with tempfile.TemporaryDirectory(prefix="benchlib-chromium-") as tmp:
        shot = Path(tmp) / "shot.png"
        argv = [
            chromium(),
            "--headless=new",
            "--no-sandbox",  # as root (a fresh machine's reproduce.sh) Chromium refuses to start with its sandbox
            "--disable-gpu",
            "--no-first-run",
            "--hide-scrollbars",
            "--force-device-scale-factor=1",
            f"--user-data-dir={tmp}/profile",  # never the user's own profile
            f"--window-size={width},{height}",
            f"--virtual-time-budget={SCRIPT_BUDGET_MS}",
            f"--screenshot={shot}",
            page.resolve().as_uri(),
        ]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise ScreenshotError(f"{page}: Chromium took no screenshot in {timeout_s:g} s") from None
        if not shot.is_file() or not shot.read_bytes().startswith(PNG_MAGIC):
            said = [line for line in (proc.stderr or "").splitlines() if line.strip()]
            raise ScreenshotError(
                f"{page}: Chromium took no screenshot (exit {proc.returncode}"
                + (f": {said[-1].strip()[:200]}" if said else "")
                + ")"
            )
        return shot.read_bytes()
