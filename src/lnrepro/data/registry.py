"""The datasets, by the config's ``defaults.data.dataset``: every module of ``lnrepro.data`` that defines both
``downloads`` and ``prepare`` (the :class:`Dataset` interface), found by looking, not by a list.

Adding a dataset is therefore its module here, its section in config.yaml and its entry in the config schema;
the rules (workflow/rules/data.smk) and the CLI (``lnrepro download``, ``lnrepro prepare``) serve it unchanged.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path
from types import ModuleType
from typing import Protocol, cast

from ..errors import LnReproError
from .download import Download


class Dataset(Protocol):
    """What a dataset module provides."""

    def downloads(self, section: dict) -> list[Download]:
        """The files to fetch into results/downloads/, from the dataset's whole config section (locations
        included); one ``fetch_archive`` job each."""

    def prepare(self, settings: dict, out_dir: Path, threads: int, downloads_dir: Path) -> dict:
        """Write the prepared folder (through ``lnrepro.data.prepared.write_prepared``) from the section's
        content settings (data.json's ``options``) and the downloaded files; return its stats."""


def _discover() -> dict[str, Dataset]:
    """Every module of this package that has both functions, by its name (the config's dataset name)."""
    package = importlib.import_module(__package__)
    found: dict[str, Dataset] = {}
    for info in pkgutil.iter_modules(package.__path__):
        module: ModuleType = importlib.import_module(f"{__package__}.{info.name}")
        if callable(getattr(module, "downloads", None)) and callable(getattr(module, "prepare", None)):
            found[info.name] = cast(Dataset, module)
    return found


DATASETS: dict[str, Dataset] = _discover()


def dataset(name: str) -> Dataset:
    """The module of dataset ``name``."""
    try:
        return DATASETS[name]
    except KeyError:
        raise LnReproError(f"unknown dataset {name!r} (datasets: {', '.join(sorted(DATASETS))})") from None
