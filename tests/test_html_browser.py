"""The HTML report of a real demo run, opened in headless Chromium (Debian's, no download).

Talks W3C WebDriver to Debian's chromedriver over HTTP with the standard library:
the page must load without console errors, and its plots must hold one mark per
config and round (strip plots) and one per decided config (forest plot).
Screenshots at 1400 px and 400 px are kept under the test's tmp folder (CI
keeps them as artifacts).
"""

from __future__ import annotations

import base64
import json
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import run_abdiff, write_suite

from abdiff.demo import build_demo_repo

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
# The network here is closed: nothing may try to reach it, or wait for it.
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not (CHROMIUM.exists() and CHROMEDRIVER.exists()),
                       reason="needs Debian's chromium and chromium-driver"),
]


class Browser:
    """One headless Chromium session driven through chromedriver's W3C endpoints."""

    def __init__(self, profile: Path) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.base = f"http://127.0.0.1:{port}"
        self.driver = subprocess.Popen([str(CHROMEDRIVER), f"--port={port}"],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                self._call("GET", "/status")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        options = {"binary": str(CHROMIUM), "args": [*CHROMIUM_FLAGS, f"--user-data-dir={profile}"]}
        session = self._call("POST", "/session", {"capabilities": {"alwaysMatch": {
            "browserName": "chrome", "goog:chromeOptions": options,
            "goog:loggingPrefs": {"browser": "ALL"}}}})
        self.session = f"/session/{session['sessionId']}"

    def _call(self, method: str, path: str, body: dict | None = None) -> object:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as answer:
            return json.loads(answer.read())["value"]

    def viewport(self, width: int, height: int) -> None:
        """The page's viewport in CSS pixels, a phone's (touch, no scrollbars) below 700."""
        self._call("POST", f"{self.session}/goog/cdp/execute", {
            "cmd": "Emulation.setDeviceMetricsOverride",
            "params": {"width": width, "height": height, "deviceScaleFactor": 1,
                       "mobile": width < 700}})

    def open(self, url: str, width: int, height: int) -> None:
        self.viewport(width, height)
        self._call("POST", f"{self.session}/url", {"url": url})

    def run(self, script: str) -> object:
        return self._call("POST", f"{self.session}/execute/sync", {"script": script, "args": []})

    def console(self) -> list[dict]:
        return self._call("POST", f"{self.session}/se/log", {"type": "browser"})  # type: ignore

    def screenshot(self, path: Path, width: int, height: int | None = None) -> None:
        """The page at `width` CSS pixels, its top `height` pixels (default: all of it)."""
        self.viewport(width, height or int(self.run(
            "return document.documentElement.scrollHeight")))  # type: ignore[arg-type]
        path.write_bytes(base64.b64decode(self._call("GET", f"{self.session}/screenshot")))

    def close(self) -> None:
        try:
            self._call("DELETE", self.session)
        finally:
            self.driver.terminate()
            self.driver.wait(timeout=30)


@pytest.fixture(scope="module")
def demo_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """`abdiff main..pr-v1` on the demo, 4 configs, 3 rounds: its HTML and JSON result."""
    work = tmp_path_factory.mktemp("browser")
    repo = work / "demo"
    build_demo_repo(repo)
    suite = write_suite(work / "suite.yaml", [8], backends=("DSA", "TRTLLM"), seq_len_q=(1, 4))
    done = run_abdiff("main..pr-v1", "--configs", suite, "--repo", repo, "--cache-dir",
                      work / "cache", "--rounds", 3, "--max-rounds", 3, "--prestart", "on",
                      "--expect", "backend=DSA", "--html", work / "report.html", "--json",
                      work / "result.json")
    assert done.returncode == 1, done.stderr  # TRTLLM q4 changed: the story's exit code
    return work / "report.html", json.loads((work / "result.json").read_text())


@pytest.fixture
def browser(tmp_path: Path) -> Browser:
    session = Browser(tmp_path / "profile")
    yield session
    session.close()


def test_report_in_headless_chromium(demo_report: tuple[Path, dict], browser: Browser,
                                     tmp_path: Path) -> None:
    page, result = demo_report
    browser.open(page.as_uri(), 1400, 900)
    assert browser.run("return document.readyState") == "complete"
    assert [e for e in browser.console() if e["level"] in ("SEVERE", "WARNING")] == []
    marks = browser.run("""
        const out = {};
        for (const card of document.querySelectorAll('details.card')) {
          out[card.querySelector('summary .id').textContent] =
            card.querySelectorAll('svg.rounds circle.round-mark').length;
        }
        return out;""")
    expected = {c["id"]: len(c["latency"]["a_rounds_us"]) + len(c["latency"]["b_rounds_us"])
                for c in result["configs"]}
    assert marks == expected
    for config in result["configs"]:  # a config that ran on both sides: a mark per round
        if config["status_a"] == config["status_b"] == "ok":
            assert marks[config["id"]] == 6, config["id"]
    decided = [c for c in result["configs"]
               if c["latency"]["verdict"] in ("slower", "faster", "unchanged")]
    assert browser.run("return document.querySelectorAll('circle.ratio-mark').length") == \
        len(decided)
    # "; latency undecided for N of M configs" follows when most latencies were undecided
    assert browser.run("return document.querySelector('h1').textContent").startswith(
        "abdiff: 1 unintended change")
    wide = browser.run("return document.documentElement.scrollWidth")
    browser.screenshot(tmp_path / "report-1400.png", 1400)
    browser.open(page.as_uri(), 400, 800)
    # readable on a phone: nothing wider than the screen but what scrolls on its own
    assert browser.run("return document.documentElement.scrollWidth") <= 400 < wide
    browser.screenshot(tmp_path / "report-400.png", 400)
    for name in ("report-1400.png", "report-400.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    print(f"screenshots: {tmp_path}")
    shutil.copy(page, tmp_path / "report.html")  # next to its screenshots for CI artifacts
