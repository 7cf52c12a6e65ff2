"""The package ships every data file it reads: a study's parts run from a plain (not editable) install."""

from fnmatch import fnmatch
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"


def test_every_data_file_of_the_package_is_package_data() -> None:
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    data_files = [p for p in (SRC / "lnrepro").rglob("*")
                  if p.is_file() and p.suffix not in {".py", ".pyc"} and "__pycache__" not in p.parts]
    assert any(p.name == "config.schema.yaml" for p in data_files)
    folders = {package.replace(".", "/") + "/": patterns for package, patterns in package_data.items()}
    missing = [rel for rel in (p.relative_to(SRC).as_posix() for p in data_files)
               if not any(rel.startswith(folder) and _matches(rel.removeprefix(folder), patterns)
                          for folder, patterns in folders.items())]
    assert missing == []


def _matches(rel: str, patterns: list[str]) -> bool:
    """Whether setuptools ships ``rel`` (a path within its package) by one of its globs (``*`` within a folder)."""
    return any(rel.count("/") == pattern.count("/") and fnmatch(rel, pattern) for pattern in patterns)


def test_the_schema_is_read_from_the_package() -> None:
    from lnrepro.config import SCHEMA_PATH, load_schema

    assert SCHEMA_PATH.parent == SRC / "lnrepro" / "config"
    assert load_schema()["$defs"]["model"]["properties"]["norm"]["enum"]
