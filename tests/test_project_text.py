"""The tracked files speak of the project, not of its making: no README, doc, preset, comment or test refers to
a numbered item of an issue tracker (the pattern below also spans a line break), so every file states its facts
without a reader needing the tracker."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from conftest import REPO

# the word, a space or line break, a number; or the possessive after "the"; written so that this file's own text
# does not match it (the samples below are split in two for the same reason)
HISTORY = re.compile(r"\bissues?\s+[0-9]+|\bthe\s+issue['’]s\b", re.IGNORECASE)


def tracked_files() -> list[Path]:
    """Every file `git ls-files` lists that exists in the working tree; a skip outside a git checkout."""
    try:
        proc = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, check=False)
    except FileNotFoundError:
        pytest.skip("git is not installed")
    if proc.returncode != 0:
        pytest.skip("not a git checkout")
    return [REPO / name for name in proc.stdout.decode("utf-8").split("\0") if name and (REPO / name).is_file()]


def history_lines(path: Path) -> list[str]:
    """``path:line: match`` for every match in a text file; none in a binary one (a NUL byte)."""
    data = path.read_bytes()
    if b"\0" in data:
        return []
    text = data.decode("utf-8", errors="replace")
    return [f"{path.relative_to(REPO)}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)!r}"
            for m in HISTORY.finditer(text)]


def test_the_pattern_finds_what_it_should() -> None:
    assert HISTORY.search("as Issue" "\n24 asks") and HISTORY.search("issues" " 13 and 20")
    assert HISTORY.search("within THE ISSUE" "'S budget")
    assert not HISTORY.search("tiss" + "ue 3, issued 4 times, an issue of scale")


def test_no_tracked_file_speaks_of_the_tracker() -> None:
    files = tracked_files()
    assert files, "git ls-files listed nothing"
    found = [line for path in files for line in history_lines(path)]
    assert found == [], "state the fact instead of naming the tracker's item:\n" + "\n".join(found)
