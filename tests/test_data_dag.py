"""The data stages as Snakemake rules on real formats: IWSLT14 from a local HTTP server, Multi30k from the mirror."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import SHARED, copy_repo, snakemake
from fixtures_iwslt import build_iwslt_archive, serve
from lnrepro.bpe import decode, load_spm
from lnrepro.io import read_lines

pytestmark = pytest.mark.snakemake  # each test runs the data stages through snakemake


def _run_bpe_target(work: Path, preset: dict) -> Path:
    (work / "override.yaml").write_text(yaml.safe_dump(preset))
    snakemake(work, "bpe", "--cores", "2", "--configfile", "override.yaml")
    return work / "results" / preset["name"]


def _check_round_trip(exp: Path, split: str) -> None:
    sp = load_spm(exp / "data" / "bpe" / "spm.model")
    for lang in ("de", "en"):
        ids = [list(map(int, line.split())) for line in read_lines(exp / "data" / "bpe" / f"{split}.{lang}.ids")]
        assert [decode(sp, x) for x in ids] == read_lines(exp / "data" / "prepared" / f"{split}.{lang}")


def test_iwslt14_download_prepare_bpe_through_snakemake(tmp_path: Path) -> None:
    archive = build_iwslt_archive(tmp_path / "de-en.tgz")
    work = copy_repo(tmp_path / "repo")
    with serve() as srv:
        srv.files["de-en.tgz"] = archive.path.read_bytes()
        exp = _run_bpe_target(work, {
            "name": "iwsltfixture",
            "defaults": {
                "data": {"iwslt14": {"urls": [srv.url("de-en.tgz")], "md5": archive.md5, "size": archive.size,
                                     "expected_counts": archive.counts}},
                "bpe": {"vocab_size": 400},
            },
        })
    assert (work / "results" / "downloads" / "de-en.tgz").read_bytes() == archive.path.read_bytes()
    stats = json.loads((exp / "data" / "prepared" / "stats.json").read_text())
    assert stats["counts"] == archive.counts
    for split in ("train", "valid", "test"):
        for lang in ("de", "en"):
            assert len(read_lines(exp / "data" / "bpe" / f"{split}.{lang}.ids")) == archive.counts[split]
    _check_round_trip(exp, "test")


@pytest.mark.shared(SHARED / "data" / "multi30k")
def test_multi30k_from_mirror_through_snakemake(tmp_path: Path) -> None:
    work = copy_repo(tmp_path / "repo")
    exp = _run_bpe_target(work, {
        "name": "m30kmirror",
        "defaults": {"data": {"dataset": "multi30k", "multi30k": {"mirror": str(SHARED / "data" / "multi30k")}},
                     "bpe": {"vocab_size": 2000}},
    })
    stats = json.loads((exp / "data" / "prepared" / "stats.json").read_text())
    assert stats["counts"] == {"train": 29000, "valid": 1014, "test": 1000}
    bpe_stats = json.loads((exp / "data" / "bpe" / "stats.json").read_text())
    assert bpe_stats["vocab_size"] == 2000
    _check_round_trip(exp, "valid")
