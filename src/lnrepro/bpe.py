"""One joint sentencepiece BPE model for both languages, and the encoded splits training reads.

Ids as in fairseq's dictionaries (<s>=0, <pad>=1, </s>=2, <unk>=3, counted in ``bpe.vocab_size``), identity
normalization and byte fallback, so every prepared line round-trips exactly:
``decode(sp, encode(sp, line)) == line``. fairseq's IWSLT recipe uses subword-nmt with separate dictionaries;
that difference is a listed deviation in the report.

Trainer settings and why:

* ``normalization_rule_name="identity"``: the prepared text is already what the model should see (no NFKC).
* ``remove_extra_whitespaces=False``: keep every space, so a line with double or edge spaces round-trips.
* ``add_dummy_prefix`` stays **on** (sentencepiece's default). The decoder strips the space it adds, so it
  does not break the round trip (tests cover empty lines and leading/trailing/double spaces), and without it
  the first word of every line is segmented differently from the same word elsewhere ("dog" -> "d og" but
  " dog" -> "▁dog"): a needless vocabulary split that subword-nmt does not have.
* ``split_digits`` stays off (default): it does not affect the round trip, and subword-nmt merges digits too.
* ``byte_fallback=True``: a character outside the vocabulary becomes its UTF-8 bytes (<0x..> pieces), never
  <unk>; its rate per split is reported so a too-small vocabulary or a corpus mismatch shows up.
* Reproducibility: sentencepiece has no trainer seed (``random_seed`` is not a TrainerSpec field; the only
  seed, ``set_random_generator_seed``, drives sampling). Its randomness in training is the sentence sampling,
  switched off here (``input_sentence_size=0`` loads every sentence, ``shuffle_input_sentence=False``), and
  the input order is fixed (train.de then train.en). The model is trained from an in-memory iterator into an
  in-memory writer, so no file path ends up in the model proto, and with ``num_threads=1``, because the
  TrainerSpec stored in spm.model records the thread count (BPE training gains nothing from threads; the
  learned pieces were checked to be identical at 1 and 2 threads). Hence the same data and config give a
  byte-identical spm.model on any machine and under any rule ``threads``.

The one input that cannot round-trip is the character U+2581 ("▁"), sentencepiece's own space marker,
which decodes to a space; ``apply_bpe`` counts such mismatches per split in stats.json.
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Iterable, Sequence

import sentencepiece as spm
from tqdm import tqdm

from .config.settings import BpeSettings
from .errors import LnReproError
from .io import atomic_write_bytes, atomic_write_json, atomic_write_text, file_sha256, read_lines, where_ran
from .paths import prepared_texts
from .vocab import BOS, EOS, PAD, UNK

SPLITS = ("train", "valid", "test")
LANGS = ("de", "en")
MODEL_NAME = "spm.model"
VOCAB_NAME = "spm.vocab"
SPECIALS = {BOS: "<s>", PAD: "<pad>", EOS: "</s>", UNK: "<unk>"}
N_BYTE_PIECES = 256

# Fixed trainer options (the config supplies vocab_size and character_coverage).
TRAINER_OPTIONS: dict = {
    "model_type": "bpe",
    "normalization_rule_name": "identity",
    "remove_extra_whitespaces": False,
    "add_dummy_prefix": True,
    "split_digits": False,
    "byte_fallback": True,
    "bos_id": BOS, "pad_id": PAD, "eos_id": EOS, "unk_id": UNK,
    "bos_piece": SPECIALS[BOS], "pad_piece": SPECIALS[PAD], "eos_piece": SPECIALS[EOS], "unk_piece": SPECIALS[UNK],
    "input_sentence_size": 0,
    "shuffle_input_sentence": False,
    "num_threads": 1,
}
_CHUNK = 10_000  # lines per batch call: large enough for the thread pool, small enough for smooth progress


def _read_split(prepared_dir: Path, split: str, lang: str) -> list[str]:
    path = Path(prepared_dir) / f"{split}.{lang}"
    if not path.is_file():
        raise LnReproError(f"{path}: prepared file not found (run the prepare stage first)")
    try:
        return read_lines(path)
    except UnicodeDecodeError:
        raise LnReproError(_not_utf8(path)) from None


def _read_pair(prepared_dir: Path, split: str) -> dict[str, list[str]]:
    """Both languages of a prepared split, which must have equal line counts."""
    texts = {lang: _read_split(prepared_dir, split, lang) for lang in LANGS}
    if len(texts["de"]) != len(texts["en"]):
        raise LnReproError(
            f"{prepared_dir}/{split}.de has {len(texts['de'])} lines but {split}.en has {len(texts['en'])}; "
            "the two sides of a parallel split must have equal line counts (prepare the data again)"
        )
    return texts


def _not_utf8(path: Path) -> str:
    """Where ``path`` stops being UTF-8, by line: the error of a streaming read counts bytes from its chunk."""
    data = path.read_bytes()
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        return (f"{path}:{line}: not UTF-8 text (byte 0x{data[err.start]:02x}); prepared files are UTF-8 as the "
                "prepare stage writes them: prepare the data again")
    return f"{path}: not UTF-8 text; prepared files are UTF-8 as the prepare stage writes them"


def _vocab_text(sp: spm.SentencePieceProcessor) -> str:
    """spm.vocab as sentencepiece writes it: one 'piece<TAB>score' line per id, in id order."""
    return "".join(f"{sp.id_to_piece(i)}\t{sp.get_score(i):g}\n" for i in range(sp.get_piece_size()))


def _vocab_error(err: Exception, vocab_size: int, prepared_dir: Path) -> LnReproError:
    """Turn sentencepiece's vocabulary-size failures into a message that names the config key."""
    msg = str(err)
    high = re.search(r"Vocabulary size too high \((\d+)\)\. Please set it to a value <= (\d+)", msg)
    if high:
        return LnReproError(
            f"bpe.vocab_size: {vocab_size} is larger than BPE can reach on {prepared_dir}/train.{{de,en}}; "
            f"set it to at most {high.group(2)}"
        )
    low = re.search(r"smaller than required_chars\. (\d+) vs (\d+)", msg)
    if low:
        return LnReproError(
            f"bpe.vocab_size: {vocab_size} is smaller than the {low.group(2)} pieces the training text needs "
            "(4 specials + 256 bytes + its characters); raise bpe.vocab_size or lower bpe.character_coverage"
        )
    return LnReproError(f"sentencepiece training on {prepared_dir}/train.{{de,en}} failed: {msg}")


def learn_bpe(prepared_dir: Path, out_dir: Path, settings: BpeSettings, threads: int = 1) -> Path:
    """Train the joint BPE model on train.de + train.en; write out_dir/spm.model and spm.vocab atomically.

    ``settings`` are the ``bpe`` settings (bpe.json), validated when the config was loaded. ``threads`` is accepted
    for a uniform stage API but training runs single-threaded on purpose (see the module docstring). Returns the
    path of spm.model.
    """
    vocab_size, coverage, seed = settings.vocab_size, settings.character_coverage, settings.seed
    prepared_dir, out_dir = Path(prepared_dir), Path(out_dir)
    lines = _read_split(prepared_dir, "train", "de") + _read_split(prepared_dir, "train", "en")
    if not any(lines):
        raise LnReproError(f"{prepared_dir}/train.{{de,en}}: no text to learn BPE from")
    # Only sampling-based encoding uses this seed; set anyway so that nothing random in sentencepiece is unseeded.
    spm.set_random_generator_seed(seed)
    writer = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(lines), model_writer=writer, vocab_size=vocab_size,
            character_coverage=coverage, minloglevel=1, **TRAINER_OPTIONS,
        )
    except RuntimeError as err:
        raise _vocab_error(err, vocab_size, prepared_dir) from err
    model = writer.getvalue()
    sp = spm.SentencePieceProcessor(model_proto=model)
    _check_specials(sp, "trained model")
    # Written in memory, renamed into place: a killed job never leaves a half-written model.
    atomic_write_text(out_dir / VOCAB_NAME, _vocab_text(sp))
    atomic_write_bytes(out_dir / MODEL_NAME, model)
    return out_dir / MODEL_NAME


def _check_specials(sp: spm.SentencePieceProcessor, where: object) -> None:
    for i, piece in SPECIALS.items():
        if sp.get_piece_size() <= i or sp.id_to_piece(i) != piece:
            raise LnReproError(f"{where}: expected piece {piece!r} at id {i} (fairseq's dictionary ids, lnrepro.vocab)")


def load_spm(path: Path) -> spm.SentencePieceProcessor:
    """Load spm.model (a file or a bpe directory) and check the special-symbol ids."""
    path = Path(path)
    if path.is_dir():
        path = path / MODEL_NAME
    if not path.is_file():
        raise LnReproError(f"{path}: sentencepiece model not found (run the bpe stage first)")
    try:
        sp = spm.SentencePieceProcessor(model_file=str(path))
    except (RuntimeError, OSError) as err:
        raise LnReproError(f"{path}: not a valid sentencepiece model ({err})") from err
    _check_specials(sp, path)
    return sp


def encode(sp: spm.SentencePieceProcessor, line: str) -> list[int]:
    """Piece ids of one prepared line, without BOS/EOS (loaders append EOS)."""
    return sp.encode(line, out_type=int)


def decode(sp: spm.SentencePieceProcessor, ids: Iterable[int]) -> str:
    """Text of piece ids; <s>, <pad> and </s> decode to nothing. ``decode(sp, encode(sp, x)) == x``."""
    return sp.decode([int(i) for i in ids])


def encode_batch(sp: spm.SentencePieceProcessor, lines: Sequence[str], threads: int = 1) -> list[list[int]]:
    """Batch :func:`encode` on sentencepiece's thread pool (same result as encoding line by line)."""
    return sp.encode(list(lines), out_type=int, num_threads=threads)


def apply_bpe(prepared_dir: Path, bpe_dir: Path, threads: int = 1) -> dict:
    """Encode every split and language into bpe_dir/{split}.{lang}.ids and write bpe_dir/stats.json.

    Each .ids line holds the space-separated piece ids of one sentence, without EOS. Every line is also
    decoded back and compared with its prepared text; mismatches are counted in the stats (expected 0).
    Returns the stats as written.
    """
    prepared_dir, bpe_dir = Path(prepared_dir), Path(bpe_dir)
    sp = load_spm(bpe_dir / MODEL_NAME)
    vocab = sp.get_piece_size()
    is_byte = bytearray(1 if sp.is_byte(i) else 0 for i in range(vocab))
    is_unk = bytearray(1 if i == UNK else 0 for i in range(vocab))
    stats: dict = {
        "vocab_size": vocab, "spm_model_sha256": file_sha256(bpe_dir / MODEL_NAME),
        "sentences": {}, "tokens": {}, "byte_pieces": {}, "unk_pieces": {}, "max_tokens": {},
        "byte_fallback_rate": {}, "byte_fallback_rate_by_lang": {}, "roundtrip_mismatches": {},
    }
    # Every split read and checked before anything is written: a bad split leaves no encoded files behind.
    all_texts = {split: _read_pair(prepared_dir, split) for split in SPLITS}
    for split, texts in all_texts.items():
        stats["sentences"][split] = len(texts["de"])
        for key in ("tokens", "byte_pieces", "unk_pieces", "max_tokens", "byte_fallback_rate_by_lang",
                    "roundtrip_mismatches"):
            stats[key][split] = {}
        for lang in LANGS:
            lines = texts[lang]
            out_lines: list[str] = []
            n_tok = n_byte = n_unk = max_len = mismatches = 0
            with tqdm(total=len(lines), desc=f"bpe {split}.{lang}", unit="line", leave=False) as bar:
                for start in range(0, len(lines), _CHUNK):
                    chunk = lines[start:start + _CHUNK]
                    ids = encode_batch(sp, chunk, threads)
                    back = sp.decode(ids, num_threads=threads)
                    mismatches += sum(a != b for a, b in zip(chunk, back))
                    for seq in ids:
                        n_tok += len(seq)
                        n_byte += sum(map(is_byte.__getitem__, seq))
                        n_unk += sum(map(is_unk.__getitem__, seq))
                        max_len = max(max_len, len(seq))
                        out_lines.append(" ".join(map(str, seq)))
                    bar.update(len(chunk))
            atomic_write_text(bpe_dir / f"{split}.{lang}.ids", "".join(f"{x}\n" for x in out_lines))
            stats["tokens"][split][lang] = n_tok
            stats["byte_pieces"][split][lang] = n_byte
            stats["unk_pieces"][split][lang] = n_unk
            stats["max_tokens"][split][lang] = max_len
            stats["byte_fallback_rate_by_lang"][split][lang] = n_byte / n_tok if n_tok else 0.0
            stats["roundtrip_mismatches"][split][lang] = mismatches
        total_tok = sum(stats["tokens"][split].values())
        total_byte = sum(stats["byte_pieces"][split].values())
        stats["byte_fallback_rate"][split] = total_byte / total_tok if total_tok else 0.0
    stats["trainer_options"] = {k: v for k, v in TRAINER_OPTIONS.items() if not k.endswith(("_id", "_piece"))}
    # the prepared files these splits were encoded from, and the raw references beside them: what ties a
    # scoring job's references to this BPE folder (lnrepro.evaluate.score.check_references)
    stats["prepared_sha256"] = {Path(p).name: file_sha256(p) for p in prepared_texts(str(prepared_dir))}
    stats["where_ran"] = where_ran()
    atomic_write_json(bpe_dir / "stats.json", stats)
    return stats
