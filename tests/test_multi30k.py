"""Multi30k: fetched through the shared mirror (checksum-verified), prepared with the IWSLT text pipeline."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from conftest import SHARED
from fixtures_iwslt import closed_port
from lnrepro.data.download import fetch
from lnrepro.data.multi30k import FOLDER, file_names, prepare
from lnrepro.errors import LnReproError
from lnrepro.io import read_lines

MIRROR = SHARED / "data" / "multi30k"


def _sha256sums() -> dict[str, str]:
    return {name: digest for digest, name in
            (line.split() for line in (MIRROR / "SHA256SUMS").read_text().splitlines() if line.strip())}


def fetch_multi30k(dest: Path, cfg: dict) -> dict[str, Path]:
    """The six raw files through `fetch`, as the fetch_archive rule gets them: mirror first, then the URL."""
    return {key: fetch([cfg["url"] + name] if cfg["url"] else [], dest / name, sha256=cfg["sha256"][name],
                       mirror=Path(cfg["mirror"]), checksum_key=f"defaults.data.multi30k.sha256.{name}")
            for key, name in file_names().items()}


@pytest.mark.shared(MIRROR)
def test_multi30k_through_the_mirror(tmp_path):
    cfg = {"url": f"http://127.0.0.1:{closed_port()}/data/task1/raw/", "mirror": str(MIRROR),
           "sha256": _sha256sums(), "clean": None, "expected_counts": {"train": 29000, "valid": 1014, "test": 1000}}
    fetch_multi30k(tmp_path / "downloads" / FOLDER, cfg)
    assert sorted(p.name for p in (tmp_path / "downloads" / FOLDER).iterdir()) == sorted(file_names().values())
    out = tmp_path / "prepared"
    stats = prepare(cfg, out, 1, tmp_path / "downloads")
    assert stats["lines"] == {"train": 29000, "valid": 1014, "test": 1000}
    assert read_lines(out / "valid.de")[1] == "ein mann schläft in einem grünen raum auf einem sofa ."
    assert read_lines(out / "valid.raw.de")[1] == "Ein Mann schläft in einem grünen Raum auf einem Sofa."
    assert len(read_lines(out / "test.raw.en")) == 1000
    assert stats["source"]["train.de"]["sha256"] == cfg["sha256"]["train.de.gz"]


@pytest.mark.shared(MIRROR)
def test_mirror_with_wrong_digest_is_refused(tmp_path):
    cfg = {"url": "", "mirror": str(MIRROR), "sha256": {**_sha256sums(), "val.en.gz": "0" * 64}}
    with pytest.raises(LnReproError, match=r"defaults\.data\.multi30k\.sha256\.val\.en\.gz"):
        fetch_multi30k(tmp_path / "downloads", cfg)
    assert not (tmp_path / "downloads" / "val.en.gz").exists()


def _write_gz(folder: Path, name: str, lines: list[str]) -> None:
    with gzip.open(folder / name, "wt", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))


def _tiny(folder: Path, train_de: list[str], train_en: list[str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    _write_gz(folder, "train.de.gz", train_de)
    _write_gz(folder, "train.en.gz", train_en)
    for stem in ("val", "test_2016_flickr"):
        _write_gz(folder, f"{stem}.de.gz", ["Ein Hund rennt."])
        _write_gz(folder, f"{stem}.en.gz", ["A dog runs."])
    return folder


def test_cleaning_is_configurable(tmp_path):
    de = ["Ein Hund.", "Ja.", "Eine Katze schläft."]
    en = ["A dog.", "Yes, I really think so, my friend.", "A cat sleeps."]
    folder = _tiny(tmp_path / "raw" / FOLDER, de, en)
    stats = prepare({"clean": None}, tmp_path / "a", 1, folder.parent)
    assert stats["lines"]["train"] == 3 and stats["cleaning"] is None
    stats = prepare({"clean": {"min_len": 1, "max_len": 50, "ratio": 1.5}}, tmp_path / "b", 1, folder.parent)
    assert stats["lines"]["train"] == 2 and stats["cleaning"]["dropped"]["ratio"] == 1
    assert read_lines(tmp_path / "b" / "train.en") == ["a dog .", "a cat sleeps ."]
    # A misspelt clean key is the schema's to reject, when the config is loaded (tests/test_config.py).


def test_misaligned_files_are_refused(tmp_path):
    folder = _tiny(tmp_path / "raw" / FOLDER, ["Eins.", "Zwei."], ["One."])
    with pytest.raises(LnReproError, match="has 2 lines but .* has 1"):
        prepare({}, tmp_path / "out", 1, folder.parent)
    assert not (tmp_path / "out").exists()
