"""IWSLT14 preparation: download from a local server -> prepare, with fairseq's prepare-iwslt14.sh semantics;
and the fidelity check on the real dev2010 files against fairseq's own output (shared sample)."""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import SHARED
from fixtures_iwslt import FixtureArchive, build_iwslt_archive, serve
from lnrepro.data.download import fetch
from lnrepro.data.iwslt14 import TEST_SETS, extract_segments, filter_train_lines, prepare, prepare_xml
from lnrepro.data.text import split_lines
from lnrepro.errors import LnReproError
from lnrepro.io import read_lines

SAMPLE = SHARED / "data" / "iwslt14-sample"


@pytest.fixture(scope="module")
def fixture_archive(tmp_path_factory) -> FixtureArchive:
    return build_iwslt_archive(tmp_path_factory.mktemp("src") / "de-en.tgz")


@pytest.fixture(scope="module")
def prepared(fixture_archive, tmp_path_factory):
    """The whole path: download through HTTP (checksum-verified), then prepare with the expected counts."""
    root = tmp_path_factory.mktemp("results")
    with serve() as srv:
        srv.files["de-en.tgz"] = fixture_archive.path.read_bytes()
        archive = fetch([srv.url("de-en.tgz")], root / "downloads" / "de-en.tgz", md5=fixture_archive.md5,
                        size=fixture_archive.size)
    out = root / "exp" / "data" / "prepared"
    stats = prepare({"file": archive.name, "expected_counts": fixture_archive.counts}, out, 1, archive.parent)
    return out, stats


def test_counts_and_files(prepared, fixture_archive):
    out, stats = prepared
    assert stats["counts"] == fixture_archive.counts
    assert stats["counts_checked"] is True
    for split in ("train", "valid", "test"):
        for lang in ("de", "en"):
            assert len(read_lines(out / f"{split}.{lang}")) == fixture_archive.counts[split]
    for split in ("valid", "test"):
        for lang in ("de", "en"):
            assert len(read_lines(out / f"{split}.raw.{lang}")) == fixture_archive.counts[split]
    assert json.loads((out / "stats.json").read_text())["counts"] == fixture_archive.counts


def test_tag_filtering(prepared, fixture_archive):
    out, stats = prepared
    for lang in ("de", "en"):
        f = stats["train_filter"][lang]
        assert f["dropped"] == fixture_archive.dropped
        assert f["title_description_lines"] == 4
        assert f["other_tag_lines"] == fixture_archive.other_tag_lines
        assert set(f["other_tags"]) == {"speaker", "reviewer", "translator"}
    text = "\n".join(read_lines(out / "train.en") + read_lines(out / "valid.en"))
    assert "talkid" not in text and "keywords" not in text and "www.ted.com/talks" not in text
    assert "&lt; title" not in text and "talk 1 : knowledge" in text  # tag removed, text kept
    assert "&lt; speaker &gt; jane doe &lt; / speaker &gt;" in text  # other tag lines kept and tokenized
    assert stats["cleaning"]["dropped"] == {"empty": 2, "too_long": 2, "too_short": 0, "ratio": 2,
                                            "word_too_long": 0}


def test_every_23rd_cleaned_line_is_valid(prepared, fixture_archive):
    out, _ = prepared
    for lang in ("de", "en"):
        assert read_lines(out / f"valid.raw.{lang}") == fixture_archive.valid_raw[lang]
    # valid is the tokenized, lowercased form of exactly those lines
    assert read_lines(out / "valid.en") == [
        "this is sentence number 18 in the talk .", "this is sentence number 36 in the talk ."]  # cleaned lines 23, 46
    train = read_lines(out / "train.en")
    assert not any(line in train for line in read_lines(out / "valid.en"))


def test_test_concatenation_order_and_segment_text(prepared, fixture_archive):
    out, stats = prepared
    assert list(stats["test_sets"]) == list(TEST_SETS)
    assert stats["test_sets"] == fixture_archive.test_sizes
    test_de, test_en = read_lines(out / "test.de"), read_lines(out / "test.en")
    assert [line.split()[0] for line in test_de] == fixture_archive.test_first_words
    assert [line.split()[0] for line in test_en] == fixture_archive.test_first_words
    # ’ -> ' before tokenization; the final abbreviation loses its period (fairseq's Moses).
    assert test_de[0] == "dev2010 segment 0 sagt „ hallo &apos; zu u.s.a ."
    assert test_en[0] == "dev2010 segment 0 says it &apos;s fine , e.g ."
    # raw references: seg tags and surrounding spaces stripped, nothing else changed
    assert read_lines(out / "test.raw.en")[0] == "dev2010 segment 0 says it’s fine, e.g."


def test_count_mismatch_stops_before_writing(fixture_archive, tmp_path):
    wrong = {**fixture_archive.counts, "train": 160239}
    with pytest.raises(LnReproError) as e:
        prepare({"file": fixture_archive.path.name, "expected_counts": wrong}, tmp_path / "out", 1,
                fixture_archive.path.parent)
    msg = str(e.value)
    assert "train: got" in msg and "160239" in msg and "--no-check-counts" in msg
    assert "defaults.data.iwslt14.expected_counts" in msg
    assert not (tmp_path / "out").exists()
    # Without expected counts (a non-official archive) preparation goes through.
    stats = prepare({"file": fixture_archive.path.name}, tmp_path / "out", 1, fixture_archive.path.parent)
    assert stats["counts_checked"] is False


def test_extracted_folder_and_missing_member(fixture_archive, tmp_path):
    folder = tmp_path / "orig"
    shutil.unpack_archive(fixture_archive.path, folder)
    stats = prepare({"file": folder.name, "expected_counts": fixture_archive.counts}, tmp_path / "a", 1, tmp_path)
    assert stats["counts"] == fixture_archive.counts
    (folder / "de-en" / "IWSLT14.TED.tst2012.de-en.en.xml").unlink()
    with pytest.raises(LnReproError, match="missing de-en/IWSLT14.TED.tst2012.de-en.en.xml"):
        prepare({"file": folder.name}, tmp_path / "b", 1, tmp_path)
    with pytest.raises(LnReproError, match="not a readable .tgz"):
        bad = tmp_path / "bad.tgz"
        bad.write_bytes(b"not a tar")
        prepare({"file": bad.name}, tmp_path / "c", 1, tmp_path)


def test_filter_and_segment_helpers():
    kept, stats = filter_train_lines(["<url>u</url>", "<title>T</title>", "x <talkid>1</talkid>", "text",
                                      "<doc docid=\"1\">"])
    assert kept == ["T", "text", '<doc docid="1">']
    assert stats["dropped"] == {"<url>": 1, "<talkid>": 1, "<keywords>": 0}
    assert stats["other_tags"] == {"doc": 1}
    segs, raw = extract_segments('<doc>\n<seg id="7">  It’s a test. \t</seg>\n<seg id="8"></seg>\n')
    assert segs == ["It's a test.", ""] and raw == ["It’s a test.", ""]


@pytest.mark.shared(SAMPLE)
@pytest.mark.parametrize("lang", ["de", "en"])
def test_dev2010_equals_fairseq_output(lang):
    """Our preparation of the real dev2010 XML equals what fairseq's prepare-iwslt14.sh made of it."""
    xml = (SAMPLE / "orig" / "de-en" / f"IWSLT14.TED.dev2010.de-en.{lang}.xml").read_text(encoding="utf-8")
    ref = split_lines((SAMPLE / "fairseq-tokenized" / f"IWSLT14.TED.dev2010.de-en.{lang}").read_text(encoding="utf-8"))
    ours, raw = prepare_xml(xml, lang)
    assert len(ref) == len(ours) == len(raw) == 887
    mismatches = [(i + 1, a, b) for i, (a, b) in enumerate(zip(ours, ref)) if a != b]
    assert not mismatches, f"{len(mismatches)}/887 lines differ, first: {mismatches[:3]}"
