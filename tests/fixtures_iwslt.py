"""Test helpers for the real-data stages: a miniature IWSLT14 ``de-en.tgz`` and a local HTTP server.

The archive has the official layout (``de-en/train.tags.de-en.{de,en}`` with metadata lines of several kinds,
the ten ``IWSLT14.TED*.xml`` files with the real header and ``<seg id="N"> text </seg>`` lines, ``README``,
``train.en``), small enough to prepare in a second. :func:`build_iwslt_archive` also returns what the
preparation must produce, derived from how the fixture was built (which pairs survive cleaning), not from the
code under test.

The server (:func:`serve`) answers on 127.0.0.1 at a random port: ``/files/<name>`` serves registered bytes,
``/truncated/<name>`` announces the full Content-Length and closes after half of it, anything else is a 404.
"""

from __future__ import annotations

import hashlib
import io
import socket
import tarfile
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

from lnrepro.data.iwslt14 import TEST_SETS

# Metadata block of one talk in train.tags (the same on both sides, as in the real files). url, keywords and
# talkid lines are dropped by the recipe; title/description keep their text; speaker/reviewer/translator are
# "other" tag lines that fairseq keeps (and tokenizes).
_REVIEWER = '<reviewer href="http://www.ted.com/profiles/{t}">Rev Iewer</reviewer>'
_TRANSLATOR = '<translator href="http://www.ted.com/profiles/9">Trans Lator</translator>'
_HEADER = [  # (line, its raw text when kept, else None)
    ("<url>http://www.ted.com/talks/talk{t}.html</url>", None),
    ("<keywords>talks, science, fixture</keywords>", None),
    ("<speaker>Jane Doe</speaker>", "<speaker>Jane Doe</speaker>"),
    ("<talkid>{t}</talkid>", None),
    ("<title>Vortrag {t}: Wissen</title>", "Vortrag {t}: Wissen"),
    ("<description>Eine kurze Beschreibung des Vortrags {t}.</description>",
     "Eine kurze Beschreibung des Vortrags {t}."),
    (_REVIEWER, _REVIEWER),
    (_TRANSLATOR, _TRANSLATOR),
]
_HEADER_EN = {
    "<title>Vortrag {t}: Wissen</title>": "<title>Talk {t}: Knowledge</title>",
    "<description>Eine kurze Beschreibung des Vortrags {t}.</description>":
        "<description>A short description of talk {t}.</description>",
}
SENTENCES_PER_TALK = 25


@dataclass
class FixtureArchive:
    path: Path
    md5: str
    sha256: str
    size: int
    counts: dict[str, int]
    valid_raw: dict[str, list[str]]  # expected valid.raw.{de,en}
    test_first_words: list[str]  # the set tag each test line starts with, in order
    test_sizes: dict[str, int]
    dropped: dict[str, int]  # per-language lines dropped by the tag filter
    other_tag_lines: int
    files: dict[str, bytes] = field(default_factory=dict)


def _train_pairs() -> list[tuple[str, str, str | None, str | None]]:
    """(de line, en line, raw de, raw en) for train.tags; raw None = dropped by filter or cleaning."""
    pairs = []
    for t in (1, 2):
        for de, raw in _HEADER:
            en = _HEADER_EN.get(de, de)
            raw_en = None if raw is None else (en.replace("<title>", "").replace("</title>", "")
                                               .replace("<description>", "").replace("</description>", ""))
            pairs.append((de.format(t=t), en.format(t=t), None if raw is None else raw.format(t=t),
                          None if raw_en is None else raw_en.format(t=t)))
        for i in range(1, SENTENCES_PER_TALK + 1):
            n = (t - 1) * SENTENCES_PER_TALK + i
            de, en = f"Das ist Satz Nummer {n} im Vortrag.", f"This is sentence number {n} in the talk."
            pairs.append((de, en, de, en))
        # Three pairs that clean-corpus-n removes: empty, too long (176 words), length ratio > 1.5.
        pairs.append(("", "", None, None))
        pairs.append((" ".join(["wort"] * 176), " ".join(["word"] * 176), None, None))
        pairs.append(("Ja.", "Yes, I really do think that this is so.", None, None))
    return pairs


def _xml(name: str, lang: str, segs: list[str]) -> str:
    setid = "iwslt2014-" + name.split(".")[-1]
    opening = (f'<srcset setid="{setid}" srclang="german">' if lang == "de"
               else f'<refset setid="{setid}" srclang="german" trglang="english" refid="ref">')
    closing = "</srcset>" if lang == "de" else "</refset>"
    lines = ['<?xml version="1.0" encoding="UTF-8"?>', "<mteval>", opening, '<doc docid="1" genre="lectures">',
             "<url>http://www.ted.com/talks/fixture.html</url>",
             "<description>TED Talk Subtitles and Transcript: fixture</description>",
             "<keywords>fixture</keywords>", "<talkid>1</talkid>", "<title>Fixture</title>"]
    lines += [f'<seg id="{i}"> {s} </seg>' for i, s in enumerate(segs, 1)]
    lines += ["</doc>", closing, "</mteval>"]
    return "\n".join(lines) + "\n"


def build_iwslt_archive(path: Path) -> FixtureArchive:
    """Write the fixture ``de-en.tgz`` at ``path`` and return its digests and the expected preparation."""
    pairs = _train_pairs()
    files: dict[str, bytes] = {
        "train.tags.de-en.de": ("\n".join(p[0] for p in pairs) + "\n").encode(),
        "train.tags.de-en.en": ("\n".join(p[1] for p in pairs) + "\n").encode(),
        "README": b"IWSLT 2014 evaluation campaign: training/development data (test fixture)\n",
        "train.en": b"Monolingual text, unused by the recipe.\n",
    }
    test_sizes = {}
    first_words = []
    for k, name in enumerate(TEST_SETS):
        n = k % 3 + 1  # 1..3 segments per set, so the concatenation order is visible in the sizes
        tag = name.split(".")[-1]
        segs_de = [f"{tag} Segment {i} sagt „Hallo’ zu U.S.A." for i in range(n)]
        segs_en = [f"{tag} segment {i} says it’s fine, e.g." for i in range(n)]
        files[f"{name}.de-en.de.xml"] = _xml(name, "de", segs_de).encode()
        files[f"{name}.de-en.en.xml"] = _xml(name, "en", segs_en).encode()
        test_sizes[name] = n
        first_words += [tag.lower()] * n

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"de-en/{name}")
            info.size = len(data)
            info.mtime = 1389000000
            tar.addfile(info, io.BytesIO(data))
    data = buf.getvalue()
    Path(path).write_bytes(data)

    kept = [(p[2], p[3]) for p in pairs if p[2] is not None]
    header_kept = sum(1 for _, raw in _HEADER if raw is not None) * 2
    sentences = 2 * SENTENCES_PER_TALK
    into_cleaning = header_kept + sentences + 2 * 3
    after = len(kept)
    valid = [kept[i] for i in range(after) if (i + 1) % 23 == 0]
    return FixtureArchive(
        path=Path(path), md5=hashlib.md5(data).hexdigest(), sha256=hashlib.sha256(data).hexdigest(),
        size=len(data),
        counts={"into_cleaning": into_cleaning, "after_cleaning": after, "train": after - len(valid),
                "valid": len(valid), "test": sum(test_sizes.values())},
        valid_raw={"de": [v[0] for v in valid], "en": [v[1] for v in valid]},
        test_first_words=first_words, test_sizes=test_sizes,
        dropped={"<url>": 2, "<talkid>": 2, "<keywords>": 2}, other_tag_lines=6, files=files,
    )


class _Handler(BaseHTTPRequestHandler):
    files: dict[str, bytes] = {}
    requests: list[str] = []

    def log_message(self, *args) -> None:  # keep test output quiet
        pass

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.requests.append(self.path)
        kind, _, name = self.path.lstrip("/").partition("/")
        data = self.files.get(name)
        if data is None or kind not in ("files", "truncated"):
            self.send_error(404, "Not Found")
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if kind == "files":
            self.wfile.write(data)
        else:  # announce everything, send half, hang up
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            self.close_connection = True


@dataclass
class Server:
    base: str  # e.g. http://127.0.0.1:PORT
    files: dict[str, bytes]
    requests: list[str]  # every path requested, in order

    def count(self, url: str) -> int:
        """How many requests reached ``url`` so far."""
        return self.requests.count(url[len(self.base):])

    def url(self, name: str, kind: str = "files") -> str:
        return f"{self.base}/{kind}/{name}"


@contextmanager
def serve() -> Iterator[Server]:
    """An HTTP server on 127.0.0.1 (random port) in a thread; register bytes in ``server.files``."""
    files: dict[str, bytes] = {}
    requests: list[str] = []
    handler = type("Handler", (_Handler,), {"files": files, "requests": requests})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield Server(f"http://127.0.0.1:{httpd.server_address[1]}", files, requests)
    finally:
        httpd.shutdown()
        httpd.server_close()


def closed_port() -> int:
    """A local port nobody listens on (bound, then released): connecting to it is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
