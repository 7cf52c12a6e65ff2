"""Checksum-verified, atomic downloads with offline fallbacks (a local archive or a mirror folder).

Order of sources: an explicit local file (``archive``), then a mirror folder holding a file of the same name,
then the URLs (retries with exponential backoff on connection errors). Whatever the source, the bytes are
written under a temporary name in the destination folder, their size and digest are checked, and only then is
the file renamed to ``dest``; on any failure the temporary file is removed, so nothing that looks complete is
left behind. Every failure raises one :class:`LnReproError` that says what to do (which config key to set,
where to put the file). A dataset module lists its files as :class:`Download` entries; the ``fetch_archive``
rule runs one ``lnrepro download`` per entry.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import shutil
import socket
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from ..errors import LnReproError
from ..io import atomic_path

_CHUNK = 1 << 20
# HTTP statuses worth retrying (the server may recover); any other 4xx is final.
_RETRY_STATUS = {408, 425, 429, 500, 502, 503, 504}


@dataclass(frozen=True)
class Download:
    """One file a dataset needs, as its config section describes it: where to get it, how to verify it.

    ``name`` is its path under results/downloads/ (shared by every experiment). The ``*_key`` fields are the
    config keys the messages name, so a failure says which setting to change; ``archive_key`` is None when the
    config offers no local copy of this file (only a mirror folder).
    """

    name: str
    urls: tuple[str, ...]
    algorithm: str  # md5 | sha256: the digest ``checksum`` is
    checksum: str | None  # None: not checked
    checksum_key: str
    mirror: str | None
    mirror_key: str
    size: int | None = None  # bytes; None: not checked
    archive: str | None = None
    archive_key: str | None = None

    def cli_args(self) -> list[str]:
        """The ``lnrepro download`` options, all but ``--out``, that fetch and verify this file."""
        args = [arg for url in self.urls for arg in ("--url", url)]
        for flag, value in ((f"--{self.algorithm}", self.checksum), ("--size", self.size),
                            ("--mirror", self.mirror), ("--archive", self.archive)):
            if value is not None:
                args += [flag, str(value)]
        # No archive key: naming the mirror key twice makes the offline message offer only the mirror.
        return args + ["--checksum-key", self.checksum_key, "--mirror-key", self.mirror_key,
                       "--archive-key", self.archive_key or self.mirror_key]


class _Retryable(Exception):
    """A transient failure of one download attempt (connection refused, reset, dropped, timed out)."""


class _Final(Exception):
    """A failure of one URL that retrying will not fix (e.g. HTTP 404)."""


def file_digests(path: Path) -> dict[str, str]:
    """MD5 and SHA-256 of a file, read in chunks."""
    md5, sha = hashlib.md5(), hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(_CHUNK), b""):
            md5.update(block)
            sha.update(block)
    return {"md5": md5.hexdigest(), "sha256": sha.hexdigest()}


def _key_parent(checksum_key: str) -> str:
    return checksum_key.rsplit(".", 1)[0] if "." in checksum_key else checksum_key


def _verify(path: Path, what: str, *, md5: str | None, sha256: str | None, size: int | None,
            checksum_key: str, size_key: str) -> None:
    """Raise LnReproError unless ``path`` has the expected size and digests (each check only when known)."""
    actual_size = path.stat().st_size
    if size is not None and actual_size != size:
        raise LnReproError(
            f"{what}: expected {size} bytes, got {actual_size}; the file is truncated or not the expected one "
            f"(if a different file is intended, set {size_key} to {actual_size} or null)"
        )
    if md5 is None and sha256 is None:
        return
    digests = file_digests(path)
    for name, expected in (("md5", md5), ("sha256", sha256)):
        if expected is not None and digests[name] != expected.lower():
            # The key that holds this digest: checksum_key itself, or its sibling when another digest type fails.
            dotted = "." in checksum_key
            own = not dotted or name in checksum_key.split(".")
            key = checksum_key if own else f"{_key_parent(checksum_key)}.{name}"
            raise LnReproError(
                f"{what}: {name} checksum mismatch: expected {expected.lower()}, got {digests[name]}. "
                f"The file is corrupt or a different version; if you trust it, set {key} to "
                f"{digests[name]} (or null to skip the check)"
            )


def _download_once(url: str, tmp: Path, timeout: float) -> None:
    """One attempt: stream ``url`` into ``tmp`` with a byte progress bar; classify failures."""
    try:
        response = urllib.request.urlopen(url, timeout=timeout)
    except urllib.error.HTTPError as e:
        if e.code in _RETRY_STATUS:
            raise _Retryable(f"HTTP {e.code} {e.reason}") from e
        raise _Final(f"HTTP {e.code} {e.reason}") from e
    except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
        reason = getattr(e, "reason", e)
        raise _Retryable(f"cannot connect ({reason})") from e
    with response:
        length = response.headers.get("Content-Length")
        total = int(length) if length and length.isdigit() else None
        received = 0
        try:
            with open(tmp, "wb") as f, tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024,
                                            desc=url.rsplit("/", 1)[-1], disable=None, leave=False) as bar:
                while True:
                    block = response.read(_CHUNK)
                    if not block:
                        break
                    f.write(block)
                    received += len(block)
                    bar.update(len(block))
                f.flush()
                os.fsync(f.fileno())
        except (OSError, http.client.HTTPException, socket.timeout) as e:
            raise _Retryable(f"connection dropped after {received} bytes ({e.__class__.__name__}: {e})") from e
        if total is not None and received != total:
            raise _Retryable(f"connection dropped after {received} of {total} bytes")


def fetch(
    urls: list[str],
    dest: Path,
    *,
    md5: str | None = None,
    sha256: str | None = None,
    size: int | None = None,
    mirror: Path | None = None,
    archive: Path | None = None,
    checksum_key: str = "defaults.data.<dataset>.md5",
    archive_key: str | None = None,
    mirror_key: str | None = None,
    retries: int = 4,
    backoff: float = 1.0,
    timeout: float = 60.0,
) -> Path:
    """Put a verified copy of a file at ``dest`` and return ``dest``.

    Sources, in order: ``archive`` (a local file: verified, then copied in), ``mirror`` (a folder;
    its file named ``dest.name`` is used when present), then each URL with up to ``retries`` retries after
    connection errors, waiting ``backoff * 2**attempt`` seconds between attempts; an HTTP error such as 404 is
    not retried. ``size``/``md5``/``sha256`` are checked when given, also on a local source (a mirror file that
    fails the check stops with an error rather than silently falling back to the network). ``checksum_key`` is
    the config key that holds the digest (named in the mismatch message; its sibling ``size`` in a size
    mismatch); ``archive_key``/``mirror_key`` (default: siblings ``archive`` and ``mirror`` of ``checksum_key``)
    are named in the message a user without internet gets (an ``archive_key`` equal to ``mirror_key``: the config
    has no archive key for this file, only the mirror is offered). A ``dest`` that already exists and verifies
    is reused.
    """
    dest = Path(dest)
    parent = _key_parent(checksum_key)
    archive_key = archive_key or f"{parent}.archive"
    mirror_key = mirror_key or f"{parent}.mirror"
    size_key = f"{parent}.size" if "." in checksum_key else "the expected size"
    check = dict(md5=md5, sha256=sha256, size=size, checksum_key=checksum_key, size_key=size_key)

    if dest.is_file():
        try:
            _verify(dest, str(dest), **check)
            return dest
        except LnReproError:
            pass  # a stale or damaged earlier file: fetch again; it is replaced only by a verified one

    local: list[tuple[Path, str]] = []
    if archive is not None:
        archive = Path(archive)
        if not archive.is_file():
            raise LnReproError(f"{archive_key}: {archive} is not a file; expected the downloaded {dest.name}")
        local.append((archive, f"{archive} (from {archive_key})"))
    elif mirror is not None:
        candidate = Path(mirror) / dest.name
        if candidate.is_file():
            local.append((candidate, f"{candidate} (mirror {mirror_key})"))
    for src, what in local:
        _verify(src, what, **check)  # check the source first: never copy a bad file in
        # Copied, not hard-linked: a link would share mtime and permissions with the user's (or a shared,
        # read-only) file, so touching or replacing one would change the other; the files are small (<= 20 MB).
        with atomic_path(dest) as tmp:
            shutil.copyfile(src, tmp)
        return dest

    if not urls:
        raise LnReproError(_offline_message(dest, "no URL configured", archive_key, mirror_key, mirror))
    errors: list[str] = []
    offline = True  # every failure so far was a connection-level one
    for url in urls:
        for attempt in range(retries + 1):
            try:
                with atomic_path(dest) as tmp:
                    _download_once(url, tmp, timeout)
                    _verify(tmp, f"{dest.name} downloaded from {url}", **check)
                return dest
            except _Final as e:
                errors.append(f"{url}: {e}")
                offline = False
                break
            except _Retryable as e:
                last = f"{url}: {e}"
                if attempt < retries:
                    time.sleep(backoff * 2 ** attempt)
                else:
                    errors.append(f"{last} (gave up after {retries + 1} attempt{'s' if retries else ''})")
    if offline:
        raise LnReproError(_offline_message(dest, "; ".join(errors), archive_key, mirror_key, mirror))
    raise LnReproError(
        f"could not download {dest.name}: {'; '.join(errors)}. The file is not at that address; check the URL "
        f"in the config, or {_where_to_put(dest, archive_key, mirror_key)}"
    )


def _where_to_put(dest: Path, archive_key: str, mirror_key: str) -> str:
    alt = "" if archive_key == mirror_key else f"set {archive_key} to its path, or "
    return f"put the file at {dest}, or {alt}set {mirror_key} to a folder that contains {dest.name}"


def _offline_message(dest: Path, why: str, archive_key: str, mirror_key: str,
                     mirror: Path | None) -> str:
    mirror_note = f" (the mirror {mirror} has no {dest.name})" if mirror is not None else ""
    return (
        f"could not download {dest.name}: {why}{mirror_note}. If this machine has no (reliable) internet access, "
        f"download {dest.name} elsewhere and {_where_to_put(dest, archive_key, mirror_key)}"
    )
