"""Atomic file writes and provenance: every output another stage reads is renamed into place whole."""

from __future__ import annotations

import errno
import fcntl
import io
import json
import math
import os
import platform
import shutil
import socket
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from .errors import LnReproError

if TYPE_CHECKING:  # pandas is not a dependency of the stages that never write a table
    import pandas as pd


# A write the file system refused for want of room, and what frees it.
_NO_ROOM = {errno.ENOSPC: "no space left on device (ENOSPC)",
            errno.EFBIG: "file too large for this process's file-size limit (EFBIG: ulimit -f) or the file system",
            errno.EDQUOT: "disk quota exceeded (EDQUOT)"}


def _no_room(exc: BaseException) -> int | None:
    """The errno of ``_NO_ROOM`` that ``exc``, or an exception it was raised from or during, carries (None:
    none). torch.save reports a full disk or a file-size limit as a RuntimeError ("unexpected pos ...") raised
    while handling the OSError of the write that failed."""
    seen: set[int] = set()
    stack: list[BaseException | None] = [exc]
    while stack:
        e = stack.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in _NO_ROOM:
            return e.errno
        stack += [e.__cause__, e.__context__]
    return None


@contextmanager
def naming_full_disk(path: str | os.PathLike) -> Iterator[None]:
    """Turn a write refused for want of room inside the block (a full disk, a file-size limit, a quota) into one
    LnReproError naming ``path`` and the cause (other errors pass through)."""
    try:
        yield
    except Exception as e:
        code = _no_room(e)
        if code is None:
            raise
        raise LnReproError(f"{path}: {_NO_ROOM[code]} while writing it; the file was not replaced and earlier "
                           "files are intact: make room and rerun") from e


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; rename it onto ``path`` only if the block succeeds (a full
    disk becomes one message naming ``path``; the temporary file is removed either way)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; outputs get the permissions a plain open() would give
    tmp_path = Path(tmp)
    try:
        with naming_full_disk(path):
            yield tmp_path
            os.replace(tmp_path, path)
    finally:
        tmp_path.unlink(missing_ok=True)


def refuse_foreign_folder(path: str | os.PathLike, own: frozenset[str], kind: str) -> None:
    """Refuse, before anything is written, to replace ``path`` whole (``atomic_directory``) unless it is absent,
    an empty folder or a ``kind`` (a folder holding only the entries ``own``): a command that replaces its
    output folder never deletes a folder it did not make (a results tree, a checkout)."""
    path = Path(path)
    if not path.exists():
        return
    if not path.is_dir():
        raise LnReproError(f"{path}: exists and is not a folder; name a new or empty folder, or a {kind}")
    foreign = sorted(entry.name for entry in path.iterdir() if entry.name not in own)
    if foreign:
        more = f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
        raise LnReproError(f"{path}: not a {kind} (it holds {', '.join(foreign[:3])}{more}), and this command "
                           f"replaces its folder whole; name a new or empty folder, or a {kind}")


@contextmanager
def atomic_directory(path: str | os.PathLike) -> Iterator[Path]:
    """Yield an empty temporary folder beside ``path``; when the block succeeds, the folder takes ``path``'s
    place (the old one renamed aside, the new one renamed in, the old one removed), so ``path`` holds wholly
    its old or wholly its new files. When the block fails, the temporary folder is removed and ``path`` is
    left as it was. An OSError becomes one LnReproError naming the path that could not be written. A ``path``
    that is a symbolic link stays one: the folder it points to is replaced."""
    path = Path(os.path.realpath(path)) if Path(path).is_symlink() else Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700; give the folder a plain mkdir's permissions
    except OSError as e:
        raise LnReproError(f"{e.filename or path.parent}: cannot write there ({e.strerror}); {path} was left "
                           "as it was") from e
    old = tmp.with_name(tmp.name.removesuffix(".tmp") + ".old")
    try:
        with naming_full_disk(path):
            yield tmp
        if path.exists():
            os.replace(path, old)
        os.replace(tmp, path)
    except OSError as e:
        if old.exists() and not path.exists():
            os.replace(old, path)
        raise LnReproError(f"{e.filename or path}: cannot write it ({e.strerror or e}); {path} was left as it "
                           "was") from e
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    try:
        if old.exists():
            shutil.rmtree(old)
    except OSError as e:
        raise LnReproError(f"{e.filename or old}: cannot remove it ({e.strerror or e}); {path} holds the new "
                           f"files, delete {old} by hand") from e


def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def write_generated(path: str | os.PathLike, text: str, check: bool, stale: str) -> bool:
    """Write the generated ``text`` to ``path`` unless it already holds it (True then); with ``check`` only
    compare: a stale file is the LnReproError ``stale`` (which names the command that writes it again)."""
    path = Path(path)
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return True
    if check:
        raise LnReproError(stale)
    atomic_write_text(path, text)
    return False


def atomic_write_lines(path: str | os.PathLike, lines: list[str]) -> None:
    """Write one line per item, each ending in a newline."""
    atomic_write_text(path, "".join(f"{line}\n" for line in lines))


def json_text(obj: Any) -> str:
    """The one JSON layout of every JSON file written: indented, sorted keys, a final newline."""
    return json.dumps(obj, indent=2, sort_keys=True) + "\n"


def finite_json(obj: Any) -> Any:
    """Replace non-finite floats by None (strict JSON has no NaN/Infinity); recurse into dicts and lists."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_json(v) for v in obj]
    return obj


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_text(path, json_text(obj))


def csv_text(df: pd.DataFrame) -> str:
    """The one CSV layout of every table written: a header row, no index, floats with 6 significant digits and
    "\n" line ends, so reruns on the same results give the same bytes."""
    buf = io.StringIO()
    df.to_csv(buf, index=False, float_format="%.6g", lineterminator="\n")
    return buf.getvalue()


def atomic_write_csv(path: str | os.PathLike, df: pd.DataFrame) -> Path:
    """Write ``df`` as ``csv_text`` to ``path`` atomically; returns the path."""
    atomic_write_text(path, csv_text(df))
    return Path(path)


def torch_save_file(obj: Any, path: str | os.PathLike) -> None:
    """``torch.save`` to ``path`` through an open file, synced. Given a file name, torch names the archive's
    records after it (``<stem>/data.pkl``), so a temporary name would make equal objects differ byte for byte;
    given a file object it names them ``archive/...``, and the bytes depend on the object alone."""
    import torch

    with open(path, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())


def atomic_torch_save(obj: Any, path: str | os.PathLike) -> None:
    with atomic_path(path) as tmp:
        torch_save_file(obj, tmp)


def read_json(path: str | os.PathLike) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError as e:
        raise LnReproError(f"{path}: file not found") from e
    except json.JSONDecodeError as e:
        raise LnReproError(f"{path}: not valid JSON ({e})") from e


def read_yaml(path: str | os.PathLike) -> Any:
    """A YAML file as ``yaml.safe_load`` reads it, parsed by libyaml where PyYAML has it (several times faster
    than the Python parser: every snakemake process reads the configs and the schema, the tests hundreds of
    times)."""
    import yaml

    with open(path, encoding="utf-8") as f:
        return yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


GZ = ".gz"  # a record stored compressed (a store's logs and hypotheses) is its file's name plus this


def gzip_bytes(data: bytes) -> bytes:
    """``data`` gzip-compressed with no file name and modification time 0, so equal data give equal bytes."""
    import gzip

    return gzip.compress(data, compresslevel=9, mtime=0)


def open_text(path: str | os.PathLike) -> io.TextIOBase:
    """Open a UTF-8 text file for reading: ``path`` itself, or ``path.gz`` where only the compressed copy exists
    (a store keeps logs and hypotheses gzipped). Every reader of such a file opens it here."""
    import gzip

    path = Path(path)
    if not path.exists() and path.with_name(path.name + GZ).exists():
        return gzip.open(path.with_name(path.name + GZ), "rt", encoding="utf-8")  # type: ignore[return-value]
    return open(path, encoding="utf-8")


def text_exists(path: str | os.PathLike) -> bool:
    """Whether ``open_text`` finds ``path`` (itself or its ``.gz``)."""
    path = Path(path)
    return path.exists() or path.with_name(path.name + GZ).exists()


def read_lines(path: str | os.PathLike) -> list[str]:
    """Lines of a UTF-8 text file without their newlines."""
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def file_sha256(path: str | os.PathLike) -> str:
    """SHA-256 of a file, read in 1 MiB blocks; a missing file is a clear error."""
    import hashlib

    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    except FileNotFoundError as e:
        raise LnReproError(f"{path}: file not found") from e
    return h.hexdigest()


def cpu_name() -> str:
    """The CPU model as /proc/cpuinfo names it (platform.processor() is often empty on Linux)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def process_cpu_s() -> float:
    """CPU-seconds (user + system) this process has used since it started, its imports included: what a job
    costs beside its wall-clock, which moves with whatever else runs on the machine."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


_IMPORTED = time.time()


def process_wall_s() -> float:
    """Wall-clock seconds since this process started (Linux: /proc/self/stat's start time, 10 ms resolution;
    elsewhere since lnrepro.io was imported), its imports included, as ``process_cpu_s``."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22, after the command's ")"
        with open("/proc/uptime", encoding="ascii") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return time.time() - _IMPORTED


def where_ran(device: str | None = None) -> dict[str, Any]:
    """Host, device and SLURM job id (when there is one) for the JSON a job writes."""
    return {
        "host": socket.gethostname(),
        "device": device or cpu_name(),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
    }


def git_commit() -> tuple[str | None, bool | None]:
    """(commit, dirty) of the repository holding this package, or (None, None) outside a git checkout."""
    here = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip() != ""
        return commit or None, dirty
    except (OSError, subprocess.SubprocessError):
        return None, None


@contextmanager
def exclusive_lock(lock: Path, say: Callable[[str], None], waiting: str, ended: str) -> Iterator[None]:
    """Hold an exclusive flock on the file ``lock`` (made when missing, never deleted: two holders of two files
    would both hold one) for the block, its holder's pid written in it. Where another process holds it: say
    ``waiting`` (its ``{pid}`` the holder's), wait for it, then say ``ended``."""
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            say(waiting.replace("{pid}", os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"))
            fcntl.flock(fd, fcntl.LOCK_EX)
            say(ended)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock
