"""Fault suite, data: each fault is a real damaged file on disk, read by the stage that meets it
first; the outcome is one LnReproError naming the file (and line) and what was expected, with nothing written
that a later stage could take for finished output.

Data faults older tests already trigger (so not repeated here): a checksum mismatch
(tests/test_download.py: test_checksum_mismatch_names_both_digests_and_key, test_sha256_mismatch_names_the_sha256_key,
test_local_archive_is_verified_then_copied; tests/test_multi30k.py: test_mirror_with_wrong_digest_is_refused), a
download cut off mid-file (test_download.py: test_connection_dropped_mid_file), a missing IWSLT XML file
(test_iwslt14.py: test_extracted_folder_and_missing_member), raw files with mismatched line counts
(test_multi30k.py: test_misaligned_files_are_refused; test_synthetic.py: test_write_prepared_checks).
"""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import fake_bpe, tiny_experiment
from fixtures_iwslt import FixtureArchive, build_iwslt_archive, closed_port
from lnrepro import bpe
from lnrepro.config import BpeSettings
from lnrepro.data import iwslt14, multi30k, synthetic
from lnrepro.data.download import fetch
from lnrepro.errors import LnReproError

VOCAB = 40  # fake_bpe's spm.model
RUN_OUTPUTS = ("run.json", "summary.json", "train.jsonl", "epochs")


@pytest.fixture(scope="module")
def fixture_archive(tmp_path_factory) -> FixtureArchive:
    return build_iwslt_archive(tmp_path_factory.mktemp("src") / "de-en.tgz")


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    """A small, good prepared folder; each test damages a copy."""
    out = tmp_path_factory.mktemp("prepared")
    synthetic.prepare({"seed": 5, "train": 300, "valid": 20, "test": 20}, out)
    return out


def _copy(folder: Path, dest: Path) -> Path:
    dest.mkdir(parents=True)
    for f in folder.iterdir():
        (dest / f.name).write_bytes(f.read_bytes())
    return dest


def _model_only(bpe_dir: Path, dest: Path) -> Path:
    """A bpe folder before apply_bpe: spm.model alone."""
    dest.mkdir(parents=True)
    (dest / "spm.model").write_bytes((bpe_dir / "spm.model").read_bytes())
    return dest


def _one_line(e: pytest.ExceptionInfo) -> str:
    msg = str(e.value)
    assert "\n" not in msg
    return msg


# --- truncated archive ---------------------------------------------------------------------------------------

def test_a_truncated_local_archive_is_refused_before_it_is_copied(fixture_archive: FixtureArchive, tmp_path: Path) -> None:
    cut = tmp_path / "local" / "de-en.tgz"
    cut.parent.mkdir()
    cut.write_bytes(fixture_archive.path.read_bytes()[: fixture_archive.size // 2])
    dest = tmp_path / "downloads" / "de-en.tgz"
    with pytest.raises(LnReproError) as e:
        fetch([f"http://127.0.0.1:{closed_port()}/de-en.tgz"], dest, md5=fixture_archive.md5,
              size=fixture_archive.size, archive=cut, checksum_key="defaults.data.iwslt14.md5")
    msg = _one_line(e)
    assert str(cut) in msg and f"expected {fixture_archive.size} bytes" in msg
    assert not dest.parent.exists() or not any(dest.parent.iterdir())


def test_a_truncated_archive_in_downloads_stops_preparation(fixture_archive: FixtureArchive, tmp_path: Path) -> None:
    """A download folder whose archive was cut short after it was verified (a full disk, a bad copy)."""
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    (downloads / "de-en.tgz").write_bytes(fixture_archive.path.read_bytes()[: fixture_archive.size // 2])
    with pytest.raises(LnReproError, match=r"downloads/de-en\.tgz: not a readable \.tgz \(Compressed file ended") as e:
        iwslt14.prepare({"file": "de-en.tgz"}, tmp_path / "out", 1, downloads)
    _one_line(e)
    assert not (tmp_path / "out").exists()


# --- mismatched line counts and empty splits, stage by stage ------------------------------------------------

def test_prepared_splits_with_mismatched_line_counts_encode_nothing(prepared: Path, bpe_dir: Path, tmp_path: Path) -> None:
    damaged = _copy(prepared, tmp_path / "prepared")
    (damaged / "test.en").write_text((damaged / "test.en").read_text() + "one line too many\n")
    out = _model_only(bpe_dir, tmp_path / "bpe")
    with pytest.raises(LnReproError, match=r"prepared/test\.de has 20 lines but test\.en has 21; the two sides") as e:
        bpe.apply_bpe(damaged, out)
    _one_line(e)
    assert [p.name for p in out.iterdir()] == ["spm.model"]  # not even train.*.ids


def _tiny_multi30k(folder: Path, val: tuple[list[str], list[str]]) -> Path:
    folder.mkdir(parents=True)
    files = {"train": (["Ein Hund.", "Eine Katze."], ["A dog.", "A cat."]), "val": val,
             "test_2016_flickr": (["Ein Hund rennt."], ["A dog runs."])}
    for stem, (de, en) in files.items():
        for lang, lines in (("de", de), ("en", en)):
            with gzip.open(folder / f"{stem}.{lang}.gz", "wt", encoding="utf-8") as f:
                f.write("".join(line + "\n" for line in lines))
    return folder


def test_an_empty_split_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    folder = _tiny_multi30k(tmp_path / "downloads" / multi30k.FOLDER, ([], []))
    with pytest.raises(LnReproError, match=r"prepared split 'valid' is empty \(nothing written to .*out\)") as e:
        multi30k.prepare({}, tmp_path / "out", 1, folder.parent)
    _one_line(e)
    assert not (tmp_path / "out").exists()


def test_an_empty_prepared_train_split_learns_no_bpe(prepared: Path, tmp_path: Path) -> None:
    damaged = _copy(prepared, tmp_path / "prepared")
    for lang in ("de", "en"):
        (damaged / f"train.{lang}").write_text("")
    with pytest.raises(LnReproError, match=r"prepared/train\.\{de,en\}: no text to learn BPE from") as e:
        bpe.learn_bpe(damaged, tmp_path / "bpe", BpeSettings(300, 1.0, 1))
    _one_line(e)
    assert not (tmp_path / "bpe").exists()


# --- non-UTF-8 bytes in a prepared file ---------------------------------------------------------------------

def _latin1_at_line(path: Path, line: int) -> None:
    lines = path.read_bytes().split(b"\n")
    lines[line - 1] += " Gr\xfc\xdfe".encode("latin-1")  # what a file re-saved in Latin-1 holds
    path.write_bytes(b"\n".join(lines))


def test_non_utf8_bytes_name_the_file_and_line_when_learning(prepared: Path, tmp_path: Path) -> None:
    damaged = _copy(prepared, tmp_path / "prepared")
    _latin1_at_line(damaged / "train.en", 137)
    with pytest.raises(LnReproError) as e:
        bpe.learn_bpe(damaged, tmp_path / "bpe", BpeSettings(300, 1.0, 1))
    assert _one_line(e).startswith(f"{damaged / 'train.en'}:137: not UTF-8 text (byte 0xfc)")
    assert not (tmp_path / "bpe").exists()


def test_non_utf8_bytes_name_the_file_and_line_through_the_cli(prepared: Path, bpe_dir: Path, tmp_path: Path) -> None:
    """`lnrepro bpe apply`, as the apply_bpe rule runs it: one error line, exit status 1, no traceback, nothing
    encoded (the valid split is read before any split is written)."""
    damaged = _copy(prepared, tmp_path / "prepared")
    _latin1_at_line(damaged / "valid.de", 1)
    out = _model_only(bpe_dir, tmp_path / "bpe")
    proc = subprocess.run([sys.executable, "-m", "lnrepro", "bpe", "apply", "--bpe", str(out), "--prepared",
                           str(damaged)], capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        f"lnrepro bpe: error: {damaged / 'valid.de'}:1: not UTF-8 text (byte 0xfc); prepared files are UTF-8 as "
        "the prepare stage writes them: prepare the data again"]
    assert [p.name for p in out.iterdir()] == ["spm.model"]


# --- the encoded training split -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def bpe_dir(tmp_path_factory) -> Path:
    """A real spm.model of VOCAB pieces and a good train split (fake_bpe), for the stages after BPE."""
    return fake_bpe(tmp_path_factory.mktemp("bpe"), vocab=VOCAB)


@pytest.fixture(scope="module")
def run_config(tmp_path_factory) -> Path:
    """The demo's preln_warmup_isqrt run at the test's vocabulary scale, as write_run_config writes it."""
    path = tmp_path_factory.mktemp("cfg") / "config.json"
    tiny_experiment().run_config("preln_warmup_isqrt", 1).write(path)
    return path


def _damaged_ids(bpe_dir: Path, dest: Path, name: str, line: int, text: str) -> Path:
    out = _copy(bpe_dir, dest)
    lines = (out / name).read_text().splitlines()
    lines[line - 1] = text
    (out / name).write_text("".join(f"{x}\n" for x in lines))
    return out


def _trains_nothing(run_dir: Path) -> None:
    assert not any((run_dir / name).exists() for name in RUN_OUTPUTS)


def test_an_out_of_range_id_stops_training_before_the_first_update(bpe_dir: Path, run_config: Path, tmp_path: Path) -> None:
    """`lnrepro train`, as the train_run rule runs it: an id the embedding does not have (today: 125 updates,
    then torch's IndexError) is one message naming the file, the line and the id."""
    damaged = _damaged_ids(bpe_dir, tmp_path / "bpe", "train.en.ids", 7, f"5 6 {VOCAB} 7")
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "lnrepro", "train", "--config", str(run_config), "--bpe",
                           str(damaged), "--run-dir", str(run_dir)], capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"lnrepro train: error: {damaged / 'train.en.ids'}:7: id {VOCAB} is outside the vocabulary (expected ids 0 "
        f"to {VOCAB - 1}: spm.model has {VOCAB} pieces); encode the split again with this model (the apply_bpe stage)"]
    _trains_nothing(run_dir)


@pytest.mark.parametrize("name, line, text, message", [
    ("train.de.ids", 3, "-1 5", r"train\.de\.ids:3: id -1 is outside the vocabulary"),
    ("train.de.ids", 96, "", None),  # an empty line is an empty sentence (EOS only), not a fault
], ids=["negative id", "empty line"])
def test_ids_are_checked_against_the_vocabulary(bpe_dir: Path, tmp_path: Path, name: str, line: int, text: str,
                                                message: str | None) -> None:
    from lnrepro.train.batching import read_ids

    damaged = _damaged_ids(bpe_dir, tmp_path / "bpe", name, line, text)
    if message is None:
        assert read_ids(damaged / name, VOCAB)[line - 1] == [2]
        return
    with pytest.raises(LnReproError, match=message):
        read_ids(damaged / name, VOCAB)


@pytest.mark.parametrize("fault, message", [
    ("mismatched", r"train\.de\.ids has 96 lines but .*train\.en\.ids has 95"),
    ("empty", r"train\.de\.ids: no training pairs"),
])
def test_a_bad_encoded_split_trains_nothing(bpe_dir: Path, run_config: Path, tmp_path: Path, fault: str,
                                            message: str) -> None:
    from lnrepro.train.loop import train_run

    damaged = _copy(bpe_dir, tmp_path / "bpe")
    en = damaged / "train.en.ids"
    if fault == "mismatched":
        en.write_text("".join(f"{x}\n" for x in en.read_text().splitlines()[:-1]))
    else:
        for lang in ("de", "en"):
            (damaged / f"train.{lang}.ids").write_text("")
    with pytest.raises(LnReproError, match=message) as e:
        train_run(tmp_path / "run", run_config, damaged, threads=1)
    _one_line(e)
    _trains_nothing(tmp_path / "run")
