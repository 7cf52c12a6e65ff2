"""Score one checkpoint: validation loss, decoding, tokenized BLEU and sacreBLEU on each split of its slice.

``score_checkpoint`` is the job of the ``score_checkpoint`` rules. It reads one epoch manifest and its group's
scoring slice (``eval.json`` or ``eval_{splits}.json``: ``lnrepro.config.settings.ScoreSettings``, the splits
due at that epoch with each split's decoding, validated when the config was loaded) and writes
``eval/epochNNN.json`` plus ``eval/epochNNN.{split}.hyp`` for each of those splits (the tokenized, lowercased
hypotheses, one per source line, in input order: the text tokenized BLEU scores; sacreBLEU scores their
Moses-detokenized form). Fields: docs/outputs.md.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import math
import time
from pathlib import Path
from typing import Any

import torch

from ..config.settings import ScoreSettings, SplitDecoding
from ..errors import LnReproError
from ..io import atomic_write_json, atomic_write_lines, cpu_name, file_sha256, read_json, read_lines, where_ran
from ..vocab import PAD
from .bleu import detok_sacrebleu, ids_to_text, load_spm, tokenized_bleu
from .search import DecodeOptions, length_batches, translate

__all__ = ["score_checkpoint", "validation_loss", "decode_options"]

LN2 = math.log(2.0)
_LINE_BREAKS = {ord(c): " " for c in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"}


def keep_freed_memory() -> None:
    """Have glibc's malloc keep freed memory for reuse instead of returning it to the kernel.

    Every decoding step allocates and frees tensors of tens of MB (logits and log-probabilities of all
    hypotheses); by default glibc maps each such block from the kernel and unmaps it when it is freed, so each
    step pays its page faults again (measured: half the page faults and about 8% of the CPU time of scoring a
    Multi30k checkpoint). mallopt(3): M_MMAP_MAX 0 serves every block from the heap, M_TRIM_THRESHOLD keeps up
    to 2 GB of freed heap. PyTorch's CPU performance guide recommends jemalloc or tcmalloc for the same reason.
    A C library without mallopt (not glibc) is left as it is.
    """
    mallopt = getattr(ctypes.CDLL(ctypes.util.find_library("c")), "mallopt", None)
    if mallopt is not None:
        m_trim_threshold, m_mmap_max = -1, -4  # glibc malloc.h
        mallopt(m_mmap_max, 0)
        mallopt(m_trim_threshold, 2**31 - 1)


def decode_options(split: SplitDecoding, max_tokens: int) -> DecodeOptions:
    """The decoder's options for one split of a scoring slice; min_len, unk_penalty and the cache keep fairseq's
    defaults."""
    return DecodeOptions(beam=split.beam, lenpen=split.lenpen, max_len_a=split.max_len_a, max_len_b=split.max_len_b,
                         max_tokens=max_tokens, precision=split.precision)


def _read_manifest(manifest: Path) -> dict:
    m = read_json(manifest)
    if not isinstance(m, dict) or "status" not in m or "epoch" not in m:
        raise LnReproError(f"{manifest}: not an epoch manifest (expected keys 'epoch', 'status', 'weights', 'sha256')")
    if m["status"] not in ("ok", "diverged", "stopped"):
        raise LnReproError(f"{manifest}: status {m['status']!r}; expected 'ok', 'diverged' or 'stopped'")
    return m


def _weights_path(manifest: Path, m: dict) -> Path:
    """The manifest's weights, relative to the run dir (manifest = run_dir/epochs/epochNNN.json), sha256-checked."""
    if not m.get("weights") or not m.get("sha256"):
        raise LnReproError(f"{manifest}: status 'ok' but 'weights' or 'sha256' is missing")
    path = manifest.resolve().parent.parent / m["weights"]
    if not path.is_file():
        raise LnReproError(f"{path}: weights file named by {manifest} not found")
    digest = file_sha256(path)
    if digest != m["sha256"]:
        raise LnReproError(f"{path}: corrupt checkpoint (sha256 {digest[:12]}... but {manifest} records "
                           f"{str(m['sha256'])[:12]}...)")
    return path


@torch.no_grad()
def validation_loss(model: torch.nn.Module, src: list[list[int]], tgt: list[list[int]], eps: float,
                    max_tokens: int, precision: str = "fp32") -> dict:
    """Teacher-forced label-smoothed loss and NLL per target token (EOS counted, padding not), nats and base 2.

    fairseq's validation loss: sums over the split divided by the number of target tokens (sample_size
    without --sentence-avg); fairseq logs them divided by ln 2 (base 2).
    """
    from ..train.batching import collate
    from ..train.loss import label_smoothed_nll_loss

    device = next(model.parameters()).device
    model.eval()
    loss_sum = nll_sum = 0.0
    ntok = 0
    lens = [max(len(s), len(t)) for s, t in zip(src, tgt)]
    autocast = torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=precision == "bf16")
    with autocast:
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


def _hyp_path(out_json: Path, split: str) -> Path:
    """eval/epochNNN.json -> eval/epochNNN.{split}.hyp (the rule's declared outputs)."""
    return out_json.parent / f"{out_json.stem}.{split}.hyp"


def score_checkpoint(manifest: Path, eval_json: Path, bpe_dir: Path, prepared_dir: Path, out_json: Path,
                     threads: int) -> dict:
    """Evaluate the checkpoint a manifest names on every split of its scoring slice, each with its decoding;
    write out_json and the splits' .hyp files."""
    t0 = time.perf_counter()
    manifest, eval_json, bpe_dir, prepared_dir, out_json = map(Path, (manifest, eval_json, bpe_dir, prepared_dir,
                                                                     out_json))
    torch.set_num_threads(max(1, int(threads)))
    keep_freed_memory()
    settings = ScoreSettings.read(eval_json)
    options = {split: decode_options(s, settings.max_tokens) for split, s in settings.splits.items()}
    m = _read_manifest(manifest)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev_name = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name()
    splits = list(settings.splits)
    result: dict[str, Any] = {
        "epoch": int(m["epoch"]),
        "status": m["status"],
        "run": m.get("run"),
        "seed": m.get("seed"),
        "updates": m.get("updates"),
        "weights": m.get("weights"),
        "weights_sha256": m.get("sha256"),
        "manifest": str(manifest),
        "decode": {split: dataclasses.asdict(opts) for split, opts in options.items()},
        "label_smoothing": settings.label_smoothing,
        "threads": int(threads),
        "torch": torch.__version__,
        "where_ran": where_ran(dev_name),
    }

    if m["status"] != "ok":
        # diverged (or stopped early): nothing to decode; the declared .hyp outputs exist and are empty
        for split in splits:
            atomic_write_lines(_hyp_path(out_json, split), [])
        result["splits"] = {split: None for split in splits}
        result["wall_s"] = time.perf_counter() - t0
        atomic_write_json(out_json, result)
        return result

    from ..model import load_model
    from ..train.batching import read_ids

    weights = _weights_path(manifest, m)
    sp = load_spm(bpe_dir / "spm.model")
    model = load_model(weights, device=device)
    result["model_config"] = dataclasses.asdict(model.cfg)

    per_split: dict[str, Any] = {}
    hyp_lines: dict[str, list[str]] = {}
    for split, opts in options.items():
        src_path, tgt_path = bpe_dir / f"{split}.de.ids", bpe_dir / f"{split}.en.ids"
        ref_path, raw_path = prepared_dir / f"{split}.en", prepared_dir / f"{split}.raw.en"
        src, tgt = read_ids(src_path, model.cfg.vocab_size), read_ids(tgt_path, model.cfg.vocab_size)
        try:
            refs, raw = read_lines(ref_path), read_lines(raw_path)
        except FileNotFoundError as e:
            raise LnReproError(f"{e.filename}: reference file not found") from e
        counts = {src_path: len(src), tgt_path: len(tgt), ref_path: len(refs), raw_path: len(raw)}
        if len(set(counts.values())) != 1 or not src:
            raise LnReproError(f"split '{split}': line counts differ or are zero: "
                               + ", ".join(f"{p}={n}" for p, n in counts.items()))

        losses = validation_loss(model, src, tgt, settings.label_smoothing, opts.max_tokens, opts.precision)
        if device.type == "cuda":
            torch.cuda.synchronize()
        td = time.perf_counter()
        out_ids = translate(model, src, opts, desc=f"epoch{int(m['epoch']):03d} {split}")
        if device.type == "cuda":
            torch.cuda.synchronize()
        decode_s = time.perf_counter() - td
        # a generated byte sequence could decode to a line-break character; keep one hypothesis per line
        hyps = [" ".join(ids_to_text(sp, ids).translate(_LINE_BREAKS).split()) for ids in out_ids]
        tok = tokenized_bleu(hyps, refs, what=f"{ref_path}")
        sac = detok_sacrebleu(hyps, raw, what=f"{raw_path}")
        hyp_lines[split] = hyps
        per_split[split] = {
            **{k: losses[k] for k in ("loss", "nll", "loss_base2", "nll_base2")},
            "target_tokens": losses["tokens"],
            "bleu_tok": tok.score,
            "bleu_tok_detail": tok.as_dict(),
            "sacrebleu": sac.score,
            "sacrebleu_signature": sac.signature,
            "sacrebleu_detail": sac.as_dict(),
            "sentences": len(src),
            "decode_s": decode_s,
            "sent_per_s": len(src) / decode_s if decode_s > 0 else None,
        }

    for split, hyps in hyp_lines.items():
        atomic_write_lines(_hyp_path(out_json, split), hyps)
    result["splits"] = per_split
    result["wall_s"] = time.perf_counter() - t0
    atomic_write_json(out_json, result)
    return result
