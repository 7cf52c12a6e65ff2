"""The result tables ``lnrepro bench`` prints on stdout, from the JSON it writes (one source for both)."""

from __future__ import annotations


def _spread(s: dict) -> str:
    return f"±{50 * s['spread']:.0f}%"  # half the (max - min) / median range


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]

    def line(cells: list[str]) -> str:  # first column left-aligned, numbers right-aligned
        return "  ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


def padding(pad: dict) -> str:
    return "padded fraction of an epoch's training batches (padding / all positions): " + "; ".join(
        f"{name}: src {100 * p['src']:.1f}%, tgt {100 * p['tgt']:.1f}%, all {100 * p['all']:.1f}% "
        f"({p['batches']} batches)" for name, p in pad.items())


def training(rows: list[dict], peaks: dict | None) -> str:
    header = ["size", "prec", "tokens/batch", "project tok/s", "reference tok/s", "ratio (per-rep)"]
    if peaks:
        header += ["MFU project", "MFU reference", "peak GFLOP/s"]
    out = []
    for r in rows:
        p, q, rr = r["tokens_per_s"]["project"], r["tokens_per_s"]["reference"], r["ratio_per_rep"]
        cells = [r["size"], r["precision"], "/".join(map(str, r["target_tokens"])), f"{p['median']:,.0f} {_spread(p)}",
                 f"{q['median']:,.0f} {_spread(q)}", f"{r['ratio']:.2f} ({rr['min']:.2f}-{rr['max']:.2f})"]
        if peaks:
            pk = r["mfu"]["peak_flop_per_s"]
            cells += [f"{100 * r['mfu']['project']['mfu']:.1f}%", f"{100 * r['mfu']['reference']['mfu']:.1f}%",
                      f"{pk['median'] / 1e9:,.1f} {_spread(pk)}"]
        out.append(cells)
    return _table(header, out)


def peak(peaks: dict) -> str:
    return _table(["matmul peak", "n", "GFLOP/s"],
                  [[p, str(v["n"]), f"{v['median'] / 1e9:,.1f} {_spread(v)}"] for p, v in peaks.items()])


def scoring(score: dict) -> str:
    bp = score["beam_pair"]
    c, u = bp["sent_per_s"]["cached"], bp["sent_per_s"]["uncached"]
    pair = _table(["beam 5, test sentences", "cached sent/s", "uncached sent/s", "ratio (per-rep)", "identical"],
                  [[str(bp["sentences"]), f"{c['median']:.2f} {_spread(c)}", f"{u['median']:.2f} {_spread(u)}",
                    f"{bp['ratio']:.2f} ({bp['ratio_per_rep']['min']:.2f}-{bp['ratio_per_rep']['max']:.2f})",
                    str(bp["identical_outputs"])]])
    jobs = _table(["scoring job", "splits", "sentences", "wall s", "s/sentence", "decode sent/s", "BLEU tok"],
                  [[j["model"], "+".join(j["splits"]), str(j["sentences"]), f"{j['wall_s']:.1f}",
                    f"{j['s_per_sentence']:.3f}",
                    " ".join(f"{v['sent_per_s']:.1f}" for v in j["splits"].values()),
                    " ".join(f"{v['bleu_tok']:.1f}" for v in j["splits"].values())] for j in score["jobs"]])
    t = score["trained"]
    note = (f"trained-ish = {t['size']} Pre-LN after {t['updates']} updates of {t['max_tokens']} tokens "
            f"(loss {t['final_loss']:.2f}); mean hypothesis {bp['mean_hyp_tokens']:.1f} tokens")
    return "\n\n".join([pair, jobs, note])


def prepare(p: dict) -> str:
    one, allc = p["lines_per_s"]["one_process"], p["lines_per_s"]["all_cores"]
    sp = p["speedup_per_rep"]
    return _table(["Moses tokenization", "1 process lines/s", f"{p['cores']} processes lines/s", "speed-up (per-rep)"],
                  [[f"{p['lines']} lines", f"{one['median']:,.0f} {_spread(one)}",
                    f"{allc['median']:,.0f} {_spread(allc)}", f"{p['speedup']:.2f} ({sp['min']:.2f}-{sp['max']:.2f})"]])


def growth(g: dict) -> str:
    parts = []
    if "epoch" in g:
        parts.append(_table(["train pairs", "updates", "tokens", "batching s", "epoch s", "s/1k pairs", "s/1k tokens"],
                            [[str(r["pairs"]), str(r["updates"]), str(r["target_tokens"]), f"{r['setup_s']:.2f}",
                              f"{r['epoch_s']['median']:.2f} {_spread(r['epoch_s'])}", f"{r['s_per_1k_pairs']:.3f}",
                              f"{r['s_per_1k_tokens']:.4f}"] for r in g["epoch"]]))
    if "scoring" in g:
        parts.append(_table(["checkpoints", "sentences each", "total s", "s/checkpoint"],
                            [[str(r["checkpoints"]), str(r["sentences_each"]), f"{r['total_s']:.1f}",
                              f"{r['s_per_checkpoint']:.2f}"] for r in g["scoring"]]))
    return "\n\n".join(parts)


def profiles(items: list[dict], top: int = 8) -> str:
    out = []
    for p in items:
        out.append(f"{p['name']} (self CPU {p['self_cpu_s']:.2f} s, wall {p['wall_s']:.2f} s; {p['file']})")
        out.append(_table(["op", "self s", "share", "calls"],
                          [[e["op"], f"{e['self_cpu_s']:.3f}", f"{100 * e['share']:.1f}%", str(e["calls"])]
                           for e in p["top"][:top]]))
    return "\n".join(out)


def seed_training(rows: list[dict], against: str) -> str:
    """CPU seconds per seed-training, against ``against`` and this checkout, per seed; the ratios' range."""
    out = []
    for r in rows:
        a, t = r["against"], r["this"]
        out.append([r["precision"], str(r["seed"]), f"{a['cpu_s']:.1f}", f"{t['cpu_s']:.1f}",
                    f"{a['outside_updates_cpu_s']:.1f}", f"{t['outside_updates_cpu_s']:.1f}",
                    f"{a['study_cpu_s']:,.0f}", f"{t['study_cpu_s']:,.0f}", f"{r['ratio']:.3f}"])
    table = _table(["prec", "seed", f"{against} 1 epoch CPU s", "this 1 epoch CPU s", f"{against} outside updates",
                    "this outside updates", f"{against} study CPU s", "this study CPU s", "this / against"], out)
    by_prec: dict[str, list[float]] = {}
    for r in rows:
        by_prec.setdefault(r["precision"], []).append(r["ratio"])
    summary = "; ".join(f"{p}: ratio {sum(v) / len(v):.3f} mean over {len(v)} seeds ({min(v):.3f}-{max(v):.3f})"
                        for p, v in by_prec.items())
    how = ("the two commits' trainings of a seed at once, one per core, swapping cores seed by seed"
           if rows and rows[0].get("paired") else "one after the other, alternating the order")
    return (f"{table}\n{summary} (study CPU s: outside the updates once + the epoch's updates x the study's epochs; "
            f"{how})")
