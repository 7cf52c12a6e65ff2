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
    missing = []
    for path in data_files:
        rel = path.relative_to(SRC).as_posix()
        shipped = any(rel.startswith(package.replace(".", "/") + "/")
                      and _matches(rel.removeprefix(package.replace(".", "/") + "/"), patterns)
                      for package, patterns in package_data.items())
        if not shipped:
            missing.append(rel)
    assert missing == []


def _matches(rel: str, patterns: list[str]) -> bool:
    """Whether setuptools ships ``rel`` (a path within its package) by one of its globs (``*`` within a folder)."""
    return any(rel.count("/") == pattern.count("/") and fnmatch(rel, pattern) for pattern in patterns)


def test_the_schema_is_read_from_the_package() -> None:
    from lnrepro.config import SCHEMA_PATH, load_schema

    assert SCHEMA_PATH.parent == SRC / "lnrepro" / "config"
    assert load_schema()["$defs"]["model"]["properties"]["norm"]["enum"]
