"""The tracked files speak of the project, not of its making: no README, doc, preset, comment or test refers to
a numbered item of an issue tracker (the pattern below also spans a line break), so every file states its facts
without a reader needing the tracker; and none but docs/measurements.md and the stores' records (published/) names
a commit or tells how the project was made (a commit, a work session or an hour as a time marker): a text
states what is, and git history holds what was."""

from __future__ import annotations

import fnmatch
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


# A commit id as git abbreviates it or in full: 7 to 40 hex digits, at least one digit and one letter, a word of
# its own (a 64-digit SHA-256 is no commit id).
COMMIT_ID = re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")
# Hex words that are no commit: a checksum the config states, the hex digits spelled out.
NOT_COMMITS = frozenset({"10936dfdf616504ddbd844e91b94ef4a",  # the IWSLT14 archive's MD5 (config.yaml)
                         "0123456789abcdef"})
# Narration of the project's making: a commit or session as a time marker, a change told as one.
NARRATION = re.compile(
    r"\bat\s+commit\b|\b(?:this|the\s+previous|the\s+last|previous)\s+session\b|\bthis\s+round\b"
    r"|\badded\s+last\b|\b(?:minutes?|hours?|days?|weeks?)\s+(?:earlier|ago|later)\b|\bpreviously\b"
    r"|\bformerly\b|\b(?:fixed\s+since|since\s+fixed)\b|\btoday['’]s\b",
    re.IGNORECASE)
# The files that state current facts (fnmatch patterns: ``*`` spans folders); docs/measurements.md names the
# commit of each figure, by design.
CURRENT_TEXT = ("docs/*.md", "presets/*.yaml", "src/*.py", "Snakefile", "workflow/*", "tests/*.py")
MEASUREMENTS = "docs/measurements.md"


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


def narration_lines(path: Path) -> list[str]:
    """``path:line: text`` for every line of a text file that names a commit id or narrates the project's making."""
    data = path.read_bytes()
    if b"\0" in data:
        return []
    found = []
    for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), start=1):
        ids = [m.group(0) for m in COMMIT_ID.finditer(line) if m.group(0).lower() not in NOT_COMMITS]
        if ids or NARRATION.search(line):
            found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    return found


def current_text_files(patterns: tuple[str, ...]) -> list[Path]:
    """The tracked files matching ``patterns``, docs/measurements.md left out."""
    def matches(name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, p) for p in patterns) and name != MEASUREMENTS

    return [path for path in tracked_files() if matches(path.relative_to(REPO).as_posix())]


def test_the_narration_patterns_find_what_they_should() -> None:
    commit_like = ["d9a3" "1e0", "26f4" "dd96" "f4dd" "9c0f" "fee", "at comm" "it 91594"]
    assert [bool(COMMIT_ID.search(s)) for s in commit_like] == [True, True, False]
    assert not COMMIT_ID.search("a " + "f" * 64 + " digest, 20261207, deadbeef, sha256:" + "0" * 8)
    told = ["at comm" "it X", "the previous sess" "ion", "four hours earl" "ier", "added la" "st", "today" "'s code"]
    assert all(NARRATION.search(s) for s in told), [s for s in told if not NARRATION.search(s)]
    assert not NARRATION.search("the previous epoch; a committed file; hours of training; a session-scoped fixture")


def test_no_current_text_names_a_commit_or_tells_its_making() -> None:
    files = current_text_files(CURRENT_TEXT)
    assert REPO / "Snakefile" in files and REPO / "presets" / "study-cpu.yaml" in files, "the patterns matched too little"
    found = [line for path in files for line in narration_lines(path)]
    assert found == [], "state the current fact (commits: docs/measurements.md):\n" + "\n".join(found)


def test_the_readme_names_no_commit_and_tells_no_history() -> None:
    found = [line for path in current_text_files(("README.md",)) for line in narration_lines(path)]
    assert found == [], "state the current fact (commits: docs/measurements.md):\n" + "\n".join(found)
