"""The demo DAG's report as a reader sees it: opened in headless Chromium (Debian's ``chromium``), every image
loads and the console stays silent; and ``snakemake --report`` still builds with every figure.

Chromium is an optional system package: without it the browser test skips, saying why, unless
LNREPRO_REQUIRE_CHROMIUM=1 (CI: ``.ci/run`` installs it), where it fails, as LNREPRO_REQUIRE_SLURM does for SLURM.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from conftest import DEMO, REPO, DemoRun, snakemake
from lnrepro.analysis import FIGURES
from lnrepro.analysis.numbers import first_sentence
from lnrepro.studies import STUDIES

REQUIRE_CHROMIUM_ENV = "LNREPRO_REQUIRE_CHROMIUM"
PROBE = "/probe.html"  # index.html with the probe script: served beside it, so its relative links resolve alike
# Runs first in <head>: records every failed load (captured on window: img and link errors do not bubble) and
# every uncaught error, and at the load event (after every image) writes what it found as JSON into the page.
PROBE_SCRIPT = """<script>
const lnreproErrors = [];
addEventListener("error", e => lnreproErrors.push(e.target && e.target !== window
  ? "failed to load " + (e.target.src || e.target.href) : String(e.message)), true);
addEventListener("unhandledrejection", e => lnreproErrors.push("unhandled rejection: " + e.reason));
addEventListener("load", () => {
  const out = document.createElement("script");
  out.type = "application/json";
  out.id = "lnrepro-probe";
  out.textContent = JSON.stringify({
    images: [...document.images].map(i => ({src: i.getAttribute("src"), ok: i.complete && i.naturalWidth > 0})),
    // the page's landmarks in document order: the title, the summary, the table of contents, the section
    // headings, the figures
    order: [...document.querySelectorAll("h1, p.summary, h2, img, a[href='#answer']")].map(e =>
      e.tagName === "IMG" ? "img " + e.getAttribute("src") : e.tagName === "A" ? "contents"
      : e.className === "summary" ? "summary" : e.tagName.toLowerCase() + (e.id ? "#" + e.id : "")),
    // where the summary and the first section's finding end and where its figure starts, in the page's pixels
    // at the window's width
    screen: {width: innerWidth, summary: document.querySelector("p.summary").getBoundingClientRect().bottom,
             answer: document.querySelector("p.finding").getBoundingClientRect().bottom,
             figure: document.querySelector("figure img").getBoundingClientRect().top},
    summary: document.querySelector("p.summary").textContent,
    errors: lnreproErrors});
  document.body.append(out);
});
</script>"""
# Chromium's flags for a quiet, offline, throw-away headless run; --enable-logging=stderr --v=0 prints every
# console message of the page as a "CONSOLE" line (the report has no scripts of its own, so any is a fault).
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--enable-logging=stderr", "--v=0"]
FIRST_SCREEN = (1400, 900)  # the window a reader opens the report in: its first screen must answer


def chromium_required() -> bool:
    return os.environ.get(REQUIRE_CHROMIUM_ENV, "") not in ("", "0", "false", "no")


@pytest.fixture(scope="session")
def chromium() -> str:
    """The chromium binary; a skip (or, when required, a failure) without it. Session-scoped and requested before
    ``demo_run``, so that a missing browser is found before the DAG runs."""
    path = shutil.which("chromium")
    if path is None:
        reason = "Debian's chromium is not installed (apt-get install chromium; .ci/run installs it)"
        if chromium_required():
            pytest.fail(f"{REQUIRE_CHROMIUM_ENV}=1 but {reason}", pytrace=False)
        pytest.skip(reason)
    return path


class _ReportHandler(SimpleHTTPRequestHandler):
    """The report folder over HTTP, plus the probe page; quiet."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        if self.path != PROBE:
            return super().do_GET()
        page = (Path(self.directory) / "index.html").read_text(encoding="utf-8")
        assert "<head>" in page, "index.html has no <head>"
        body = page.replace("<head>", "<head>" + PROBE_SCRIPT, 1).encode("utf-8")
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (http.server's signature)
        pass


@contextlib.contextmanager
def serving(report: Path) -> Iterator[str]:
    """``report``'s base URL on 127.0.0.1 (a free port), served from a thread while the context is open."""
    handler = functools.partial(_ReportHandler, directory=str(report))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def served(demo_run: DemoRun) -> Iterator[str]:
    """The demo report's base URL, served for the test's duration."""
    with serving(demo_run.exp_dir / "report") as url:
        yield url


def probe_page(chromium: str, url: str, profile: Path) -> tuple[dict, str]:
    """The probe's findings on the page at ``url``, opened in a window of FIRST_SCREEN, and Chromium's stderr."""
    width, height = FIRST_SCREEN
    proc = subprocess.run([chromium, *CHROMIUM_FLAGS, f"--window-size={width},{height}", f"--user-data-dir={profile}",
                           "--dump-dom", url + PROBE], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    match = re.search(r'<script type="application/json" id="lnrepro-probe">(.*?)</script>', proc.stdout, re.S)
    assert match, f"the probe did not run (no load event?):\n{proc.stdout[:2000]}\n{proc.stderr[-3000:]}"
    return json.loads(match.group(1)), proc.stderr


def assert_reads_as_results(probe: dict) -> None:
    """The title, the summary and the table of contents, then the Answer with its figure; the questions before the
    appendix; the summary and the Answer's headline whole on the first screen, its figure starting there."""
    assert probe["order"][:5] == ["h1", "summary", "contents", "h2#answer", f"img figures/{FIGURES['answer']}"]
    headings = [x for x in probe["order"] if x.startswith("h2#")]
    assert headings.index("h2#figure4") < headings.index("h2#effects") < headings.index("h2#claims")
    assert headings[-1] == "h2#files"
    screen = probe["screen"]  # headless Chromium's window is FIRST_SCREEN wide; its height is not the page's
    assert screen["width"] == FIRST_SCREEN[0]
    assert screen["summary"] <= screen["answer"] <= screen["figure"] < FIRST_SCREEN[1], screen


@pytest.mark.browser
def test_report_opens_in_chromium_with_every_image(chromium: str, demo_run: DemoRun, served: str,
                                                   tmp_path: Path) -> None:
    probe, stderr = probe_page(chromium, served, tmp_path / "profile")
    # every figure of FIGURES is on the page (the demo computes gradinit too) and each one decoded
    assert sorted(i["src"] for i in probe["images"]) == sorted(f"figures/{f}" for f in FIGURES.values())
    assert [i["src"] for i in probe["images"] if not i["ok"]] == []
    assert probe["errors"] == []
    assert_reads_as_results(probe)
    console = [line for line in stderr.splitlines() if re.search(r":CONSOLE[:(]", line)]
    assert console == [], "\n".join(console)


def test_snakemake_report_has_every_figure(demo_run: DemoRun, tmp_path: Path) -> None:
    out = tmp_path / "snakemake-report.html"
    snakemake(demo_run.workdir, "--report", str(out), "--configfile", *DEMO)
    text = out.read_text(encoding="utf-8")
    missing = [f for f in FIGURES.values() if f not in text]
    assert missing == [], f"snakemake --report lacks {missing}"


@pytest.mark.browser
@pytest.mark.parametrize("part", [p for p, study in STUDIES.items() if (REPO / study.report / "index.html").exists()])
def test_a_published_report_answers_on_its_first_screen(chromium: str, part: str, tmp_path: Path) -> None:
    """Each published report at 1,400 x 900: the summary opens with the study's verdict (the first sentence of its
    Answer's headline, or of its depth finding) and, with the first section's finding, ends on the first screen,
    where that section's figure starts; every image loads. The screenshot is left in the test's folder."""
    study = STUDIES[part]
    with serving(REPO / study.report) as url:
        probe, _ = probe_page(chromium, url, tmp_path / "profile")
        width, height = FIRST_SCREEN
        shot = subprocess.run([chromium, *CHROMIUM_FLAGS, f"--window-size={width},{height}",
                               f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={tmp_path / 'first.png'}",
                               url + "/index.html"], capture_output=True, text=True, timeout=180)
    assert shot.returncode == 0 and (tmp_path / "first.png").stat().st_size > 0, shot.stderr[-2000:]
    answer = (REPO / study.report / "answer.md").read_text(encoding="utf-8").split("\n\n")[1]
    assert " ".join(probe["summary"].split()).startswith(" ".join(first_sentence(answer).split()))
    screen = probe["screen"]
    assert screen["summary"] <= screen["answer"] and screen["figure"] < height, screen
    assert [i["src"] for i in probe["images"] if not i["ok"]] == [] and probe["errors"] == []
