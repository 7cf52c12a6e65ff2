"""Score checkpoints: validation loss, decoding, tokenized BLEU and sacreBLEU on each split of a scoring slice.

``score(model, settings, data)`` is the in-memory core: a model, a scoring slice (``ScoreSettings``: the splits
with each split's decoding) and the splits' encoded sentences and references (``ScoringData``) in, one
``lnrepro.records.SplitScores`` and the hypotheses per split out. The bench calls it as it is.

``score_checkpoints`` is the job of the ``score_checkpoint`` rules, a shell around the core: one process for
every checkpoint of a run and seed that one group of splits is scored at (torch, the slice and the splits are
loaded once). It reads the group's scoring slice (``eval.json`` or ``eval_{splits}.json``, validated when the
config was loaded) and, per epoch manifest, checks that the BPE folder is the one the weights were trained with
(``spm.model`` against the manifest's ``data_sha256``, the encoded splits against ``bpe/stats.json``'s
``spm_model_sha256``), loads the weights the manifest names (their sha256 checked), scores, and writes
``eval/epochNNN.json`` (``lnrepro.records.CheckpointScores``, with the digest of every file it read) plus
``eval/epochNNN.{split}.hyp`` for each of
those splits (the tokenized, lowercased hypotheses, one per source line, in input order: the text tokenized
BLEU scores; sacreBLEU scores their Moses-detokenized form). Fields: docs/outputs.md.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..config.settings import VALID, ScoreSettings, SplitDecoding
from ..device import DEFAULT_DEVICE, device_name, select_device
from ..errors import LnReproError
from ..host import host_identity
from ..io import (atomic_write_lines, file_sha256, git_commit, process_cpu_s, process_wall_s, read_json, read_lines,
                  where_ran)
from ..memory import keep_freed_memory
from ..paths import EXPERIMENT_JSON, RunFolder
from ..precision import autocast
from ..records import CheckpointScores, EpochManifest, RunStatus, SplitScores
from ..train.batching import collate, read_ids
from ..train.loss import label_smoothed_nll_loss
from ..vocab import PAD
from .bleu import detok_sacrebleu, ids_to_text, load_spm, tokenized_bleu
from .search import DecodeOptions, length_batches, translate

__all__ = ["ScoringData", "Scores", "SplitData", "decode_options", "read_scoring_data", "score", "score_checkpoints",
           "skip_reason", "validation_loss"]

LN2 = math.log(2.0)
_LINE_BREAKS = {ord(c): " " for c in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"}


def decode_options(split: SplitDecoding, max_tokens: int) -> DecodeOptions:
    """The decoder's options for one split of a scoring slice; min_len, unk_penalty and the cache keep fairseq's
    defaults."""
    return DecodeOptions(beam=split.beam, lenpen=split.lenpen, max_len_a=split.max_len_a, max_len_b=split.max_len_b,
                         max_tokens=max_tokens, precision=split.precision)


@torch.no_grad()
def validation_loss(model: torch.nn.Module, src: list[list[int]], tgt: list[list[int]], eps: float,
                    max_tokens: int, precision: str = "fp32") -> dict:
    """Teacher-forced label-smoothed loss and NLL per target token (EOS counted, padding not), nats and base 2.

    fairseq's validation loss: sums over the split divided by the number of target tokens (sample_size
    without --sentence-avg); fairseq logs them divided by ln 2 (base 2).
    """
    device = next(model.parameters()).device
    model.eval()
    loss_sum = nll_sum = 0.0
    ntok = 0
    lens = [max(len(s), len(t)) for s, t in zip(src, tgt)]
    with autocast(device, precision):
        for idx in length_batches(lens, max_tokens):
            s, prev, target = collate([src[i] for i in idx], [tgt[i] for i in idx])
            s, prev, target = s.to(device), prev.to(device), target.to(device)
            logits = model(s, prev)
            loss, nll = label_smoothed_nll_loss(logits.float(), target, eps, ignore_index=PAD)
            loss_sum += float(loss)
            nll_sum += float(nll)
            ntok += int(target.ne(PAD).sum())
    if ntok == 0:
        raise ValueError("validation_loss: no target tokens")
    loss, nll = loss_sum / ntok, nll_sum / ntok
    return {"loss": loss, "nll": nll, "loss_base2": loss / LN2, "nll_base2": nll / LN2, "tokens": ntok}


@dataclass(frozen=True)
class SplitData:
    """One split's encoded sentences and its references: the prepared (tokenized, lowercased) text tokenized
    BLEU compares with, and the raw text sacreBLEU does; ``ref_file``, ``raw_file`` name them in messages."""

    src: list[list[int]]
    tgt: list[list[int]]
    refs: list[str]
    raw: list[str]
    ref_file: str
    raw_file: str


@dataclass(frozen=True)
class ScoringData:
    """What scoring reads besides the model: the sentencepiece model (hypotheses to text) and the splits."""

    sp: Any  # sentencepiece.SentencePieceProcessor
    splits: dict[str, SplitData]


@dataclass(frozen=True)
class Scores:
    """The core's result: per split its scores and its hypotheses (text, one per source sentence); a split not
    decoded (``skip_reason``) has None and no hypotheses, and its reason in ``skipped``."""

    splits: dict[str, SplitScores | None]
    hypotheses: dict[str, list[str]]
    skipped: dict[str, str] = dataclasses.field(default_factory=dict)


def skip_reason(valid: SplitScores | None, floor: float | None) -> str | None:
    """Why the checkpoint's other splits are not decoded: its valid BLEU (tokenized) below ``floor``
    (``eval.valid_bleu_floor``; a model that has not learned to stop decodes every sentence to the length limit,
    minutes of beam search for no information), else None (also without a floor or a valid score)."""
    if floor is None or valid is None or valid.bleu_tok >= floor:
        return None
    return f"skipped: valid BLEU {valid.bleu_tok:.2f} below the floor {floor:g} (eval.valid_bleu_floor)"


def split_files(bpe_dir: Path, prepared_dir: Path, split: str) -> tuple[Path, Path, Path, Path]:
    """The files scoring reads for one split: ``{split}.de.ids``, ``{split}.en.ids`` (under the BPE folder), the
    references ``{split}.en`` and ``{split}.raw.en`` (under the prepared folder)."""
    return (Path(bpe_dir) / f"{split}.de.ids", Path(bpe_dir) / f"{split}.en.ids",
            Path(prepared_dir) / f"{split}.en", Path(prepared_dir) / f"{split}.raw.en")


def check_bpe(manifest: EpochManifest, manifest_path: Path, bpe_dir: Path) -> None:
    """Refuse a BPE folder other than the one the checkpoint was trained with (same vocabulary size or not, its
    ids mean other pieces: the scores would be silently wrong), and encoded splits not made with its model."""
    spm_path, stats = Path(bpe_dir) / "spm.model", Path(bpe_dir) / "stats.json"
    if manifest.data_sha256 is None:
        raise LnReproError(f"{manifest_path}: records no data_sha256 (the BPE model and data its weights were "
                           "trained with; a manifest of an older lnrepro), so the BPE folder cannot be checked: "
                           "train the run again (rule train_run: snakemake --forcerun train_run)")
    actual, trained = file_sha256(spm_path), manifest.data_sha256.get("spm.model", "?")
    if actual != trained:
        raise LnReproError(f"{spm_path}: not the BPE model {manifest_path} was trained with (sha256 {actual[:12]}..., "
                           f"the checkpoint's {trained[:12]}...): the BPE folder of another experiment, or one "
                           "learned again since. Score with the run's own BPE folder (results/{exp}/data/bpe), or "
                           "train the run again on this one (rule train_run)")
    encoded_with = read_json(stats).get("spm_model_sha256") if stats.exists() else None
    if encoded_with != actual:
        raise LnReproError(f"{bpe_dir}: its encoded splits were not made with {spm_path} ({stats} records "
                           f"spm_model_sha256 {str(encoded_with)[:12]}..., the model's sha256 is {actual[:12]}...): "
                           "encode them again (rule apply_bpe: snakemake --forcerun apply_bpe)")


def check_references(bpe_dir: Path, prepared_dir: Path, splits: list[str], digests: dict[str, str]) -> None:
    """Refuse references other than the ones the BPE folder's splits were encoded from (``bpe/stats.json``'s
    ``prepared_sha256``; the BPE model is the checkpoint's, ``check_bpe``): another experiment's prepared folder
    scores every hypothesis against the wrong sentences. ``digests``: the sha256 of each file read, by name. A
    BPE folder of an older lnrepro records no digests: said on stderr, scored unchecked."""
    stats = Path(bpe_dir) / "stats.json"
    encoded_from = read_json(stats).get("prepared_sha256") if stats.exists() else None
    if encoded_from is None:
        print(f"{stats}: records no prepared_sha256 (an older lnrepro): the references in {prepared_dir} cannot be "
              "checked against the encoded splits", file=sys.stderr)
        return
    for split in splits:
        for ref in split_files(bpe_dir, prepared_dir, split)[2:]:
            if digests[ref.name] != encoded_from.get(ref.name):
                raise LnReproError(
                    f"{ref}: not the references {bpe_dir}'s splits were encoded from (sha256 "
                    f"{digests[ref.name][:12]}..., {stats} records {str(encoded_from.get(ref.name))[:12]}...): the "
                    "prepared folder of another experiment, or one prepared again since. Score with the "
                    "experiment's own prepared folder (results/{exp}/data/prepared), or encode it again "
                    "(rule apply_bpe: snakemake --forcerun apply_bpe)")


def read_scoring_data(bpe_dir: Path, prepared_dir: Path, splits: list[str], vocab_size: int) -> ScoringData:
    """``spm.model``, ``{split}.{de,en}.ids`` and ``data/prepared/{split}.en``, ``{split}.raw.en`` of each split;
    line counts that differ or are zero are an error naming the files."""
    bpe_dir, prepared_dir = Path(bpe_dir), Path(prepared_dir)
    out: dict[str, SplitData] = {}
    for split in splits:
        src_path, tgt_path, ref_path, raw_path = split_files(bpe_dir, prepared_dir, split)
        src, tgt = read_ids(src_path, vocab_size), read_ids(tgt_path, vocab_size)
        try:
            refs, raw = read_lines(ref_path), read_lines(raw_path)
        except FileNotFoundError as e:
            raise LnReproError(f"{e.filename}: reference file not found") from e
        counts = {src_path: len(src), tgt_path: len(tgt), ref_path: len(refs), raw_path: len(raw)}
        if len(set(counts.values())) != 1 or not src:
            raise LnReproError(f"split '{split}': line counts differ or are zero: "
                               + ", ".join(f"{p}={n}" for p, n in counts.items()))
        out[split] = SplitData(src, tgt, refs, raw, str(ref_path), str(raw_path))
    return ScoringData(load_spm(bpe_dir / "spm.model"), out)


def score(model: torch.nn.Module, settings: ScoreSettings, data: ScoringData, label: str = "") -> Scores:
    """Score ``model`` on every split of ``settings`` with that split's decoding: the validation loss, the
    search (timed alone), tokenized BLEU and sacreBLEU. ``label`` prefixes the progress bars."""
    device = next(model.parameters()).device
    per_split: dict[str, SplitScores | None] = {}
    hypotheses: dict[str, list[str]] = {}
    skipped: dict[str, str] = {}
    order = sorted(settings.splits, key=lambda s: s != VALID)  # valid first: the floor reads it
    for split in order:
        decoding = settings.splits[split]
        reason = None if split == VALID else skip_reason(per_split.get(VALID), settings.valid_bleu_floor)
        if reason is not None:
            print(f"{label} {split}: {reason}".strip(), file=sys.stderr)
            per_split[split], hypotheses[split], skipped[split] = None, [], reason
            continue
        opts, d = decode_options(decoding, settings.max_tokens), data.splits[split]
        losses = validation_loss(model, d.src, d.tgt, settings.label_smoothing, opts.max_tokens, opts.precision)
        if device.type == "cuda":
            torch.cuda.synchronize()
        td = time.perf_counter()
        out_ids = translate(model, d.src, opts, desc=f"{label} {split}".strip())
        if device.type == "cuda":
            torch.cuda.synchronize()
        decode_s = time.perf_counter() - td
        # a generated byte sequence could decode to a line-break character; keep one hypothesis per line
        hyps = [" ".join(ids_to_text(data.sp, ids).translate(_LINE_BREAKS).split()) for ids in out_ids]
        tok = tokenized_bleu(hyps, d.refs, what=d.ref_file)
        sac = detok_sacrebleu(hyps, d.raw, what=d.raw_file)
        hypotheses[split] = hyps
        per_split[split] = SplitScores(
            **{k: losses[k] for k in ("loss", "nll", "loss_base2", "nll_base2")},
            target_tokens=losses["tokens"], bleu_tok=tok.score, bleu_tok_detail=tok.as_dict(),
            sacrebleu=sac.score, sacrebleu_signature=sac.signature, sacrebleu_detail=sac.as_dict(),
            sentences=len(d.src), decode_s=decode_s, sent_per_s=len(d.src) / decode_s if decode_s > 0 else None)
    return Scores({split: per_split[split] for split in settings.splits}, hypotheses, skipped)


def check_slice(eval_json: Path, expected: str | None) -> None:
    """Refuse a scoring slice whose sha256 is not ``expected``, the digest of the slice the experiment resolves
    (``ScoreSettings.sha256``, passed by the workflow): a hand edit would rescore every checkpoint with settings
    experiment.json and the report do not show (as the trainer refuses a hand-edited config.json)."""
    if expected is None:
        return
    actual = file_sha256(eval_json)
    if actual != expected:
        raise LnReproError(
            f"{eval_json}: not the scoring slice the experiment's eval settings give (its sha256 is {actual[:12]}..., "
            f"the configuration gives {expected[:12]}..., the settings in {Path(eval_json).parent / EXPERIMENT_JSON}"
            f"): edited by hand or written from another configuration. Nothing was scored; delete it so that "
            f"snakemake writes it again from the configuration, or set the change in the config files instead")


def _write_hypotheses(out_json: Path, hypotheses: dict[str, list[str]]) -> dict[str, str]:
    """Write each split's hypotheses beside the score file ``out_json``; their files' digests, by split, which the
    score file records so that a publish can tell hypotheses changed after scoring."""
    written = {}
    for split, hyps in hypotheses.items():
        path = RunFolder.hypotheses_beside(out_json, split)
        atomic_write_lines(path, hyps)
        written[split] = file_sha256(path)
    return written


def score_checkpoints(manifests: list[Path], eval_json: Path, bpe_dir: Path, prepared_dir: Path,
                      out_jsons: list[Path], threads: int, device: str = DEFAULT_DEVICE,
                      eval_sha256: str | None = None) -> list[CheckpointScores]:
    """Evaluate the checkpoint each manifest names on every split of the scoring slice, each with its decoding,
    on ``device`` (cpu | cuda: ``lnrepro.device.select_device``), in this one process; write each out_json (and
    the splits' .hyp files beside it) as soon as it is scored. ``eval_sha256``: the digest the slice must have
    (``check_slice``), checked before anything is read.

    A record's wall_s and cpu_s are its checkpoint's share of the job: its own scoring plus the job's start-up
    (imports, the slice, the splits) divided equally among the job's checkpoints, so that a job's records sum to
    its wall-clock and CPU time (``job_checkpoints`` says among how many)."""
    from ..model import load_model

    manifests, out_jsons = [Path(m) for m in manifests], [Path(o) for o in out_jsons]
    if len(manifests) != len(out_jsons) or not manifests:
        raise LnReproError(f"{len(manifests)} manifests and {len(out_jsons)} score files: one score file each")
    eval_json, bpe_dir, prepared_dir = map(Path, (eval_json, bpe_dir, prepared_dir))
    check_slice(eval_json, eval_sha256)
    torch.set_num_threads(max(1, int(threads)))
    keep_freed_memory()
    host = host_identity(max(1, int(threads)))  # a matmul of its own: no RNG or model touched
    commit, dirty = git_commit()
    settings = ScoreSettings.read(eval_json)
    torch_device = select_device(device)
    dev_name = device_name(torch_device)
    splits = list(settings.splits)
    data: dict[int, ScoringData] = {}  # the splits, read once (per vocabulary size: the ids are checked by it)
    n = len(manifests)
    decode = {split: dataclasses.asdict(decode_options(s, settings.max_tokens))
              for split, s in settings.splits.items()}
    inputs = {eval_json.name: file_sha256(eval_json)}  # the digests of the files read, in each score file
    read = [bpe_dir / "spm.model", *(f for split in splits for f in split_files(bpe_dir, prepared_dir, split))]
    read_sha256: dict[str, str] = {}  # those of the BPE model and the splits, hashed once when first read
    startup_wall, startup_cpu = process_wall_s(), process_cpu_s()  # since the process started: imports included

    records = []
    for manifest, out_json in zip(manifests, out_jsons):
        t0, c0 = time.perf_counter(), process_cpu_s()
        m = EpochManifest.read(manifest)
        common: dict[str, Any] = {
            "epoch": m.epoch, "status": m.status, "run": m.run, "seed": m.seed, "updates": m.updates,
            "weights": m.weights, "weights_sha256": m.sha256, "manifest": str(manifest),
            "decode": decode, "label_smoothing": settings.label_smoothing, "threads": int(threads),
            "torch": torch.__version__,
            "where_ran": where_ran(dev_name), "job_checkpoints": n, "host": host, "git_commit": commit,
            "git_dirty": dirty,
        }

        def cost() -> dict[str, float]:
            return {"wall_s": time.perf_counter() - t0 + startup_wall / n,
                    "cpu_s": process_cpu_s() - c0 + startup_cpu / n}

        if m.status != RunStatus.OK:
            # diverged (or stopped early): nothing to decode; the declared .hyp outputs exist and are empty
            written = _write_hypotheses(out_json, {split: [] for split in splits})
            record = CheckpointScores(**common, splits={split: None for split in splits}, inputs_sha256=inputs,
                                      hypotheses_sha256=written, **cost())
        else:
            check_bpe(m, manifest, bpe_dir)
            model = load_model(m.weights_file(RunFolder.of_manifest(manifest).root, manifest), device=torch_device)
            vocab = model.cfg.vocab_size
            if vocab not in data:
                data[vocab] = read_scoring_data(bpe_dir, prepared_dir, splits, vocab)
                if not read_sha256:
                    read_sha256 = {f.name: file_sha256(f) for f in read}
                    check_references(bpe_dir, prepared_dir, splits, read_sha256)
            scores = score(model, settings, data[vocab], label=f"epoch{m.epoch:03d}")
            written = _write_hypotheses(out_json, scores.hypotheses)
            record = CheckpointScores(**common, model_config=dataclasses.asdict(model.cfg), splits=scores.splits,
                                      inputs_sha256={**inputs, **read_sha256}, skipped=scores.skipped or None,
                                      hypotheses_sha256=written, **cost())
        record.write(out_json)
        records.append(record)
    return records
