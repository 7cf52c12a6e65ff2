"""The depth study: which norm variants train at which depth, with and without warm-up (one job: the
depth section's tables, from the aggregate and the study).

A cell is a selected run: a variant (``model.norm``) at a depth (``model.encoder_layers``; the presets give the
decoder as many) with or without warm-up, at a learning rate (``optim.lr_max``). Per cell and epoch budget, over
its seeds:

- divergence: the seed's training stopped at a non-finite loss (or one above ``train.diverge_loss``: the
  trainer's one divergence rule, ``RunStatus.DIVERGED``);
- failure: the report's failure rule (``budget.seed_fates``, stated by ``budget.failure_rule``) applied among the
  runs of the same depth and lr_max, so a seed is judged against the best cell at its own depth, learning rate and
  budget (an 18-layer seed is not failed for being worse than a 6-layer one, nor a seed at a smaller lr_max for
  learning more slowly in the same epochs than one at a larger);
- each rate with its Wilson 95% interval (statsmodels ``proportion_confint``), and the smallest difference of two
  rates the design resolves: the smallest |k1/n1 - k2/n2| whose Newcombe 95% interval of the difference
  (statsmodels ``confint_proportions_2indep``) excludes 0, at the design's seeds per cell.

Quality at the budget and the time to quality targets are given for the seeds that trained (``fate`` trained):
"trains" and "trains fast" are separate statements. The time to a target is each seed's epoch, update count,
training CPU time and wall-clock interpolated between its scored checkpoints (``answer.crossing``), the targets
fractions (``analysis.report.quality_fractions``) of the best cell's final seed-mean BLEU at the same depth
(over every lr_max: one target for the cells of a depth, so that learning rates compare too).

The claims of the references are directional (a difference of rates, or a rate against one half), judged by
the claims table's status rules (``claims.status``) at each lr_max at which every cell a claim names is selected,
one row per claim and lr_max (a rate's all-fail is never pooled with another rate's); a question without a
published answer (Pre-LN without its final LayerNorm: like Pre-LN or like Post-LN?) is measured and marked
``OPEN``. The section's finding (``finding``) says which variants trained at the deepest depth without warm-up, at
each lr_max, and what their gradient at initialization predicted (Figure 3(c)'s exponent b). The confounds table
lists what each variant changes beside the norm position (``lnrepro.norms.NormVariant.differences``).

A post-hoc reading sits beside the rule, labelled as such and never the finding (``nll_only``): the rule's NLL
part alone, by which a seed that learns but lags the best cell's BLEU within a short budget counts as trained
and only a stalled or diverged one as failed; its table gives each cell's failures both ways, and the claims are
judged again by it.

The section exists only when the selected runs have more than one depth (``Experiment.depths``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Sequence

import pandas as pd

from ...config.settings import Experiment, ReportSettings
from ...norms import NORMS
from ..numbers import interval, norm_label, sig
from ..stats import budget as bu
from . import claims as cl
from .answer import MEASURES, crossing
from ..results import SeedResults

LEVEL = 0.95
OPEN = "no published claim: measured only"
RATE_COLUMNS = ["budget", "epoch", "run", "variant", "label", "depth", "warmup", "lr_max", "n_seeds", "n_with_fate",
                "n_diverged", "divergence_rate", "divergence_low", "divergence_high", "n_failed", "failure_rate",
                "failure_low", "failure_high", "best_run_at_depth"]
QUALITY_COLUMNS = ["run", "variant", "depth", "warmup", "lr_max", "metric", "n_trained", "mean", "std", "ci_low",
                   "ci_high"]
TIME_COLUMNS = ["run", "variant", "depth", "warmup", "lr_max", "metric", "fraction", "target", "n_trained", "n_reached",
                *MEASURES, *(f"{m}_{e}" for m in MEASURES for e in ("low", "high"))]
TEST_COLUMNS = ["run", "seed", "depth", "epoch", "test", "bleu_tok", "sacrebleu"]
CONFOUND_COLUMNS = ["variant", "label", "final_norm", "runs", "differences"]
CLAIM_COLUMNS = ["id", "lr_max", "claim", "source", "scale", "measured_as", "measured", "ci_low", "ci_high", "n_seeds",
                 "status", "note"]
SENSITIVITY_COLUMNS = ["run", "label", "depth", "warmup", "lr_max", "n_with_fate", "n_failed", "failure_nll_ratio",
                       "n_failed_nll_only", "failure_rate_nll_only", "failure_low_nll_only", "failure_high_nll_only"]
KEYS = ("run", "variant", "depth", "warmup", "lr_max")  # a cell's columns in the quality and time tables


def depth_of(experiment: Experiment, run: str) -> int:
    """A run's depth L: its encoder layers (the presets give the decoder as many; ``decoder_layers`` stays in
    the run facts)."""
    return experiment.runs[run].model.encoder_layers


def lr_of(experiment: Experiment, run: str) -> float:
    """A run's learning rate: its ``optim.lr_max``."""
    return experiment.runs[run].optim.lr_max


def learning_rates(experiment: Experiment) -> tuple[float, ...]:
    """The selected runs' lr_max values, each once, in the order the selection first has them."""
    return tuple(dict.fromkeys(lr_of(experiment, run) for run in experiment.select))


def wilson(k: int, n: int, level: float = LEVEL) -> tuple[float, float, float]:
    """k / n with its Wilson ``level`` interval (NaN without seeds)."""
    from statsmodels.stats.proportion import proportion_confint

    if n == 0:
        return (math.nan,) * 3
    lo, hi = proportion_confint(k, n, alpha=1 - level, method="wilson")
    # statsmodels' bound for 0 of n (n of n) misses 0 (1) by a rounding error: snapped, as the rate is exact
    return k / n, round(float(lo), 12), round(float(hi), 12)


def rate_difference(k1: int, n1: int, k2: int, n2: int, level: float = LEVEL) -> tuple[float, float, float]:
    """k1/n1 - k2/n2 with its Newcombe (hybrid Wilson score) ``level`` interval (NaN without seeds)."""
    from statsmodels.stats.proportion import confint_proportions_2indep

    if n1 == 0 or n2 == 0:
        return (math.nan,) * 3
    lo, hi = confint_proportions_2indep(k1, n1, k2, n2, method="newcomb", alpha=1 - level)
    return k1 / n1 - k2 / n2, float(lo), float(hi)


def smallest_resolved(n1: int, n2: int, level: float = LEVEL) -> float:
    """The smallest |k1/n1 - k2/n2| over every outcome of two cells of n1 and n2 seeds whose interval
    (``rate_difference``) excludes 0; NaN when no outcome does."""
    found = [abs(d) for k1 in range(n1 + 1) for k2 in range(n2 + 1)
             for d, lo, hi in [rate_difference(k1, n1, k2, n2, level)] if lo > 0 or hi < 0]
    return min(found) if found else math.nan


def resolution_text(seeds: Sequence[int]) -> str:
    """The smallest difference of two cells' rates the design resolves, in words (printed with the rates): for
    each number of seeds a cell has (``seeds``: per cell, those without a seed left out), the largest first."""
    counts = sorted({int(n) for n in seeds if n > 0}, reverse=True)
    if not counts:
        return "no cell has a seed with a fate yet: no difference of rates is resolved"
    return "; ".join(_resolution(n, single=len(counts) == 1) for n in counts)


def _resolution(n: int, single: bool) -> str:
    d = smallest_resolved(n, n)
    lo, hi = wilson(0, n)[1:], wilson(n, n)[1:]
    what = (f"only a difference of {d:.2f} or more (e.g. {round(d * n)} of {n} seeds against 0 of {n})"
            if math.isfinite(d) else "no difference at all")
    cells = "per cell" if single else "in both cells"
    return (f"with {n} seeds {cells}, {what} has a 95% interval (Newcombe) that excludes 0; a single cell's "
            f"Wilson 95% interval is [{lo[0]:.2f}, {lo[1]:.2f}] for 0 of {n} and [{hi[0]:.2f}, {hi[1]:.2f}] for "
            f"{n} of {n}")


@dataclass(frozen=True)
class Depth:
    """The depth section's tables (empty when the experiment has one depth)."""

    depths: list[int]
    rates: pd.DataFrame  # RATE_COLUMNS, every epoch budget
    fates: pd.DataFrame  # budget.seed_fates per depth (FATE_COLUMNS + depth)
    quality: pd.DataFrame  # QUALITY_COLUMNS at the last epoch, trained seeds only
    time_to_quality: pd.DataFrame  # TIME_COLUMNS
    test: pd.DataFrame  # TEST_COLUMNS: each seed's test row at the last epoch, or why it has none
    claims: pd.DataFrame  # CLAIM_COLUMNS
    confounds: pd.DataFrame  # CONFOUND_COLUMNS
    resolution: str = ""
    rule: str = ""
    floor: float | None = None  # eval.valid_bleu_floor
    finding: tuple[str, ...] = ()  # the section's opening sentences (``finding``)
    lead: tuple[str, ...] = ()  # its first ones: the depth question's answer (``_lead``)
    deep: pd.DataFrame = field(default_factory=pd.DataFrame)  # its cells as the page's table (``deep_table``)
    # the post-hoc reading (``nll_only``): SENSITIVITY_COLUMNS at the last budget, the claims by it, in words
    sensitivity: pd.DataFrame = field(default_factory=pd.DataFrame)
    sensitivity_claims: pd.DataFrame = field(default_factory=pd.DataFrame)
    sensitivity_words: tuple[str, ...] = ()

    @property
    def shown(self) -> bool:
        """Whether the report has a depth section: runs of more than one depth."""
        return len(self.depths) > 1

    def tables(self) -> dict[str, pd.DataFrame]:
        """The CSVs of the depth section (none with one depth)."""
        if not self.shown:
            return {}
        return {"depth_rates": self.rates, "depth_seed_fates": self.fates, "depth_quality": self.quality,
                "depth_time_to_quality": self.time_to_quality, "depth_test": self.test, "depth_claims": self.claims,
                "depth_confounds": self.confounds, "depth_rule_sensitivity": self.sensitivity,
                "depth_claims_nll_only": self.sensitivity_claims}


def _cell(experiment: Experiment, run: str) -> dict[str, Any]:
    norm = experiment.runs[run].model.norm
    return {"run": run, "variant": norm, "label": NORMS[norm].label if norm in NORMS else norm,
            "depth": depth_of(experiment, run), "warmup": experiment.runs[run].schedule.warmup,
            "lr_max": lr_of(experiment, run)}


def seed_fates_by_depth(epochs: pd.DataFrame, experiment: Experiment, at: Sequence[tuple[str, int]], split: str,
                        settings: ReportSettings) -> pd.DataFrame:
    """``budget.seed_fates`` run among the runs of each depth and lr_max: the best run is the best at the seed's
    own depth and learning rate."""
    parts = []
    for depth in experiment.depths:
        for lr in learning_rates(experiment):
            runs = [r for r in experiment.select if depth_of(experiment, r) == depth and lr_of(experiment, r) == lr]
            if runs:
                parts.append(bu.seed_fates(epochs, runs, at, split, settings).assign(depth=depth, lr_max=lr))
    return (pd.concat(parts, ignore_index=True) if parts
            else pd.DataFrame(columns=[*bu.FATE_COLUMNS, "depth", "lr_max"]))


def rate_table(fates: pd.DataFrame, experiment: Experiment) -> pd.DataFrame:
    """RATE_COLUMNS: per epoch budget and run (a variant, depth, warm-up setting and lr_max), divergence and
    failure over the seeds with a fate (diverged, stopped, did not train, trained), each with its Wilson 95%
    interval."""
    rows = []
    for (budget, epoch), at in fates.groupby(["budget", "epoch"], sort=False):
        for run in experiment.select:
            g = at[at["run"] == run]
            fate = g["fate"]
            n_div = int((fate == bu.DIVERGED).sum())
            n_failed = int(fate.isin([*bu.FAILED, bu.DID_NOT_TRAIN]).sum())
            n = n_failed + int((fate == bu.TRAINED).sum())
            div, fail = wilson(n_div, n), wilson(n_failed, n)
            best = g["best_bleu_run"].iloc[0] if len(g) else ""
            rows.append({"budget": budget, "epoch": int(epoch), **_cell(experiment, run), "n_seeds": len(g),
                         "n_with_fate": n, "n_diverged": n_div, "divergence_rate": div[0], "divergence_low": div[1],
                         "divergence_high": div[2], "n_failed": n_failed, "failure_rate": fail[0],
                         "failure_low": fail[1], "failure_high": fail[2], "best_run_at_depth": best})
    return pd.DataFrame(rows, columns=RATE_COLUMNS)


def _trained(fates: pd.DataFrame, budget: str) -> pd.DataFrame:
    return fates[(fates["budget"] == budget) & (fates["fate"] == bu.TRAINED)][["run", "seed"]]


def quality_table(epochs: pd.DataFrame, fates: pd.DataFrame, experiment: Experiment, budget: str, epoch: int,
                  metrics: Sequence[str]) -> pd.DataFrame:
    """QUALITY_COLUMNS: per run and metric at ``epoch``, the mean over the seeds that trained (fate at
    ``budget``) with its 95% interval (a BLEU's on the logit scale: ``budget.mean_interval``)."""
    trained = _trained(fates, budget).merge(epochs[epochs["epoch"] == epoch], on=["run", "seed"])
    rows = []
    for run in experiment.select:
        g = trained[trained["run"] == run]
        for metric in metrics:
            values = g[metric].dropna().astype(float).tolist() if metric in g else []
            mean, sd, lo, hi = bu.mean_interval(values, bounds=bu.BLEU_BOUNDS if bu.is_bleu(metric) else None)
            cell = _cell(experiment, run)
            rows.append({**{k: cell[k] for k in KEYS}, "metric": metric,
                         "n_trained": len(values), "mean": mean, "std": sd, "ci_low": lo, "ci_high": hi})
    return pd.DataFrame(rows, columns=QUALITY_COLUMNS)


def time_table(epochs: pd.DataFrame, fates: pd.DataFrame, experiment: Experiment, budget: str, epoch: int,
               metric: str, fractions: Sequence[float]) -> pd.DataFrame:
    """TIME_COLUMNS: per run and target (each of ``fractions`` of the best run's final seed-mean ``metric`` at the
    same depth over every lr_max, among the seeds that trained), the epochs, updates, training CPU time and
    wall-clock each trained seed needs (``answer.crossing``), the mean over the seeds that reach it with its 95% t
    interval."""
    trained = _trained(fates, budget).merge(epochs, on=["run", "seed"])
    trained = trained[(trained["status"] == bu.OK) & trained[metric].notna()]
    rows = []
    for depth in experiment.depths:
        runs = [r for r in experiment.select if depth_of(experiment, r) == depth]
        final = trained[trained["run"].isin(runs) & (trained["epoch"] == epoch)].groupby("run")[metric].mean()
        if final.empty:
            continue
        best = float(final.max())
        for run in runs:
            curves = {s: c.sort_values("epoch", kind="stable")
                      for s, c in trained[trained["run"] == run].groupby("seed")}
            cell = _cell(experiment, run)
            for fraction in fractions:
                hits = [crossing(c, metric, fraction * best, True)[0] for c in curves.values()]
                reached = [h for h in hits if not math.isnan(h["epochs"])]
                row = {**{k: cell[k] for k in KEYS}, "metric": metric,
                       "fraction": fraction, "target": fraction * best, "n_trained": len(curves),
                       "n_reached": len(reached)}
                for m in MEASURES:
                    mean, _, lo, hi = bu.mean_interval([h[m] for h in reached])
                    row.update({m: mean, f"{m}_low": lo, f"{m}_high": hi})
                rows.append(row)
    return pd.DataFrame(rows, columns=TIME_COLUMNS)


def test_rows(seeds: Sequence[SeedResults], experiment: Experiment, split: str = "test") -> pd.DataFrame:
    """TEST_COLUMNS: each seed's ``split`` scores at the last epoch, or why it has none: the reason its score
    file records (``skipped``: below ``eval.valid_bleu_floor``), the checkpoint's status, or missing. The last
    epoch is each run's own."""
    rows = []
    for sr in seeds:
        if sr.run not in experiment.runs:
            continue
        last = experiment.last_of(sr.run)
        rec = sr.scores.get(last)
        scores = None if rec is None else rec.splits.get(split)
        if rec is None:
            why = "missing"
        elif rec.skipped and split in rec.skipped:
            why = rec.skipped[split]
        elif scores is None:
            why = rec.status.value
        else:
            why = "scored"
        rows.append({"run": sr.run, "seed": sr.seed, "depth": depth_of(experiment, sr.run), "epoch": last,
                     "test": why, "bleu_tok": scores.bleu_tok if scores else math.nan,
                     "sacrebleu": scores.sacrebleu if scores else math.nan})
    return pd.DataFrame(rows, columns=TEST_COLUMNS)


def confound_table(experiment: Experiment) -> pd.DataFrame:
    """CONFOUND_COLUMNS: per selected variant, what it changes beside the norm position (the registry's
    differences; the paper's Post-LN and Pre-LN change nothing else), and its runs."""
    rows = []
    for norm in dict.fromkeys(experiment.runs[r].model.norm for r in experiment.select):
        v = NORMS[norm]
        runs = [r for r in experiment.select if experiment.runs[r].model.norm == norm]
        rows.append({"variant": norm, "label": v.label, "final_norm": v.final_norm, "runs": " ".join(runs),
                     "differences": "; ".join(f"{d.kind}: {d.what}" for d in v.differences)
                     or "nothing beside the norm position"})
    return pd.DataFrame(rows, columns=CONFOUND_COLUMNS)


# --- the claims of the references, each directional: (id, claim, source, scale, what is measured)

SCALE_WMT = "WMT En-De/En-Fr, width 512-1024, 6-18 (Liu et al.) up to 100+ layers"
# A rate claim: the runs' cell (variant, warmup, depth) and the side of the claimed direction; "than" another
# cell (a difference of rates) or one half (the cell fails in most seeds / in few).
DEPTH_CLAIMS: tuple[dict[str, Any], ...] = (
    {"id": "depth_postln_nowarmup", "claim": "Post-LN without warm-up fails more often at 18 layers than at 6",
     "source": "Liu et al. 2020 (arXiv 2004.08249), Table 1; Takase et al. 2023 (arXiv 2206.00330), Figure 1",
     "scale": SCALE_WMT, "cell": ("post", False, "deep"), "than": ("post", False, "shallow"), "side": 1},
    *({"id": f"depth_{norm}_warmup", "claim": f"{NORMS[norm].label} with warm-up does not fail at 18 layers "
       "(its failure rate is below one half)", "source": source, "scale": SCALE_WMT,
       "cell": (norm, True, "deep"), "than": 0.5, "side": -1}
      for norm, source in (("pre", "Liu et al. 2020 (arXiv 2004.08249), Table 1 (18-layer Pre-LN)"),
                           ("deepnorm", "Wang et al. 2022 (arXiv 2203.00555), up to 1,000 layers"),
                           ("admin", "Liu et al. 2020 (arXiv 2004.08249), Table 1 (18 layers) and 60-layer encoders"))),
    {"id": "depth_rezero_nowarmup", "claim": "ReZero trains without warm-up at 18 layers (its failure rate is "
     "below one half)", "source": "Bachlechner et al. 2020 (arXiv 2003.04887), 100+ layers without LayerNorm or "
     "warm-up", "scale": "enwik8 language modelling, up to 128 layers", "cell": ("rezero", False, "deep"),
     "than": 0.5, "side": -1},
    *({"id": f"depth_prenofinal_vs_{base}", "claim": f"Pre-LN without its final LayerNorm against {NORMS[base].label}"
       ", without warm-up at 18 layers (failure rate difference)", "source": "no published number",
       "scale": "", "cell": ("pre_nofinal", False, "deep"), "than": (base, False, "deep"), "side": 0}
      for base in ("pre", "post")),
)


def _cell_rate(rates: pd.DataFrame, norm: str, warmup: bool, depth: int, lr: float | None
               ) -> tuple[int, int, list[str]]:
    """(failed, seeds with a fate, runs) of the cell ``norm``, ``warmup`` at ``depth`` and lr_max ``lr`` (pooled
    when several runs are that cell, e.g. runs that differ in another setting; none when ``lr`` is None)."""
    g = rates[(rates["variant"] == norm) & (rates["warmup"] == warmup) & (rates["depth"] == depth)
              & (rates["lr_max"] == lr)] if lr is not None else rates.iloc[0:0]
    return int(g["n_failed"].sum()), int(g["n_with_fate"].sum()), g["run"].tolist()


def _cell_words(cell: tuple[str, bool, str], depth: int) -> str:
    """A claim's cell in words: "Post-LN without warm-up at 18 layers"."""
    norm, warmup, _ = cell
    return f"{norm_label(norm)} {'with' if warmup else 'without'} warm-up at {depth} layers"


def _claim_rates(rates: pd.DataFrame, cells: Sequence[tuple[str, bool, str]], pick: dict[str, int]
                 ) -> tuple[list[float], str]:
    """The lr_max values (in the rate table's order) at which every one of ``cells`` is selected, and, when there
    is none, the note that says why."""
    found = []
    for norm, warmup, which in cells:
        g = rates[(rates["variant"] == norm) & (rates["warmup"] == warmup) & (rates["depth"] == pick[which])]
        found.append(list(dict.fromkeys(g["lr_max"])))
    common = [lr for lr in found[0] if all(lr in f for f in found[1:])]
    if common:
        return common, ""
    missing = [c for c, f in zip(cells, found) if not f]
    if missing:
        return [], f"no selected run is {_cell_words(missing[0], pick[missing[0][2]])}"
    at = "; ".join(f"{_cell_words(c, pick[c[2]])} at lr_max {', '.join(sig(lr) for lr in f)}"
                   for c, f in zip(cells, found))
    return [], f"the cells compared are selected at no common lr_max: {at}"


def claim_table(rates: pd.DataFrame, last: str, gradinit_fit: pd.DataFrame | None, levels: list[int]) -> pd.DataFrame:
    """CLAIM_COLUMNS: each of DEPTH_CLAIMS at the last-epoch budget ``last`` between the shallowest and deepest
    of ``levels``, one row per lr_max at which every cell it names is selected (one row without a rate, its note
    saying why, where there is no such lr_max), judged by ``claims.status`` (a directional claim: the 95% interval
    on the claimed side of 0); plus Pre-LN without its final LayerNorm's exponent b at initialization against
    Pre-LN's and Post-LN's."""
    at = rates[rates["budget"] == last]
    pick = {"shallow": levels[0], "deep": levels[-1]}
    rows = []
    for c in DEPTH_CLAIMS:
        cells = [c["cell"], *([c["than"]] if isinstance(c["than"], tuple) else [])]
        common, note = _claim_rates(at, cells, pick)
        for lr in common or [None]:
            rows.append(_claim_row(c, at, pick, lr, note))
    rows += _exponent_rows(gradinit_fit)
    return pd.DataFrame(rows, columns=CLAIM_COLUMNS)


def _claim_row(c: dict[str, Any], at: pd.DataFrame, pick: dict[str, int], lr: float | None, note: str
               ) -> dict[str, Any]:
    """One row of ``claim_table``: claim ``c`` at lr_max ``lr`` (None: at no rate, measured as nothing)."""
    norm, warmup, which = c["cell"]
    k, n, runs = _cell_rate(at, norm, warmup, pick[which], lr)
    if isinstance(c["than"], tuple):
        n2, w2, which2 = c["than"]
        k2, m, runs2 = _cell_rate(at, n2, w2, pick[which2], lr)
        value, lo, hi = rate_difference(k, n, k2, m)
        measured_as = (f"failure rate of {' '.join(runs) or 'no run'} ({k}/{n}) minus that of "
                       f"{' '.join(runs2) or 'no run'} ({k2}/{m}), Newcombe 95% interval")
        seeds = f"{n}/{m}"
    else:
        rate, rlo, rhi = wilson(k, n)
        value, lo, hi = rate - c["than"], rlo - c["than"], rhi - c["than"]
        measured_as = (f"failure rate of {' '.join(runs) or 'no run'} ({k}/{n}) minus {c['than']:g}, Wilson "
                       "95% interval")
        seeds = str(n)
    m_ = cl.Measured(value=value, ci_low=lo, ci_high=hi, n_seeds=n, measured_as=measured_as)
    status = OPEN if c["side"] == 0 else cl.status({"kind": "directional", "side": c["side"]}, m_)
    return {"id": c["id"], "lr_max": math.nan if lr is None else lr, "claim": c["claim"], "source": c["source"],
            "scale": c["scale"], "measured_as": measured_as, "measured": value, "ci_low": lo, "ci_high": hi,
            "n_seeds": seeds, "status": status, "note": note}


def _exponent_rows(fit: pd.DataFrame | None) -> list[dict[str, Any]]:
    """Pre-LN without its final LayerNorm at initialization: its exponent b of the last decoder layer's W2
    against depth (Figure 3(c)'s fit), beside Pre-LN's and Post-LN's, measured only."""
    from ..stats.gradinit_fit import headline

    if fit is None:
        return []
    top = headline(fit).set_index("norm")
    if "pre_nofinal" not in top.index:
        return []
    r = top.loc["pre_nofinal"]
    others = "; ".join(f"{NORMS[n].label} b = {top.loc[n, 'b']:.3f} [{top.loc[n, 'b_low']:.3f}, "
                       f"{top.loc[n, 'b_high']:.3f}]" for n in ("pre", "post") if n in top.index)
    return [{"id": "depth_prenofinal_gradinit", "lr_max": math.nan,
             "claim": "Pre-LN without its final LayerNorm at initialization: its last decoder layer's W2 gradient "
             "against depth, like Pre-LN's (b = -0.5) or Post-LN's (b = 0)?",
             "source": "no published number; Theorem 1 for Pre-LN and Post-LN", "scale": "",
             "measured_as": f"exponent b of the fit over depths ({r['depths']}); {others}", "measured": r["b"],
             "ci_low": r["b_low"], "ci_high": r["b_high"], "n_seeds": str(r["seeds"]), "status": OPEN, "note": ""}]


# How an exponent b of the last decoder layer's W2 gradient against depth reads (``_reading``).
NOT_MEASURED, ZERO, NOT_FITTED, NO_INTERVAL = "not measured", "exactly 0", "not fitted", "no interval"
SHRINKS, GROWS, FLAT = "shrinks", "grows", "does not shrink"
PREDICTS = {SHRINKS: "training without warm-up", GROWS: "a need for warm-up", FLAT: "a need for warm-up"}


def _reading(exponent: pd.Series | None) -> tuple[str, float, float, float]:
    """An exponent's row (``gradinit_fit.headline``; None: not measured) as (reading, b, low, high): shrinks with
    depth when its interval lies below 0, grows above 0, does not shrink otherwise."""
    if exponent is None:
        return NOT_MEASURED, math.nan, math.nan, math.nan
    b, lo, hi = (float(exponent[k]) for k in ("b", "b_low", "b_high"))
    if not math.isfinite(b):
        return (ZERO if isinstance(exponent.get("note"), str) and exponent["note"] else NOT_FITTED), b, lo, hi
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return NO_INTERVAL, b, lo, hi
    return (SHRINKS if hi < 0 else GROWS if lo > 0 else FLAT), b, lo, hi


def prediction(label: str, exponent: pd.Series | None) -> str:
    """What ``label``'s gradient at initialization predicted for training without warm-up, from its Figure 3(c)
    row (``gradinit_fit.headline``; None: not measured): a last decoder layer's W2 gradient that shrinks with
    depth, its exponent b's interval below 0, as Pre-LN's does in Theorem 1, predicts training; one that does not
    shrink, as Post-LN's does not, or grows, predicts a need for warm-up. One interval."""
    said = f"{label}'s gradient at initialization"
    read, b, lo, hi = _reading(exponent)
    if read == NOT_MEASURED:
        return f"{said} was not measured."
    if read == ZERO:
        return (f"{said} predicted nothing: its last decoder layer's W2 gradient is exactly 0, so it has no "
                "exponent b.")
    if read == NOT_FITTED:
        return f"{said} predicted nothing: its exponent b was not fitted."
    if read == NO_INTERVAL:
        return f"{said} predicted nothing: its exponent b = {sig(b)} has no interval."
    theory = float(exponent.get("theory_b", math.nan))
    own = f", Theorem 1's being {sig(theory)}" if math.isfinite(theory) else ""  # Post-LN's and Pre-LN's own
    like_pre, like_post = ", as Pre-LN's does in Theorem 1", ", as Post-LN's does not in Theorem 1"
    if read == SHRINKS:
        return (f"{said} predicted training without warm-up: its last decoder layer's W2 gradient shrinks with "
                f"depth, b = {interval(b, lo, hi)}{own or like_pre}.")
    if read == GROWS:
        return (f"{said} predicted a need for warm-up: its last decoder layer's W2 gradient grows with depth, "
                f"b = {interval(b, lo, hi)}{own}.")
    return (f"{said} predicted a need for warm-up: its last decoder layer's W2 gradient does not shrink with depth, "
            f"b = {interval(b, lo, hi)}{own or like_post}.")


def _deep_cells(rates: pd.DataFrame, budget: str, deepest: int) -> tuple[int, pd.DataFrame] | None:
    """The cells at ``budget`` and ``deepest`` layers without warm-up, per variant and lr_max (label, failed k of
    n with a fate), and the budget's epoch; None when no such run is selected."""
    at = rates[(rates["budget"] == budget) & (rates["depth"] == deepest) & ~rates["warmup"].astype(bool)]
    if at.empty:
        return None
    return int(at["epoch"].iloc[0]), at.groupby(["variant", "lr_max"], sort=False).agg(
        label=("label", "first"), k=("n_failed", "sum"), n=("n_with_fate", "sum")).reset_index()


def _lead(found: tuple[int, pd.DataFrame] | None, deepest: int) -> list[str]:
    """The depth question's answer in one sentence per lr_max, from ``_deep_cells``' cells at ``deepest`` layers
    without warm-up: the variants with which most seeds trained and those with which most failed (``finding``
    opens with it; the report's summary and answer.md lead with it in an experiment without Figure 4's pair)."""
    from .confounds import and_words

    if found is None:
        return [f"No run at {deepest} layers without warm-up is selected."]
    epoch, cells = found
    out = []
    for lr, g in cells.groupby("lr_max", sort=False):
        share = [(r.k / r.n if r.n else math.nan, r.label) for r in g.itertuples()]
        clauses = [f"{what} {and_words(labels)}" for what, labels in (
            ("most seeds trained with", [lab for s, lab in share if s < 0.5]),
            ("most failed with", [lab for s, lab in share if s > 0.5]),
            ("half failed with", [lab for s, lab in share if s == 0.5]),
            ("no seed has a fate yet with", [lab for s, lab in share if math.isnan(s)])) if labels]
        out.append(f"Without warm-up at {deepest} layers and lr_max {sig(lr)}, at epoch {epoch}: "
                   f"{'; '.join(clauses)}.")
    return out


def finding(rates: pd.DataFrame, budget: str, gradinit_fit: pd.DataFrame | None, deepest: int) -> list[str]:
    """The depth section's opening sentences, at ``budget`` and ``deepest`` layers without warm-up: ``lead``;
    then per variant its failure rate at each lr_max with its Wilson 95% interval, and what its gradient at
    initialization predicted (``prediction``). Words for variants, one interval a sentence."""
    found = _deep_cells(rates, budget, deepest)
    return _lead(found, deepest) + _details(found, gradinit_fit, deepest)


def _details(found: tuple[int, pd.DataFrame] | None, gradinit_fit: pd.DataFrame | None, deepest: int) -> list[str]:
    """``finding``'s sentences after its lead, from ``_deep_cells``' result."""
    from ..stats.gradinit_fit import headline

    if found is None:
        return []
    _, cells = found
    out = []
    top = None if gradinit_fit is None else headline(gradinit_fit).set_index("norm")
    if top is None:
        out.append("The gradient at initialization was not fitted: no prediction from it.")
    order = [n for n in NORMS if n in set(cells["variant"])] + [n for n in dict.fromkeys(cells["variant"])
                                                                 if n not in NORMS]
    for norm in order:
        g = cells[cells["variant"] == norm]
        label = g["label"].iloc[0]
        for r in g.itertuples():
            rate, lo, hi = wilson(int(r.k), int(r.n))
            out.append(f"{label} at {deepest} layers without warm-up and lr_max {sig(r.lr_max)}: "
                       + (f"{int(r.n - r.k)} of {int(r.n)} seeds trained, a failure rate of {interval(rate, lo, hi)} "
                          "by Wilson's 95% interval." if r.n else "no seed has a fate yet."))
        if top is not None:
            out.append(prediction(label, top.loc[norm] if norm in top.index else None))
    return out


def deep_table(rates: pd.DataFrame, budget: str, gradinit_fit: pd.DataFrame | None, deepest: int) -> pd.DataFrame:
    """The finding's cells as a table read at a glance (the page opens the section with it, the sentences of
    ``finding`` in answer.md): per variant and lr_max at ``deepest`` layers without warm-up, its seeds trained,
    its failure rate with Wilson's 95% interval, and its gradient exponent at initialization with what it
    predicted (``prediction``'s reading)."""
    from ..stats.gradinit_fit import headline

    found = _deep_cells(rates, budget, deepest)
    if found is None:
        return pd.DataFrame()
    _, cells = found
    top = None if gradinit_fit is None else headline(gradinit_fit).set_index("norm")
    order = [n for n in NORMS if n in set(cells["variant"])] + [n for n in dict.fromkeys(cells["variant"])
                                                                 if n not in NORMS]
    rows = []
    for norm in order:
        exponent = top.loc[norm] if top is not None and norm in top.index else None
        b, predicted = _exponent_words(exponent)
        for r in cells[cells["variant"] == norm].itertuples():
            rate, lo, hi = wilson(int(r.k), int(r.n))
            rows.append({"variant": r.label, "lr_max": sig(r.lr_max),
                         "seeds trained": f"{int(r.n - r.k)} of {int(r.n)}" if r.n else "no fate yet",
                         "failure rate [Wilson 95%]": interval(rate, lo, hi) if r.n else "—",
                         "gradient exponent b at init [95%]": b, "b predicts": predicted})
    return pd.DataFrame(rows)


def _exponent_words(exponent: pd.Series | None) -> tuple[str, str]:
    """A variant's exponent b with its interval, and what it predicts, in ``prediction``'s reading."""
    read = _reading(exponent)
    b = {NOT_MEASURED: "not measured", ZERO: "none: exactly 0", NOT_FITTED: "not fitted", NO_INTERVAL: sig(read[1])}
    return (b[read[0]], "nothing") if read[0] in b else (interval(*read[1:]), PREDICTS[read[0]])


def nll_only(settings: ReportSettings) -> ReportSettings:
    """The failure rule without its BLEU part (``failure_bleu_fraction`` 0): a seed fails when it diverged,
    stopped or its NLL is above ``failure_nll_ratio`` x the best run's. A reading chosen after the records were
    seen, shown beside the study's rule and never in its place."""
    return replace(settings, failure_bleu_fraction=0.0)


def sensitivity_table(rates: pd.DataFrame, rates_nll: pd.DataFrame, budget: str, ratio: float) -> pd.DataFrame:
    """SENSITIVITY_COLUMNS: per cell at ``budget``, its failed seeds by the study's rule (``rates``) and by the
    rule's NLL part alone (``rates_nll``, NLL above ``ratio`` x the best's), the latter's rate with its Wilson 95%
    interval."""
    at = rates[rates["budget"] == budget]
    nll = rates_nll[rates_nll["budget"] == budget].set_index("run")
    by_nll = {f"{k}_nll_only": at["run"].map(nll[k]) for k in ("n_failed", "failure_rate", "failure_low",
                                                                "failure_high")}
    table = at[SENSITIVITY_COLUMNS[:7]].assign(failure_nll_ratio=ratio, **by_nll)
    return table.reset_index(drop=True)


def sensitivity_words(table: pd.DataFrame, claims: pd.DataFrame, claims_nll: pd.DataFrame) -> list[str]:
    """The post-hoc reading in words, from its table and the two claims tables (the report's or their CSVs): the
    cells whose failures change, and the claims whose status changes, each with its measure by the NLL part."""
    if table.empty:
        return []
    ratio = sig(float(table["failure_nll_ratio"].iloc[0]))
    changed = table[table["n_failed"] != table["n_failed_nll_only"]]
    named = "; ".join(f"{r.label} {'with' if bool(r.warmup) else 'without'} warm-up at {int(r.depth)} layers and "
                      f"lr_max {sig(r.lr_max)} ({int(r.n_failed)} → {int(r.n_failed_nll_only)} of "
                      f"{int(r.n_with_fate)})" for r in changed.itertuples())
    rule = (f"a seed fails when it diverged, stopped or its NLL is above {ratio} x the best run's at its depth and "
            "lr_max; its BLEU is not judged")
    out = [f"Post hoc, not the study's rule: by the rule's NLL part alone ({rule}), "
           + (f"the failures of {len(changed)} of {len(table)} cells change: {named}." if len(changed)
              else "no cell's failures change.")]
    both = claims.merge(claims_nll, on=["id", "lr_max"], suffixes=("", "_nll")).dropna(subset=["lr_max"])
    moved = both[both["status"] != both["status_nll"]]
    out += [f"By it the claim \"{r.claim}\" at lr_max {sig(r.lr_max)} is {r.status_nll}, "
            f"{interval(r.measured_nll, r.ci_low_nll, r.ci_high_nll)} ({r.measured_as_nll}), where the study's rule "
            f"finds it {r.status}." for r in moved.itertuples()]
    return out


def depth(epochs: pd.DataFrame, seeds: Sequence[SeedResults], experiment: Experiment,
          epoch_budgets: Sequence[tuple[str, int]], split: str, gradinit_fit: pd.DataFrame | None = None) -> Depth:
    """The depth section's tables at ``epoch_budgets`` ((label, epoch), the last first), on ``split``."""
    levels = list(experiment.depths)
    if len(levels) < 2:
        empty = pd.DataFrame()
        return Depth(levels, empty, empty, empty, empty, empty, empty, empty)
    settings = experiment.analysis.report
    fates = seed_fates_by_depth(epochs, experiment, epoch_budgets, split, settings)
    rates = rate_table(fates, experiment)
    last, last_epoch = epoch_budgets[0]
    metrics = [f"{split}_bleu_tok", f"{split}_nll_base2", *(["test_bleu_tok"] if "test_bleu_tok" in epochs else [])]
    n_with = rates[rates["budget"] == last]["n_with_fate"].tolist()
    deep = _deep_cells(rates, last, levels[-1])
    opening = _lead(deep, levels[-1])
    rates_nll = rate_table(seed_fates_by_depth(epochs, experiment, epoch_budgets[:1], split, nll_only(settings)),
                           experiment)
    claims = claim_table(rates, last, gradinit_fit, levels)
    sensitivity = sensitivity_table(rates, rates_nll, last, settings.failure_nll_ratio)
    claims_nll = claim_table(rates_nll, last, None, levels)
    return Depth(
        depths=levels, rates=rates, fates=fates,
        quality=quality_table(epochs, fates, experiment, last, last_epoch, metrics),
        time_to_quality=time_table(epochs, fates, experiment, last, last_epoch, f"{split}_bleu_tok",
                                   settings.quality_fractions),
        test=test_rows(seeds, experiment), claims=claims,
        confounds=confound_table(experiment), resolution=resolution_text([n for n in n_with if n > 0]),
        rule=bu.failure_rule(settings) + "; here the best run is taken among the runs of the seed's own depth and "
        "lr_max",
        floor=experiment.eval.valid_bleu_floor, finding=tuple(opening + _details(deep, gradinit_fit, levels[-1])),
        lead=tuple(opening), deep=deep_table(rates, last, gradinit_fit, levels[-1]), sensitivity=sensitivity,
        sensitivity_claims=claims_nll,
        sensitivity_words=tuple(sensitivity_words(sensitivity, claims, claims_nll)))


__all__ = ["Depth", "depth", "depth_of", "wilson", "rate_difference", "smallest_resolved",
           "resolution_text", "seed_fates_by_depth", "rate_table", "quality_table", "time_table", "test_rows",
           "confound_table", "claim_table", "finding", "deep_table", "nll_only", "sensitivity_table",
           "sensitivity_words",
           "prediction", "learning_rates", "lr_of", "DEPTH_CLAIMS", "OPEN"]
