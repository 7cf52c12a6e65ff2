"""The README's "Results" section, generated from published reports' tables so the two cannot drift apart.

The section has one part per published study (``PARTS``): the factorial study (``study``), the end point of
Figure 4's pair (``endpoint``) and the depth study (``depth``), each between its own two
markers. ``lnrepro readme-results --part endpoint --report published/endpoint-cpu`` rewrites one part from that
report's CSV tables (tables/*.csv, docs/outputs.md), led by its Answer sentences (answer.md) where the report has
them; ``--check`` only compares and fails when the README differs (tests/test_readme_results.py runs it on each
committed report). Every number in a part is a cell of one of those tables or a sentence of answer.md,
formatted, never recomputed (the depth part's resolution sentence is ``depth.resolution_text`` of the rate
table's seed counts: arithmetic of the design, not of the results).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..errors import LnReproError
from ..io import atomic_write_text
from ..paths import ANSWER_MD, PUBLISHED_REPORTS

FIGURE4 = "figure4"  # the comparison whose runs are the paper's Figure 4 (config.yaml, comparisons)
# The metrics of the section: validation loss in bits (the paper plots it) and tokenized BLEU.
METRICS = {"valid_loss_base2": "valid loss (bits)", "valid_bleu_tok": "valid BLEU"}


def _table(report: Path, name: str) -> pd.DataFrame:
    path = report / "tables" / f"{name}.csv"
    if not path.is_file():
        raise LnReproError(f"{path}: missing (the README's results need the report's table {name}.csv)")
    return pd.read_csv(path, keep_default_na=True)


def _num(x: object, digits: int = 2) -> str:
    """A table cell as the README prints it: fixed decimals, an em dash for an empty cell."""
    try:
        v = float(x)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return str(x)
    return "—" if math.isnan(v) else f"{v:.{digits}f}"


def _count(x: object) -> str:
    """A count cell: an integer as an integer, a range string as written."""
    return f"{int(x)}" if isinstance(x, (int, float)) else str(x)


def _interval(row: pd.Series, digits: int = 2) -> str:
    if pd.isna(row["ci_low"]):
        return "no interval"
    return f"[{_num(row['ci_low'], digits)}, {_num(row['ci_high'], digits)}]"


def _md(header: list[str], rows: list[list[str]]) -> list[str]:
    return (["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            + ["| " + " | ".join(r) + " |" for r in rows])


def _figure4_runs(report: Path) -> tuple[list[str], pd.Series]:
    conf = _table(report, "confounds")
    row = conf[conf["comparison"] == FIGURE4]
    if row.empty:
        raise LnReproError(f"{report / 'tables' / 'confounds.csv'}: no comparison {FIGURE4!r}")
    row = row.iloc[0]
    return [r.strip() for r in str(row["runs"]).split(",")], row


def answer_section(report: Path) -> list[str]:
    """The report's Answer sentences (answer.md's paragraphs below its heading) under "The answer at this scale";
    nothing for a report written before answer.md."""
    path = report / ANSWER_MD
    if not path.is_file():
        return []
    body = path.read_text(encoding="utf-8").partition("\n")[2].strip()
    return [f"**The answer at this scale** (`{ANSWER_MD}`, the report's Answer section):", "", body]


def milestone_epochs(epochs: list[int]) -> list[int]:
    """The first two epochs, every fifth and the last: a long run's curve in a README-sized table."""
    return [e for e in epochs if e <= 2 or e % 5 == 0 or e == epochs[-1]]


def figure4_section(report: Path, shown: Callable[[list[int]], list[int]] | None = None) -> list[str]:
    """Figure 4's pair per epoch (``shown`` picks the epochs; default every one), then whether each run had
    stopped improving."""
    runs, _ = _figure4_runs(report)
    per_epoch = _table(report, "run_epochs")
    header = ["epoch"] + [f"{run}: {label}" for run in runs for label in METRICS.values()]
    rows = []
    every = sorted(int(e) for e in per_epoch[per_epoch["run"].isin(runs)]["epoch"].unique())
    for epoch in shown(every) if shown else every:
        cells = [str(int(epoch))]
        for run in runs:
            r = per_epoch[(per_epoch["run"] == run) & (per_epoch["epoch"] == epoch)]
            for m in METRICS:
                if r.empty or pd.isna(r.iloc[0].get(f"{m}_mean")):
                    cells.append("—")
                else:
                    cells.append(f"{_num(r.iloc[0][f'{m}_mean'])} ± {_num(r.iloc[0][f'{m}_std'])}")
        rows.append(cells)
    n = per_epoch[per_epoch["run"].isin(runs)].groupby("run")["n_ok"].max().to_dict()
    seeds = ", ".join(f"{run} {int(n.get(run, 0))}" for run in runs)
    which = "" if len(rows) == len(every) else f"epochs {', '.join(r[0] for r in rows)} of {len(every)}; "
    return ([f"**Figure 4 at this scale** ({which}seed mean ± standard deviation; seeds: {seeds}):", ""]
            + _md(header, rows) + ["", plateau_sentence(report, runs)])


def convergence_sentence(report: Path, runs: list[str]) -> str:
    """Whether each Figure 4 run had stopped improving: its validation NLL's slope at the end (convergence.csv)."""
    conv = _table(report, "convergence").set_index("run")
    parts = []
    for run in runs:
        if run not in conv.index or pd.isna(conv.loc[run, "slope"]):
            parts.append(f"{run}: fewer scored epochs than the window")
            continue
        r = conv.loc[run]
        cut = f"; learning rate {r['lr_cut']}" if isinstance(r["lr_cut"], str) and r["lr_cut"] else ""
        parts.append(f"{run} {_num(r['nll_first'])} to {_num(r['nll_last'])} bits over epochs {r['epochs']}, "
                     f"{_num(100 * float(r['rel_slope']), 2)}% an epoch (95% interval "
                     f"{_num(100 * float(r['rel_low']), 2)} to {_num(100 * float(r['rel_high']), 2)}){cut}: "
                     f"{r['label']}")
    tol = float(conv["tolerance"].dropna().iloc[0]) if conv["tolerance"].notna().any() else math.nan
    return (f"Validation NLL at the end (converged: the per-epoch slope's 95% interval within ±{_num(100 * tol, 1)}% "
            "an epoch; after a step decay's cut, annealed): " + "; ".join(parts) + ".")


def plateau_sentence(report: Path, runs: list[str]) -> str:
    """Whether each Figure 4 run had stopped improving: the convergence table's slope, or in a report with
    plateau.csv in its place (the published CPU study) its last three epochs' spread."""
    if (report / "tables" / "convergence.csv").is_file():
        return convergence_sentence(report, runs)
    plateau = _table(report, "plateau").set_index("run")
    parts = []
    for run in runs:
        if run not in plateau.index or pd.isna(plateau.loc[run, "spread"]):
            parts.append(f"{run}: fewer than three scored epochs")
            continue
        r = plateau.loc[run]
        verdict = "a plateau" if bool(r["plateau"]) else "still changing, not a plateau"
        parts.append(f"{run} {_num(r['loss_first'])} to {_num(r['loss_last'])} bits over epochs {r['epochs']}, "
                     f"a spread of {_num(100 * float(r['spread']), 1)}% ({verdict})")
    return ("Validation loss over the last three epochs (a plateau: within 1% of each other): "
            + "; ".join(parts) + ".")


def effects_section(report: Path) -> list[str]:
    effects, budgets = _table(report, "effects"), _table(report, "budgets")
    last = budgets.iloc[0]  # budgets.csv lists the last epoch first
    at = effects[effects["budget"] == last["budget"]]
    rows = []
    for term in at["effect"].unique():
        cells = [term]
        for m in METRICS:
            r = at[(at["effect"] == term) & (at["metric"] == m)]
            cells.append("—" if r.empty else f"{_num(r.iloc[0]['estimate'])} {_interval(r.iloc[0])}")
        rows.append(cells)
    # updates and tokens are one number, or "min–max" over seeds (budgets.csv); empty when unknown
    sizes = [f"{_count(last[k])} {label}" for k, label in (("updates", "updates"), ("target_tokens", "target tokens"))
             if not pd.isna(last[k])]
    budget = ", ".join([str(last["budget"])] + sizes)
    return ([f"**Factorial effects at the fixed budget** ({budget}; estimate and 95% interval over seeds; a main "
             "effect is Pre minus Post, warm-up on minus off, step minus inverse-sqrt decay):", ""]
            + _md(["term"] + list(METRICS.values()), rows))


def divergence_section(report: Path) -> list[str]:
    fail = _table(report, "failures")
    new = "n_did_not_train" in fail.columns  # the published CPU study's counts a BLEU floor
    col, head = (("n_did_not_train", "did not train (far from the best run's BLEU or NLL)") if new
                 else ("n_below_floor", "finished below the BLEU floor"))
    rows = [[r["run"], f"{int(r['n_diverged'])} of {int(r['n_seeds'])}", str(int(r[col]))]
            for _, r in fail.iterrows()]
    return ["**Divergence and failure per run** (at the last epoch):", ""] + _md(["run", "diverged", head], rows)


def tuned_section(report: Path) -> list[str]:
    tuned = _table(report, "tuned")
    if tuned.empty:
        return ["**Tuned against tuned**: no tuned baselines in this report."]
    rows = [[r["run_a"], r["run_b"], r["metric"], _num(r["mean_a"]), _num(r["mean_b"]), _num(r["difference"]),
             _interval(r), f"{int(r['n_a'])} / {int(r['n_b'])}"] for _, r in tuned.iterrows()]
    return ["**Tuned against tuned** (each grid's best trial by validation loss, on test):", ""] + _md(
        ["Post-LN best", "Pre-LN best", "metric", "Post-LN", "Pre-LN", "difference", "95% interval", "seeds"],
        rows)


def gradinit_section(report: Path) -> list[str]:
    path = report / "tables" / "gradinit_fit.csv"
    if not path.is_file():
        return ["**Gradient at initialization**: not measured in this report."]
    fit = pd.read_csv(path)
    fit = fit[fit["statistic"] == "expected_grad_fro"]
    rows = [[r["norm"], f"{r['stack']} {r['layer']} {r['param']}", _num(r["b"], 3),
             f"[{_num(r['b_low'], 3)}, {_num(r['b_high'], 3)}]", _num(r["theory_b"], 1), str(r["depths"])]
            for _, r in fit.iterrows()]
    return ["**Gradient at initialization** (exponent b of ||E[dL/dW]||_F ~ depth^b; Theorem 1 predicts 0 for "
            "Post-LN and -0.5 for Pre-LN):", ""] + _md(["norm", "weight", "b", "95% interval", "theory", "depths"],
                                                       rows)


def confound_section(report: Path) -> list[str]:
    _, row = _figure4_runs(report)
    also = row.get("also differs (confounds)")
    also = "" if pd.isna(also) else f", also differing: {also}"
    return [f"**Confound verdict for `{FIGURE4}`**: {row['verdict']}{also}."]


def _scale(report: Path) -> str:
    """The report's scale in words (the claims table's)."""
    scale = _table(report, "claims")["scale"].dropna()
    return str(scale.iloc[0]) if not scale.empty else "unknown"


def source_line(report: Path, shown_as: str) -> list[str]:
    """Which report a part comes from, and its scale."""
    return [f"Generated from `{shown_as}` (open `{shown_as}/index.html`). Scale: {_scale(report)}. These are "
            "measurements at that scale, not the paper's IWSLT14 setup; the report's Assumptions and deviations "
            "section lists every difference."]


def _budget(report: Path) -> str:
    """The last epoch's budget label (budgets.csv lists it first)."""
    return str(_table(report, "budgets").iloc[0]["budget"])


def equivalence_section(report: Path) -> list[str]:
    """Figure 4's arms at the last epoch within a margin (equivalence.csv, as the report's page shows it)."""
    from .equivalence import view

    table = _table(report, "equivalence")
    if table.empty:
        return ["**Equivalence at the last epoch**: no test (the Answer above says why)."]
    shown = view(table)
    shown.insert(1, "epoch", table["epoch"].astype(int).astype(str).tolist())
    return ([f"**Equivalence at the last epoch** ({table['difference_of'].iloc[0]}; two one-sided tests against "
             "the margin, equivalent when the 90% Welch interval lies within it):", ""]
            + _md(list(shown.columns), shown.astype(str).values.tolist()))


def brackets_section(report: Path) -> list[str]:
    """Whether each tuning grid brackets its best trial (tuned_brackets.csv's sentences)."""
    from .tuned import bracket_sentences

    path = report / "tables" / "tuned_brackets.csv"
    brackets = pd.read_csv(path, keep_default_na=False) if path.is_file() else pd.DataFrame()
    if brackets.empty:
        return ["**Tuning grids**: none in this report."]
    return ["**Tuning grids** (each grid's best trial by validation loss at the last epoch):", ""] + [
        f"- {s}" for s in bracket_sentences(brackets)]


def reference_section(report: Path) -> list[str]:
    """The seeds judged against a named run instead of the best one (analysis.report.failure_reference): e.g.
    Post-LN without warm-up against Post-LN with warm-up at the paper's learning rate (seed_fates.csv)."""
    fates = _table(report, "seed_fates")
    at = fates[(fates["budget"] == _budget(report)) & fates["reference"].fillna("").astype(bool)]
    if at.empty:
        return []
    rows = [[r["run"], str(int(r["seed"])), _num(r["bleu"]), _num(r["nll"]), r["reference"],
             _num(r["reference_bleu"]), _num(r["reference_nll"]), r["fate"]] for _, r in at.iterrows()]
    return (["**Judged against a named run** (at the last epoch, against that run's seed means; the fate by the "
             "report's failure rule):", ""]
            + _md(["run", "seed", "valid BLEU", "valid NLL (bits)", "against", "its BLEU", "its NLL", "fate"], rows))


def depth_rates_section(report: Path) -> list[str]:
    """Divergence and failure per variant, depth and warm-up at the last epoch, with Wilson 95% intervals."""
    from .depth import resolution_text

    rates = _table(report, "depth_rates")
    at = rates[rates["budget"] == _budget(report)]

    def rate(k: object, n: object, lo: object, hi: object) -> str:
        return f"{int(k)} of {int(n)} [{_num(lo)}, {_num(hi)}]" if int(n) else "no seed with a fate"

    rows = [[r["label"], str(int(r["depth"])), "on" if bool(r["warmup"]) else "off",
             rate(r["n_diverged"], r["n_with_fate"], r["divergence_low"], r["divergence_high"]),
             rate(r["n_failed"], r["n_with_fate"], r["failure_low"], r["failure_high"]), r["best_run_at_depth"]]
            for _, r in at.iterrows()]
    n_with = [int(n) for n in at["n_with_fate"] if int(n) > 0]
    epoch = int(at["epoch"].iloc[0]) if len(at) else 0
    return ([f"**Failure and divergence at epoch {epoch}** (seeds and Wilson 95% interval; failed: diverged, "
             "stopped or did not train against the best run of the same depth):", ""]
            + _md(["variant", "layers", "warm-up", "diverged", "failed", "best run at this depth"], rows)
            + ["", f"Resolution: {resolution_text(n_with)}."])


def depth_quality_section(report: Path) -> list[str]:
    """Validation BLEU at the last epoch of the seeds that trained (depth_quality.csv)."""
    quality = _table(report, "depth_quality")
    bleu = quality[quality["metric"] == "valid_bleu_tok"]
    rows = [[r["run"], str(int(r["n_trained"])), _num(r["mean"]), _interval(r)] for _, r in bleu.iterrows()]
    return (["**Quality of the seeds that trained** (valid BLEU at the last epoch; mean and 95% interval):", ""]
            + _md(["run", "seeds that trained", "valid BLEU", "95% interval"], rows))


def depth_claims_section(report: Path) -> list[str]:
    """The references' claims about depth, each with its measurement and status (depth_claims.csv)."""
    claims = _table(report, "depth_claims")
    rows = [[r["claim"], r["source"], f"{_num(r['measured'])} {_interval(r)}", str(r["n_seeds"]), r["status"]]
            for _, r in claims.iterrows()]
    return ["**Claims about depth**:", ""] + _md(["claim", "source", "measured", "seeds", "status"], rows)


def depth_limits_section(report: Path) -> list[str]:
    """What the depth study cannot show: its one dataset and width, its epochs and seeds (from its tables)."""
    rates = _table(report, "depth_rates")
    at = rates[rates["budget"] == _budget(report)]
    if at.empty:
        return []
    seeds = sorted({int(n) for n in at["n_seeds"]})
    seeds_text = f"{seeds[0]}" if len(seeds) == 1 else f"{seeds[0]} to {seeds[-1]}"
    depths = ", ".join(str(int(d)) for d in sorted(at["depth"].unique()))
    return [f"What this cannot show: one dataset and one width ({_scale(report)}), {int(at['epoch'].iloc[0])} "
            f"epochs, depths {depths} and {seeds_text} seeds a cell. A failure here is a failure at this learning "
            "rate and budget; a run that trains slowly enough can be classed as failed, and a rate over a few seeds "
            "resolves only large differences (above)."]


def study_sections(report: Path, shown_as: str) -> list[list[str]]:
    return [answer_section(report), source_line(report, shown_as), figure4_section(report),
            effects_section(report), divergence_section(report), tuned_section(report), gradinit_section(report),
            confound_section(report)]


def endpoint_sections(report: Path, shown_as: str) -> list[list[str]]:
    return [answer_section(report), source_line(report, shown_as), figure4_section(report, milestone_epochs),
            equivalence_section(report), brackets_section(report), tuned_section(report), reference_section(report),
            divergence_section(report)]


def depth_sections(report: Path, shown_as: str) -> list[list[str]]:
    return [source_line(report, shown_as), depth_rates_section(report), depth_quality_section(report),
            depth_claims_section(report), gradinit_section(report), depth_limits_section(report)]


@dataclass(frozen=True)
class Part:
    """One part of the README's Results section: the published report it comes from and what it shows."""

    name: str
    sections: Callable[[Path, str], list[list[str]]]

    @property
    def published(self) -> str:
        """The published report's folder, as the README names it."""
        return PUBLISHED_REPORTS[self.name]

    @property
    def begin(self) -> str:
        return (f"<!-- results:{self.name}: begin (generated by `lnrepro readme-results --part {self.name}` from "
                "the report's tables; do not edit) -->")

    @property
    def end(self) -> str:
        return f"<!-- results:{self.name}: end -->"


PARTS = {p.name: p for p in (Part("study", study_sections), Part("endpoint", endpoint_sections),
                             Part("depth", depth_sections))}


def results_markdown(report: Path, shown_as: str, part: str = "study") -> str:
    """A part's body from ``report``'s tables; ``shown_as`` is the report's path as the README names it."""
    sections = PARTS[part].sections(Path(report), shown_as)
    return "\n\n".join("\n".join(p) for p in sections if p) + "\n"


def replace_section(readme_text: str, body: str, part: str = "study") -> str:
    """``readme_text`` with the text between ``part``'s two markers replaced by ``body``."""
    begin, end = PARTS[part].begin, PARTS[part].end
    if begin not in readme_text or end not in readme_text:
        raise LnReproError(f"the README has no generated results part {part!r} (the markers {begin!r} ... {end!r})")
    head, rest = readme_text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n{body}{end}{tail}"


def update_readme(readme: Path, report: Path, shown_as: str, check: bool = False, part: str = "study") -> bool:
    """Rewrite (or with ``check`` only compare) one part of the README's results section; True when it was up
    to date."""
    if not (Path(report) / "tables").is_dir():
        raise LnReproError(f"{report}: no report there (its tables/ folder is missing); a part is generated from a "
                           "published report, the study's results/{name}/report/ copied there")
    text = Path(readme).read_text(encoding="utf-8")
    new = replace_section(text, results_markdown(report, shown_as, part), part)
    if new == text:
        return True
    if check:
        raise LnReproError(f"{readme}: the results part {part!r} differs from {report}'s tables; run "
                           f"`lnrepro readme-results --part {part} --report {shown_as}`")
    atomic_write_text(readme, new)
    return False
