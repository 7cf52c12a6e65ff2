"""The report's page tables: the computed tables reshaped for reading (one job: formatted cells, no new statistics).

Each function takes tables the builder computed (``lnrepro.analysis.build``) or the experiment's settings and
returns the table the page shows: seed means formatted with their spread (``per_epoch_table``), estimates with
their intervals (``effects_view``, ``cells_view``, ``claims_view``), the runs' differing and shared settings.
"""

from __future__ import annotations

import json
import math
from typing import Any, Iterable, Mapping, Sequence

import pandas as pd

from ...config.settings import FACTOR_KEYS, Experiment
from ...norms import NORMS
from .. import aggregate as ag
from ..numbers import END_DIGITS, interval, sig, signed
from ..sections.confounds import differing_keys, flatten


def setting_value(v: Any) -> Any:
    """A setting as a table cell: lists, tuples and mappings as JSON (decay_epochs [8]), the rest as is."""
    return json.dumps(v) if isinstance(v, (list, tuple, dict)) else v


def score_cell(row: pd.Series, col: str) -> str:
    """One run x epoch cell: seed mean (± std over seeds when several; ``numbers.sig``), 'diverged' when every seed
    diverged, the count of diverged seeds when some did, and the status when nothing was scored."""
    if row["status"] == ag.STATUS_DIVERGED:
        return ag.STATUS_DIVERGED
    mean = row.get(f"{col}_mean", math.nan)
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return ag.STATUS_DIVERGED if row["n_diverged"] > 0 else str(row["status"])
    s = sig(mean)
    if row["n_ok"] > 1 and not math.isnan(row.get(f"{col}_std", math.nan)):
        s += f" ± {sig(row[f'{col}_std'], END_DIGITS)}"
    if row["n_diverged"] > 0:
        s += f" ({int(row['n_diverged'])}/{int(row['n_seeds'])} diverged)"
    return s


NOT_THERE = "—"  # a per-epoch cell of a run that does not score the split there (or trains fewer epochs)


def per_epoch_table(run_epochs: pd.DataFrame, col: str, runs: Sequence[str],
                    scored: Mapping[str, Sequence[int]] | None = None) -> pd.DataFrame:
    """Rows: epoch (only those some run scores the column's split at, when ``scored`` gives each run's scored
    epochs); columns: runs (in ``select`` order); one formatted value per run per epoch, "—" where the run does
    not score the split (or trains fewer epochs)."""
    if scored is not None:
        keep = [int(ep) in scored.get(run, ()) for run, ep in zip(run_epochs["run"], run_epochs["epoch"])]
        run_epochs = run_epochs.loc[pd.Series(keep, index=run_epochs.index, dtype=bool)]
    if run_epochs.empty:
        return pd.DataFrame()
    cells = run_epochs.assign(cell=run_epochs.apply(lambda r: score_cell(r, col), axis=1))
    piv = cells.pivot(index="epoch", columns="run", values="cell")
    piv = piv[[r for r in runs if r in piv.columns]]
    piv = piv.fillna(ag.STATUS_MISSING)
    for run in piv.columns if scored is not None else ():  # an epoch another run scores the split at
        piv.loc[~piv.index.isin(scored.get(run, ())), run] = NOT_THERE
    piv.columns.name = None
    return piv.reset_index()


def _run_settings(experiment: Experiment) -> list[dict[str, Any]]:
    """Each selected run's settings under dotted keys, in ``select`` order."""
    return [experiment.runs[r].flat() for r in experiment.select]


def run_factors(experiment: Experiment) -> pd.DataFrame:
    """The selected runs with their level of each studied factor and every other key that differs between them."""
    settings = _run_settings(experiment)
    keys = list(FACTOR_KEYS.values())
    keys += [k for k in differing_keys(settings) if k not in keys]
    return pd.DataFrame([{"run": r, **{k: setting_value(f[k]) for k in keys}}
                         for r, f in zip(experiment.select, settings)])


def shared_settings(experiment: Experiment) -> list[tuple[str, Any]]:
    """Settings equal across all selected runs (bpe and the run sections), then the dataset. Sorted by key,
    the order the report has always listed them in (experiment.json's)."""
    settings = _run_settings(experiment)
    differ = set(differing_keys(settings))
    shared = [(f"bpe.{k}", v) for k, v in experiment.bpe.to_dict().items()]
    shared += [(k, v) for k, v in settings[0].items() if k not in differ]
    return sorted(shared) + [("data.dataset", experiment.data.dataset)]


def early_grad_table(layers_early: pd.DataFrame, runs: Sequence[str]) -> pd.DataFrame:
    """Per (stack, layer, sublayer): each run's early gradient norm averaged over seeds, runs in ``select`` order."""
    le = (layers_early.groupby(["stack", "layer", "sublayer", "run"], sort=False)["grad_norm_mean"].mean()
          .unstack("run").reset_index())
    le = le[["stack", "layer", "sublayer"] + [r for r in runs if r in le.columns]]
    le.columns.name = None
    return le


def interval_cell(v: float, lo: float, hi: float) -> str:
    """An estimate as one table cell: "1.2 [0.51, 1.9]" (``numbers.interval``), the value alone without an
    interval, "—" without one."""
    return interval(v, lo, hi)


def effects_view(effects: pd.DataFrame) -> pd.DataFrame:
    """tables/effects.csv on the page: a row per (metric, budget), a column per term, then the counts."""
    if effects.empty:
        return effects
    rows = []
    for (metric, budget), g in effects.groupby(["metric", "budget"], sort=False):
        first = g.iloc[0]
        rows.append({"metric": metric, "budget": budget,
                     **{r.effect: interval_cell(r.estimate, r.ci_low, r.ci_high) for r in g.itertuples()},
                     "df": _df_range(g["df"]), "n_seeds": first["n_seeds"], "n_left_out": first["n_left_out"],
                     "n_missing": first["n_missing"], "note": g.loc[g["estimate"].notna(), "note"].iloc[0]
                     if g["estimate"].notna().any() else first["note"]})
    return pd.DataFrame(rows)


def _df_range(df: pd.Series) -> str:
    """The degrees of freedom of a set of intervals: one number or "min–max" (one decimal), "—" without any."""
    v = df.dropna()
    if v.empty:
        return "—"
    lo, hi = f"{v.min():.1f}", f"{v.max():.1f}"
    return lo if lo == hi else f"{lo}–{hi}"


def effects_by_epoch_view(by_epoch: pd.DataFrame, metric: str) -> pd.DataFrame:
    """tables/effects_by_epoch.csv on the page, one metric: a row per epoch, a column per effect (each main
    effect followed by its simple effects, then the interactions), estimate [95% interval]."""
    m = by_epoch[by_epoch["metric"] == metric]
    if m.empty:
        return pd.DataFrame()
    order = []
    for f in FACTOR_KEYS:
        order.append(f)
        order += list(dict.fromkeys(m.loc[(m["kind"] == "simple") & (m["factor"] == f), "effect"]))
    order += [e for e in dict.fromkeys(m["effect"]) if e not in order]
    text = m.assign(cell=[interval_cell(r.estimate, r.ci_low, r.ci_high) for r in m.itertuples()])
    piv = text.pivot(index="epoch", columns="effect", values="cell")
    piv = piv[[c for c in order if c in piv.columns]]
    piv.columns.name = None
    out = piv.reset_index()
    out["df"] = [_df_range(m.loc[m["epoch"] == ep, "df"]) for ep in out["epoch"]]
    return out


def convergence_view(conv: pd.DataFrame) -> pd.DataFrame:
    """tables/convergence.csv on the page: the slope in bits an epoch and relative, each with its interval."""
    if conv.empty:
        return conv
    rows = []
    for r in conv.itertuples():
        rows.append({"run": r.run, "epochs": r.epochs if isinstance(r.epochs, str) else "—",
                     "seeds": r.n_seeds, "NLL first → last": "—" if pd.isna(r.nll_first) else
                     f"{sig(r.nll_first)} → {sig(r.nll_last)}",
                     "slope (bits/epoch)": interval_cell(r.slope, r.slope_low, r.slope_high),
                     "relative slope (%/epoch)": interval_cell(100 * r.rel_slope, 100 * r.rel_low, 100 * r.rel_high),
                     "learning rate cut": r.lr_cut or "—", "label": r.label or "fewer scored epochs than the window"})
    return pd.DataFrame(rows)


def fates_view(fates: pd.DataFrame, budget: str) -> pd.DataFrame:
    """tables/seed_fates.csv on the page at ``budget``: each seed's BLEU and NLL against the best run's (or its
    named reference's: ``against``), its fate."""
    f = fates[fates["budget"] == budget]
    if f.empty:
        return f
    against = f["reference"].where(f["reference"] != "", "best")
    return pd.DataFrame({"run": f["run"], "seed": f["seed"], "against": against, "BLEU": f["bleu"],
                         "BLEU / against": f["bleu_fraction"], "NLL (bits)": f["nll"], "NLL / against": f["nll_ratio"],
                         "fate": f["fate"]})


def implementation_notes(experiment: Experiment, notes: Sequence[str]) -> list[str]:
    """The implementation's deviations (paper.DEVIATIONS), with the schedule's reading followed by what this
    config does (its step-decay runs' decay epochs and factor), so that no preset number comes from the paper."""
    steps = {(tuple(s.decay_epochs or ()), s.decay_factor) for s in
             (experiment.runs[r].schedule for r in experiment.select) if s.decay == "step"}
    out = []
    for note in notes:
        if "epoch 8" in note and "schedule" in note:
            here = "; ".join(f"x{f:g} at the first update of epoch {', '.join(map(str, e))}" for e, f in sorted(steps))
            note += (f" This config's step-decay runs: {here} (schedule.decay_epochs, schedule.decay_factor)."
                     if here else " This config selects no step-decay run.")
        out.append(note)
    return out


def cells_view(cells: pd.DataFrame, runs: Sequence[str]) -> pd.DataFrame:
    """tables/cells.csv on the page: a row per run, a column per (metric, budget): mean [95% interval] (n)."""
    if cells.empty:
        return cells
    text = cells.assign(cell=[f"{interval_cell(r.mean, r.ci_low, r.ci_high)} ({r.n})" + (
        f", {r.n_left_out} left out" if r.n_left_out else "") for r in cells.itertuples()],
        column=cells["metric"] + " @ " + cells["budget"])
    piv = text.pivot(index="run", columns="column", values="cell")
    piv = piv.loc[[r for r in runs if r in piv.index], list(dict.fromkeys(text["column"]))]
    piv.columns.name = None
    return piv.reset_index()


def eval_settings(experiment: Experiment) -> list[tuple[str, Any]]:
    """The evaluation settings as key/value pairs, sorted by key; each split's epochs as the epochs it is scored
    at, per length of training where the selected runs differ in length ("10 epochs: [10]; 20 epochs: [20]")."""
    flat = flatten(experiment.eval.to_dict())
    pairs = [(k, v) for k, v in flat.items() if not k.endswith((".every", ".listed"))]
    for split, s in experiment.eval.splits.items():
        per = {n: list(s.scored(n)) for n in experiment.lengths}
        pairs.append((f"splits.{split}.epochs", next(iter(per.values())) if len(per) == 1 else
                      "; ".join(f"{n} epochs: {json.dumps(eps)}" for n, eps in per.items())))
    return sorted(pairs)


def key_values(pairs: Iterable[tuple[str, Any]]) -> pd.DataFrame:
    """The report's one key/value table (scaling, shared settings, evaluation settings): a row per setting."""
    return pd.DataFrame([{"key": k, "value": setting_value(v)} for k, v in pairs])


def claims_view(claims: pd.DataFrame) -> list[dict[str, Any]]:
    """tables/claims.csv on the page, a row per claim: the claim (its id in the tooltip), source, published value,
    the measured value with its interval, the scale it was measured at and the status; the explanation (what was
    measured, from how many seeds, the direction and the note) one sentence each, folded under the row. The depth
    study's claims (``depth.CLAIM_COLUMNS``: directional, no published value, no kind) read alike, each claim
    followed by the lr_max of its row."""
    rows = []
    for r in claims.itertuples():
        n = r.n_seeds if isinstance(r.n_seeds, str) else "" if pd.isna(r.n_seeds) else int(r.n_seeds)
        seeds = f"{n} seed{'' if n == 1 else 's'}" if n != "" else ""  # a count, or seeds per arm ("3/3")
        explanation = [f"Measured as {r.measured_as}." if isinstance(r.measured_as, str) and r.measured_as else "",
                       f"From {seeds}." if seeds and not pd.isna(r.measured) else "",
                       f"Kind: {r.kind}." if "kind" in claims else "",
                       f"{r.direction[0].upper()}{r.direction[1:]}." if isinstance(getattr(r, "direction", None), str)
                       and r.direction else "",
                       f"{r.note[0].upper()}{r.note[1:].rstrip('.')}." if isinstance(getattr(r, "note", None), str)
                       and r.note else ""]
        lr = getattr(r, "lr_max", math.nan)  # the depth claims: one row per learning rate
        claim = r.claim if pd.isna(lr) else f"{r.claim}, at lr_max {sig(lr)}"
        rows.append({"id": r.id, "claim": claim, "source": r.source, "published": getattr(r, "published", "—"),
                     "measured": interval_cell(r.measured, r.ci_low, r.ci_high), "scale": r.scale,
                     "status": r.status, "explanation": [s for s in explanation if s]})
    return rows


def variant_view(v: pd.DataFrame) -> pd.DataFrame:
    """variant_contrasts.csv's rows at one epoch, as the Variants section shows them."""
    out = pd.DataFrame({"variant run": v["variant_run"], "against": v["base_run"], "metric": v["metric"],
                        "variant": v["variant_mean"].map(sig), "base": v["base_mean"].map(sig),
                        "difference [95% Welch]": [(("+" if d > 0 else "") + interval(d, lo, hi)) if math.isfinite(lo)
                                                   else f"{signed(d)}, no interval: one seed on a side"
                                                   for d, lo, hi in zip(v["difference"], v["ci_low"], v["ci_high"])],
                        "seeds": v["seeds"], "differences": v["differences"]})
    return out.reset_index(drop=True)


def _depth_cells(cells: pd.DataFrame) -> dict[str, pd.Series]:
    """The columns that name a depth cell on the page: variant, layers, warm-up and lr_max."""
    return {"variant": cells["label"], "layers": cells["depth"],
            "warm-up": cells["warmup"].map({True: "yes", False: "no"}), "lr_max": cells["lr_max"]}


def depth_rates_view(rates: pd.DataFrame, budget: str) -> pd.DataFrame:
    """depth_rates.csv at one budget, as the Depth section shows it: each rate with its Wilson interval and its
    count in one cell, variant x depth x warm-up x lr_max."""
    at = rates[rates["budget"] == budget]
    return pd.DataFrame({
        **_depth_cells(at),
        "failure [Wilson 95%]": [f"{interval_cell(r.failure_rate, r.failure_low, r.failure_high)} ({r.n_failed}/"
                                 f"{r.n_with_fate})" for r in at.itertuples()],
        "divergence [Wilson 95%]": [f"{interval_cell(r.divergence_rate, r.divergence_low, r.divergence_high)} "
                                    f"({r.n_diverged}/{r.n_with_fate})" for r in at.itertuples()],
        "best run at this depth and lr_max": at["best_run_at_depth"], "run": at["run"]}).reset_index(drop=True)


def depth_sensitivity_view(table: pd.DataFrame) -> pd.DataFrame:
    """depth_rule_sensitivity.csv as the Depth section shows it: each cell's failed seeds by the study's rule and
    by its NLL part alone, the latter's rate with its Wilson interval."""
    if table.empty:
        return table
    return pd.DataFrame({
        **_depth_cells(table),
        "failed, the study's rule": [f"{r.n_failed}/{r.n_with_fate}" for r in table.itertuples()],
        "failed, NLL part alone [Wilson 95%]": [
            f"{interval_cell(r.failure_rate_nll_only, r.failure_low_nll_only, r.failure_high_nll_only)} "
            f"({r.n_failed_nll_only}/{r.n_with_fate})" for r in table.itertuples()],
        "run": table["run"]})


def hosts_view(hosts: pd.DataFrame) -> pd.DataFrame:
    """tables/hosts.csv on the page: a row per unit (run, seed) and job, the commit shortened to 12 digits and
    marked "+ changes" where its checkout had uncommitted changes."""
    commit = [(c[:12] + (" + changes" if d is True else "")) if c else "" for c, d in
              zip(hosts["git_commit"], hosts["git_dirty"])]
    return hosts.drop(columns=["host_key", "git_commit", "git_dirty"]).assign(commit=commit).rename(
        columns={"cpu_model": "CPU model", "cpu_flags": "CPU flags", "matmul_gflops": "fp32 matmul GFLOP/s"})


# A schedule's decay and a split's name as a reader says them.
DECAY_WORDS = {"isqrt": "inverse-sqrt decay", "step": "step decay", "constant": "constant learning rate"}
SPLIT_WORDS = {"valid": "validation", "test": "test"}
METRIC_WORDS = {"bleu_tok": "BLEU", "sacrebleu": "sacreBLEU", "loss_base2": "loss (bits)", "nll_base2": "NLL (bits)"}


def arm_words(experiment: Experiment, run: str) -> str:
    """A run as a reader names it: "Post-LN, warm-up, inverse-sqrt decay", from its config."""
    r = experiment.runs[run]
    return ", ".join((NORMS[r.model.norm].label, "warm-up" if r.schedule.warmup else "no warm-up",
                      DECAY_WORDS.get(r.schedule.decay, f"{r.schedule.decay} decay")))


def metric_words(metric: str) -> str:
    """A score column as a reader names it: "valid_bleu_tok" -> "validation BLEU"."""
    split, _, score = metric.partition("_")
    return f"{SPLIT_WORDS.get(split, split)} {METRIC_WORDS.get(score, score)}"


def names(experiment: Experiment) -> dict[str, str]:
    """Every run and scored metric of the experiment in words (``arm_words``, ``metric_words``): what the page's
    tables show in a cell that holds the identifier, the identifier in its tooltip. A grid's trial adds its grid
    and the values it tries ("..., grid g_post: optim.lr_max 0.002"); other runs the three factors do not tell
    apart add the settings in which they differ."""
    words = {run: arm_words(experiment, run) for run in experiment.runs}
    for name, grid in experiment.grids.items():
        for run in grid.runs:
            flat = experiment.runs[run].flat()
            words[run] += f", grid {name}: " + ", ".join(f"{k} {setting_value(flat[k])}" for k in grid.values)
    for same in (g for g in pd.Series(words).groupby(pd.Series(words)).groups.values() if len(g) > 1):
        flat = [experiment.runs[r].flat() for r in same]
        keys = differing_keys([experiment.runs[r].to_dict() for r in same])
        for run, f in zip(same, flat):
            words[run] += "".join(f", {k} {setting_value(f[k])}" for k in keys if k in f)
    metrics = {f"{split}_{score}": metric_words(f"{split}_{score}")
               for split in experiment.eval.splits for score in METRIC_WORDS}
    return {**words, **metrics}
