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


def _module_names() -> list[str]:
    """The modules of this package, by name, without importing them."""
    return [info.name for info in pkgutil.iter_modules(importlib.import_module(__package__).__path__)]


def _as_dataset(module: ModuleType) -> Dataset | None:
    """The module as a Dataset when it has both functions."""
    if callable(getattr(module, "downloads", None)) and callable(getattr(module, "prepare", None)):
        return cast(Dataset, module)
    return None


def datasets() -> dict[str, Dataset]:
    """Every module of this package that has both functions, by its name (the config's dataset name); each
    module is imported to look."""
    found = {name: _as_dataset(importlib.import_module(f"{__package__}.{name}")) for name in _module_names()}
    return {name: module for name, module in found.items() if module is not None}


def dataset(name: str) -> Dataset:
    """The module of dataset ``name``, the only one imported: every snakemake start reads the registry, and the
    other modules would bring what only their preparation needs."""
    module = (_as_dataset(importlib.import_module(f"{__package__}.{name}"))
              if name.isidentifier() and name in _module_names() else None)
    if module is None:
        raise LnReproError(f"unknown dataset {name!r} (datasets: {', '.join(sorted(datasets()))})")
    return module
