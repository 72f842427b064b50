"""A page opened in headless Chromium over the DevTools protocol, as a reader's browser opens it.

plotly draws its figures in JavaScript, so what a reader sees (axis titles, rendered tables) is only
in the DOM after the scripts ran; the protocol also reports every request the page makes, which is
how "opens offline" is checked. websocket-client (a dependency of the kubernetes client) speaks the
protocol's websocket.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import websocket

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


class Page:
    """One tab of a private headless Chromium; use as a context manager."""

    def __init__(self, width: int = 1280, height: int = 900, timeout_s: float = 60):
        self.width, self.height, self.timeout_s = width, height, timeout_s
        self.requests: list[str] = []
        self._ids = itertools.count(1)

    def __enter__(self) -> Page:
        self._profile = tempfile.TemporaryDirectory(prefix="chromium-")
        self._proc = subprocess.Popen(
            [
                CHROMIUM,
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--remote-debugging-port=0",
                f"--user-data-dir={self._profile.name}",
                f"--window-size={self.width},{self.height}",
                "--hide-scrollbars",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its own process group: the helpers it starts end with it
        )
        port = self._devtools_port()
        deadline = time.monotonic() + self.timeout_s
        while True:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list") as r:
                pages = [t for t in json.load(r) if t["type"] == "page"]
            if pages or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        self._ws = websocket.create_connection(
            pages[0]["webSocketDebuggerUrl"], timeout=self.timeout_s, suppress_origin=True
        )
        self.call("Network.enable")
        self.call("Page.enable")
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=self.width,
            height=self.height,
            deviceScaleFactor=1,
            mobile=False,
        )
        return self

    def __exit__(self, *exc) -> None:
        self._ws.close()
        self._proc.terminate()
        self._proc.wait(timeout=20)
        # Chromium's helper processes outlive the browser for a moment and still write into the profile
        # (a removal then fails with "Directory not empty"): end the whole group before removing it
        deadline = time.monotonic() + 20
        with contextlib.suppress(ProcessLookupError):
            while time.monotonic() < deadline:
                os.killpg(self._proc.pid, signal.SIGKILL)
                time.sleep(0.05)
        self._profile.cleanup()

    def _devtools_port(self) -> int:
        for line in self._proc.stderr:  # "DevTools listening on ws://127.0.0.1:PORT/devtools/browser/..."
            if "DevTools listening on" in line:
                return int(line.split("ws://127.0.0.1:")[1].split("/")[0])
        raise RuntimeError(f"{CHROMIUM} exited before it listened for DevTools")

    def call(self, method: str, **params) -> dict:
        """Send one command; return its result (recording the page's requests seen meanwhile)."""
        ident = next(self._ids)
        self._ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            msg = json.loads(self._ws.recv())
            self._note(msg)
            if msg.get("id") == ident:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]

    def _note(self, msg: dict) -> None:
        if msg.get("method") == "Network.requestWillBeSent":
            self.requests.append(msg["params"]["request"]["url"])
        self._loaded = self._loaded or msg.get("method") == "Page.loadEventFired"

    _loaded = False

    def open(self, path: Path) -> None:
        """Load a file and wait for its load event and for every plotly figure to be drawn."""
        self._loaded = False
        self.call("Page.navigate", url=Path(path).resolve().as_uri())
        deadline = time.monotonic() + self.timeout_s
        while not self._loaded:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{path}: no load event in {self.timeout_s} s")
            self._note(json.loads(self._ws.recv()))
        while not self.evaluate(
            "[...document.querySelectorAll('.plotly-graph-div')].every(d => d.querySelector('.main-svg'))"
        ):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{path}: plotly figures not drawn in {self.timeout_s} s")
            time.sleep(0.2)

    def evaluate(self, expression: str):
        """The JSON value of a JavaScript expression in the page."""
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression[:80]}: {r['exceptionDetails'].get('exception', {}).get('description')}")
        return r["result"].get("value")

    def screenshot(self, path: Path, clip: dict | None = None) -> Path:
        """The first screen (the viewport at the top of the page) as a PNG; with ``clip`` ({x, y, width,
        height} in CSS px of the page), that part of the page, wherever it is."""
        self.evaluate("window.scrollTo(0, 0)")
        area = {"clip": {**clip, "scale": 1}, "captureBeyondViewport": True} if clip else {}
        data = self.call("Page.captureScreenshot", format="png", **area)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path

    def whole_page(self, path: Path) -> Path:
        """The whole page, top to bottom, as a PNG."""
        size = self.call("Page.getLayoutMetrics")["cssContentSize"]
        return self.screenshot(path, {"x": 0, "y": 0, "width": size["width"], "height": size["height"]})
