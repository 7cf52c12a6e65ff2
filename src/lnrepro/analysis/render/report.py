"""The HTML report (one job: render report/index.html from the builder's tables and the drawn figures).

``make_report`` writes, under ``out_dir`` (results/{exp}/report/): ``tables/*.csv`` (``build.ReportData.tables``,
the one list), ``confounds.md``, ``answer.md`` (the Answer's sentences), ``figures/*.png`` (``plots``) and
``index.html`` (self-contained: inline CSS, figures by relative <img> links). An experiment without Figure 4's pair
and with runs of several depths (``depth_first``: the depth presets) asks the depth question: its summary, its
answer.md and its first section are the depth section's finding. The results tree is read once
(``results.read_results``) and every table computed once (``build.build``); this module only renders, through
Jinja2 templates with autoescaping (``templates/``). Optional inputs (gradinit.csv, training logs, evaluations
not yet run) only change what a section says; they never make the report fail. Diverged runs and epochs are shown
as "diverged". The page is a function of the records alone (no date, no host of its own), so a store's report
rebuilt anywhere has the same bytes; a study not yet finished says so first ("k of n units; missing: ...").

The page reads as a paper's results section: the title, a one-paragraph summary (``summary``), the table of
contents, one section per question, then the appendix. ``SECTIONS`` lists the sections in order (the table of
contents comes from it too): each is an anchor, a heading, a function of the page that gives its template
(``templates/sections/{anchor}.html.j2``) the variables it shows besides ``data`` (the builder's ``ReportData``,
which every template reads) and ``table`` (``{{ table(df, "id") }}`` renders one), or None where the experiment
lacks that part of the design (the depth study with one depth, no variant beyond the paper's two): then the page
has no such section; and its part (``PARTS``: a question, or the appendix). A question's variables include
``finding``, the one or two sentences its section opens with, above its figure; its detail tables are folded.
"""

from __future__ import annotations

import functools
from collections import Counter
import html
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import jinja2
import pandas as pd
from markupsafe import Markup

from ...config.settings import Experiment
from ...io import atomic_directory, atomic_write_csv, atomic_write_text, refuse_foreign_folder
from ...norms import NORMS
from ...paper import DEVIATIONS
from ...paths import ANSWER_MD
from .. import aggregate as ag
from ..stats import budget as bu
from ..sections import answer as an
from ..stats import equivalence as eq
from ..sections import tuned as tu
from . import findings as fi
from . import headline as hl
from . import views as vw
from ..build import ReportData, build
from ..sections.claims import STATUSES
from ..sections.depth import OPEN
from ..sections.confounds import flatten, write_confounds
from .deviations import config_deviations, recipe_notes, unstated_rows
from ..stats.effects import LEVEL_WORDS
from ..stats.gradinit_fit import headline, init_rows, series_label
from .plots import make_figures, norm_line_words
from ..numbers import first_sentence, interval, sig
from ..results import read_results

_NUMBER = re.compile(r"^[-+\u2212]?(\d|\.\d|inf|nan|∞)", re.IGNORECASE)


def _text_columns(df: pd.DataFrame) -> list[int]:
    """1-based positions of the columns holding text (left-aligned); numbers, also formatted ones such as
    '34.1 ± 0.2', stay right-aligned."""
    return [i + 1 for i, c in enumerate(df.columns)
            if df[c].dtype == object and any(not _NUMBER.match(str(v)) for v in df[c].dropna())]


_CELL = re.compile(r"<(t[hd])>([^<]+)</\1>")


def table(df: pd.DataFrame, table_id: str, names: Mapping[str, str] | None = None) -> Markup:
    """A table as HTML (pandas escapes every cell; numbers as ``numbers.sig`` writes them, NaN as an em dash; text
    columns left-aligned), inside a box that scrolls sideways when the table is wider than the page (the page's
    text keeps its width). A cell or heading that is one of ``names`` (a run, a metric) shows its words, the
    identifier in its tooltip (``title``)."""
    if df.empty:
        return Markup("<p><em>No data yet.</em></p>")
    left = ",".join(f"#{table_id} td:nth-child({i}),#{table_id} th:nth-child({i})" for i in _text_columns(df))
    style = Markup("<style>{}{{text-align:left}}</style>\n").format(Markup(left)) if left else Markup("")
    text = df.to_html(index=False, table_id=table_id, na_rep="—", escape=True, border=0, float_format=sig)
    if names:
        text = _CELL.sub(lambda m: str(Markup('<{0} title="{1}">{2}</{0}>').format(
            Markup(m[1]), Markup(m[2]), names[html.unescape(m[2])])) if html.unescape(m[2]) in names else m[0], text)
    return style + Markup('<div class="scroll">{}</div>').format(Markup(text))


def _distinct(values: pd.Series) -> str:
    """The distinct values of a column, sorted, comma-separated (the gradinit settings actually used)."""
    return ", ".join(map(str, sorted(values.dropna().unique().tolist())))


@dataclass(frozen=True)
class Page:
    """What every section reads: the builder's tables and the files written beside the page."""

    data: ReportData
    out_dir: Path
    tables: dict[str, Path]  # name -> tables/{name}.csv
    figures: dict[str, Path]  # key of FIGURES -> figures/*.png
    unfinished: tuple[str, ...] = ()  # units not finished and fully scored (results.Results.unfinished)

    @property
    def experiment(self) -> Experiment:
        return self.data.experiment

    def rel(self, path: Path) -> str:
        return Path(path).relative_to(self.out_dir).as_posix()

    def figure(self, key: str, caption: str) -> dict[str, str]:
        return {"src": self.rel(self.figures[key]), "caption": caption}


# --- each section's variables, in page order (SECTIONS below)


def answer_sentences(data: ReportData) -> tuple[list[str], list[str]]:
    """The Answer section's sentences: the answer's (``answer.sentences``), then the end point's equivalence tests
    (``equivalence.sentences``); the page shows them and answer.md quotes them."""
    return (an.sentences(data.answer, data.experiment, data.agg.split),
            eq.sentences(data.equivalence, data.answer.note))


def depth_first(data: ReportData) -> bool:
    """Whether the experiment's question is the depth study's: no Figure 4 pair selected, runs of several depths.
    Its page, summary and answer.md then lead with the depth section's finding."""
    return data.answer.pair is None and data.depth.shown


def answer_markdown(data: ReportData) -> str:
    """answer.md: the Answer section's sentences as Markdown paragraphs under a one-line heading, or in a depth
    experiment (``depth_first``) the depth section's finding: its lead, then the rest (the README's generated
    results lead with the first paragraph: ``readme_results``)."""
    heading = f"# The answer: {data.experiment.name}"
    if depth_first(data):
        d = data.depth
        rest = d.finding[len(d.lead):]  # the finding opens with its lead
        return "\n\n".join([heading, " ".join(d.lead), *([" ".join(rest)] if rest else [])]) + "\n"
    answer, end_point = answer_sentences(data)
    lead = " ".join(hl.headline(data))
    return "\n\n".join([heading, *([lead] if lead else []), *answer, *end_point]) + "\n"


def summary(data: ReportData) -> str:
    """The paragraph under the title: the verdict first (the Answer's headline's first sentence; in a depth
    experiment the depth question's answer, ``depth_first``), then the claims' tally and what was run, its runs
    grouped by their seed counts, each sentence from the tables."""
    e = data.experiment
    tally = data.study.claims["status"].value_counts()
    claims = ", ".join(f"{int(tally[s])} {s}" for s in STATUSES if s in tally)
    said = hl.headline(data)
    lead = (list(data.depth.lead) if depth_first(data) else [first_sentence(said[0])] if said
            else an.speed_sentences(data.answer, e, data.agg.split)[:1])
    by_seeds = Counter(len(e.seeds_of(run)) for run in e.select)
    design = [f"{n} run{'s' if n != 1 else ''} of {k} seed{'s' if k != 1 else ''}"
              for k, n in sorted(by_seeds.items(), reverse=True)]
    ran = ", ".join(design[:-1]) + f" and {design[-1]}" if len(design) > 1 else "".join(design)
    return " ".join([*lead, f"Of the paper's {len(data.study.claims)} claims checked here: {claims}." if claims else "",
                     f"{ran[:1].upper()}{ran[1:]} on {e.data.dataset}." if ran else ""]).replace("  ", " ").strip()


def _answer(page: Page) -> dict[str, Any]:
    d = page.data
    a = d.answer
    speed = an.speed_sentences(a, page.experiment, d.agg.split)
    notes = list(a.notes) if a.pair is not None else []
    lead = " ".join(hl.headline(d))
    return {"finding": lead or speed[0], "sentences": [*(speed if lead else speed[1:]), *notes], "pair": a.pair,
            "pairs": an.pairs_view(a, page.experiment), "settings": a.settings,
            "answer_figure": page.figure("answer", "Figure 4's gap at every epoch, split one factor at a time; time to "
                                            "quality of the pair"),
            "middle": f"{an.middle_fraction(a.settings):.0%}",
            "fractions": ", ".join(f"{f:.0%}" for f in a.settings.quality_fractions)}


def _endpoint(page: Page) -> dict[str, Any]:
    d = page.data
    a = d.answer
    end = an.end_point_sentences(a, page.experiment, d.agg.split)
    tests = eq.sentences(d.equivalence, a.note)
    return {"finding": an.end_point_headline(a, d.agg.split) or (tests[0] if tests else ""), "sentences": end,
            "tests": tests, "pair": a.pair, "equivalence": eq.view(d.equivalence), "settings": a.settings,
            "endpoint": an.endpoint_view(a), "tolerance": f"{a.settings.convergence_tolerance:.1%}"}


def _findings(page: Page) -> dict[str, Any]:
    return {"groups": fi.findings(page.data)}


def _what_was_run(page: Page) -> dict[str, Any]:
    e = page.experiment
    grid_seeds = "".join(f"; grid {g}: {', '.join(map(str, gs.seeds))}" for g, gs in e.grids.items())
    return {"seeds": ", ".join(map(str, e.seeds)) + grid_seeds, "n_runs": len(e.select), "dataset": e.data.dataset,
            "notes": e.notes, "scaling": vw.key_values(flatten(e.scaling).items()) if e.scaling else None,
            "runs": vw.run_factors(e), "shared": vw.key_values(vw.shared_settings(e)),
            # sorted by key, as the shared settings
            "eval": vw.key_values(vw.eval_settings(e))}


def _figure4(page: Page) -> dict[str, Any]:
    d, e = page.data, page.experiment
    split = d.agg.split

    def per_epoch(heading: str, sp: str, metric: str, table_id: str) -> dict[str, Any]:
        """A heading and the per run per epoch table of one score of ``sp``, at the epochs each run scores it."""
        scored = {run: e.scored(run, sp) for run in e.select}
        return {"heading": heading, "id": table_id,
                "table": vw.per_epoch_table(d.agg.run_epochs, f"{sp}_{metric}", e.select, scored)}

    tables = [per_epoch(f"{vw.metric_words(split + '_bleu_tok')} (tokenized), per run and epoch", split, "bleu_tok",
                        "bleu-per-epoch"),
              per_epoch(f"{vw.metric_words(split + '_loss_base2')}, label-smoothed, per run and epoch", split,
                        "loss_base2", "loss-per-epoch")]
    tables += [per_epoch(f"{vw.metric_words(sp + '_bleu_tok')} (tokenized), per run and epoch", sp, "bleu_tok",
                         f"bleu-per-epoch-{sp}")
               for sp in e.eval.splits if sp != split]
    tables += [per_epoch(f"sacreBLEU (detokenized, against the raw references) on {sp}", sp, "sacrebleu",
                         f"sacrebleu-per-epoch-{sp}") for sp in e.eval.splits]
    return {"finding": fi.gap_headline(d), "pair": " vs ".join(d.figure4_runs) or "not configured or not selected",
            "split": split,
            "figure4": page.figure("figure4", "Figure 4: validation loss and BLEU per epoch"),
            "figure4_time": page.figure("figure4_time",
                                        "Figure 4's curves against updates and the CPU-seconds of training"),
            "per_epoch": tables, "convergence": vw.convergence_view(d.agg.convergence),
            "convergence_rule": fi.rules(d)["convergence"], "milestones": d.agg.milestones,
            "within": d.study.last if len(e.lengths) > 1 else ""}


def _effects(page: Page) -> dict[str, Any]:
    s = page.data.study
    controlled = fi.findings(page.data)[1].sentences
    return {"finding": " ".join([*controlled[:1], fi.norm_headline(page.data)]),
            "s": s, "target_fraction": f"{s.settings.target_fraction:.0%}",
            "target": sig(s.target_bleu),
            "length_rule": bu.length_rule(page.experiment.lengths),
            "design": s.design.rename(columns={f: f"{f} (-1 {lo}, +1 {hi})" for f, (lo, hi) in LEVEL_WORDS.items()}),
            "cells": vw.cells_view(s.cells, page.experiment.select), "effects": vw.effects_view(s.effects),
            "rules": fi.rules(page.data),
            "by_epoch": [{"metric": m, "words": vw.metric_words(m),
                          "table": vw.effects_by_epoch_view(s.effects_by_epoch, m)}
                         for m in dict.fromkeys(s.effects_by_epoch["metric"])],
            "by_epoch_figure": page.figure("effects_by_epoch", "factorial effects at every scored epoch, 95% bands"),
            "cells_figure": page.figure("cells", f"every cell at {s.last}: seeds as points, mean and 95% interval"),
            "effects_figure": page.figure("effects", f"main effects and interactions at {s.fit_last}, 95% intervals"),
            "interaction_figure": page.figure("interaction", f"norm x warm-up interaction at {s.last}")}


def _tuned(page: Page) -> dict[str, Any]:
    s, e = page.data.study, page.experiment
    grids = [{"name": name, "base": e.grids[name].base, "varies": ", ".join(e.grids[name].values),
              "seeds": ", ".join(map(str, e.grids[name].seeds)), "best": s.best.get(name, "none scored yet"),
              "table": t} for name, t in s.grids.items()]
    sentences = tu.bracket_sentences(s.brackets)
    finding = sentences[0] if sentences else "No grid is selected: this experiment has no tuned baselines."
    return {"finding": finding, "any": bool(e.grids),
            "last": ", ".join(dict.fromkeys(s.grid_last.values())) or s.last, "grids": grids,
            "tuned": s.tuned, "length_rule": bu.length_rule(e.lengths), "brackets": s.brackets,
            "bracket_sentences": sentences}


def _variants(page: Page) -> dict[str, Any] | None:
    """The variants beyond the paper's two; None (no section) when no such run is selected."""
    e, v = page.experiment, page.data.variant_contrasts
    others = [r for r in e.select if e.runs[r].model.norm not in ("post", "pre")]
    if not others:
        return None
    last = v[v["epoch"] == v["epoch"].max()] if len(v) else v
    contrasted = sorted(set(v["variant_run"])) if len(v) else []
    finding = (f"{len(contrasted)} of {len(others)} runs of a variant beyond Post-LN and Pre-LN are contrasted with "
               "both at an equal schedule.")
    return {"finding": finding, "last": f"epoch {int(v['epoch'].max())}" if len(v) else "",
            "missing": ", ".join(r for r in others if r not in set(v["variant_run"])), "rows": vw.variant_view(last)}


def _depth(page: Page) -> dict[str, Any] | None:
    """The depth study's variables; None (no section) when the selected runs have one depth."""
    d, last = page.data.depth, page.data.study.last
    if not d.shown:
        return None
    skipped = d.test[d.test["test"].str.startswith("skipped")]
    return {"finding": " ".join(d.lead),
            "deep": d.deep, "deepest": d.depths[-1],
            "depths": ", ".join(map(str, d.depths)), "last": last, "rule": d.rule, "resolution": d.resolution,
            "rates_lr": ", ".join(sig(lr) for lr in dict.fromkeys(d.rates["lr_max"])),
            "rates": vw.depth_rates_view(d.rates, last),
            "rates_figure": page.figure("depth", "failure and divergence rates against depth"),
            "quality": d.quality, "time": d.time_to_quality,
            "fractions": ", ".join(f"{f:.0%}" for f in page.experiment.analysis.report.quality_fractions),
            "floor": "none (eval.valid_bleu_floor: null)" if d.floor is None else f"{d.floor:g}",
            "test": d.test, "n_skipped": len(skipped), "claims": vw.claims_view(d.claims),
            "statuses": ", ".join(STATUSES), "open": OPEN, "confounds": d.confounds,
            "sensitivity": vw.depth_sensitivity_view(d.sensitivity), "sensitivity_words": " ".join(d.sensitivity_words),
            "sensitivity_claims": vw.claims_view(d.sensitivity_claims)}


def _claims(page: Page) -> dict[str, Any]:
    return {"statuses": ", ".join(STATUSES), "claims": vw.claims_view(page.data.study.claims)}


def _confounds(page: Page) -> dict[str, Any]:
    conf = page.data.confounds
    return {"rows": page.data.confounds_table, "sentences": [c["sentence"] for c in conf["comparisons"]],
            "lr_figure": page.figure("lr", "learning rate of every run over updates"), "time_note": conf["time_note"]}


def _stability(page: Page) -> dict[str, Any]:
    agg, s = page.data.agg, page.data.study
    shown = {page.experiment.runs[run].model.norm for run in page.experiment.select}  # the variants drawn
    styles = ", ".join(f"{v.label} {norm_line_words(name)}" for name, v in NORMS.items()
                       if name in shown)
    said = fi.findings(page.data)[2].sentences
    return {"finding": " ".join(said[:2]), "s": s, "rules": fi.rules(page.data),
            "fates": vw.fates_view(s.seed_fates, s.last),
            "failures_figure": page.figure("failures",
                                           "share of seeds diverged, stopped or that did not train, per cell"),
            "divergence": agg.divergence, "early_updates": agg.early_updates, "styles": styles,
            "layers": page.figure("grad_layers", "per-layer gradient norms early in training"),
            "total": page.figure("grad_total", "total gradient norm early in training"),
            "early": (vw.early_grad_table(agg.layers_early, page.experiment.select) if len(agg.layers_early)
                      else None)}


def _wallclock(page: Page) -> dict[str, Any]:
    agg = page.data.agg
    return {"wallclock": agg.wallclock, "cost_spread": agg.cost_spread,
            "spread_sentence": ag.cost_spread_sentence(agg.cost_spread),
            "host_sentence": ag.host_sentence(agg.hosts)}


def _after_warmup_text(page: Page) -> str:
    """Which checkpoint was measured after warm-up, per seed, or why none was."""
    gi, e = page.data.gradinit, page.experiment
    run = e.analysis.gradinit.after_warmup_run
    after = gi[gi["checkpoint"] == "after_warmup"]
    if after.empty:
        why = "analysis.gradinit.after_warmup_run is null" if run is None else \
            f"{run} is not selected" if run not in e.runs else "its measurement is missing"
        return f"No checkpoint after warm-up: {why}."
    t_warmup = e.runs[run].schedule.warmup_updates
    seeds = after[["seed", "epoch", "updates", "depth", "d_model"]].drop_duplicates().sort_values("seed", kind="stable")
    return (f"After warm-up: {run}, the first checkpoint whose update count reaches T_warmup = {t_warmup}: "
            + "; ".join(f"seed {r.seed}: epoch {r.epoch} ({r.updates} updates)" for r in seeds.itertuples())
            + f". Its model: {_distinct(seeds['depth'])} layers, d_model {_distinct(seeds['d_model'])}.")


def _gradinit(page: Page) -> dict[str, Any]:
    d = page.data
    gi = d.gradinit
    if gi is None:
        return {"finding": f"Expected gradient at initialization: {d.gradinit_missing}.", "missing": d.gradinit_missing}
    init = init_rows(gi)
    used = "; ".join(f"{col}: {_distinct(init[col])}" for col in (
        "batches", "max_tokens", "target_tokens", "d_model", "ffn_dim", "heads", "label_smoothing", "dropout",
        "precision"))
    out = {"finding": "", "missing": "", "seeds": _distinct(init["seed"]), "depths": _distinct(init["depth"]),
           "used": used,
           "after_warmup": _after_warmup_text(page), "depth": d.gradinit_depth,
           "by_layer": page.figure("gradinit", "expected gradient of W1 and W2 by layer"),
           "summary": d.gradinit_tables["gradinit_summary"],
           "by_depth_figure": page.figure("gradinit_depth",
                                          "last decoder layer's W2 expected gradient against depth, log-log"),
           "fit": None}
    if d.gradinit_fit is not None:
        fit = d.gradinit_fit
        top = headline(fit)
        fitted = "; ".join(f"{series_label(r.norm, 'init')} b = {interval(r.b, r.b_low, r.b_high)}"
                           + (f" (theory {r.theory_b:g})" if math.isfinite(r.theory_b) else "")
                           for r in top.itertuples())
        each = [f"{series_label(r.norm, 'init')}: b = {interval(r.b, r.b_low, r.b_high)}"
                + (f", theory {sig(r.theory_b)}." if math.isfinite(r.theory_b) else ".") for r in top.itertuples()]
        out["finding"] = ("The last decoder layer's expected gradient against depth, fitted as c L^b, one variant a "
                          "sentence. " + " ".join(each))
        out["fit"] = {"interval": ", ".join(sorted(set(top["interval"]))), "fitted": fitted,
                      "by_depth": d.gradinit_tables["gradinit_by_depth"],
                      "all": pd.concat([top, fit.drop(top.index)]).drop(columns="interval")}
    return out


def _assumptions(page: Page) -> dict[str, Any]:
    e = page.experiment
    return {"unstated": pd.DataFrame(unstated_rows(e)), "config": config_deviations(e) + recipe_notes(e),
            "implementation": vw.implementation_notes(e, DEVIATIONS)}


def _where(page: Page) -> dict[str, Any]:
    return {"hosts": vw.hosts_view(page.data.agg.hosts)}


def _files(page: Page) -> dict[str, Any]:
    return {"links": [page.rel(p) for _, p in sorted(page.tables.items())] + ["confounds.md", ANSWER_MD]}


# The page's two parts, in order, with their headings in the table of contents.
PARTS = (("question", "Results"), ("appendix", "Appendix"))
QUESTION, APPENDIX = (part for part, _ in PARTS)

# (anchor, heading, the section's variables, part): the page's order and its table of contents; the section's
# template is templates/sections/{anchor}.html.j2.
SECTIONS: tuple[tuple[str, str, Callable[[Page], dict[str, Any] | None], str], ...] = (
    ("answer", "The answer", _answer, QUESTION),
    ("figure4", "Figure 4 reproduced", _figure4, QUESTION),
    ("effects", "What separates the factors", _effects, QUESTION),
    ("endpoint", "Where the curves end", _endpoint, QUESTION),
    ("tuned", "Tuned baselines", _tuned, QUESTION),
    ("stability", "Stability and failures", _stability, QUESTION),
    ("depth", "Depth: which variants train deep", _depth, QUESTION),
    ("variants", "Variants beyond the paper's two", _variants, QUESTION),
    ("gradinit", "Gradient at initialization", _gradinit, QUESTION),
    ("claims", "Claims in full", _claims, APPENDIX),
    ("confounds", "Confounds in full", _confounds, APPENDIX),
    ("findings", "Every finding in words", _findings, APPENDIX),
    ("run", "Settings", _what_was_run, APPENDIX),
    ("assumptions", "Assumptions and deviations", _assumptions, APPENDIX),
    ("wallclock", "Runs and their cost", _wallclock, APPENDIX),
    ("where", "Where it ran", _where, APPENDIX),
    ("files", "Files", _files, APPENDIX),
)


def _environment(names: Mapping[str, str] | None = None) -> jinja2.Environment:
    """The templates beside this module, HTML-escaped unless marked safe; an undefined variable is an error;
    ``table`` shows ``names`` (runs and metrics) in words."""
    env = jinja2.Environment(loader=jinja2.PackageLoader("lnrepro.analysis.render", "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                             keep_trailing_newline=True)
    env.globals["table"] = functools.partial(table, names=names)
    return env


def render(page: Page) -> str:
    """index.html's text."""
    env = _environment(vw.names(page.experiment))
    shown = [(anchor, heading, values, part) for anchor, heading, variables, part in SECTIONS
             if (values := variables(page)) is not None]  # None: a part of the design the experiment lacks
    if depth_first(page.data):  # the depth section leads: the experiment's question
        shown.sort(key=lambda section: section[0] != "depth")
    sections = [{"anchor": anchor, "heading": heading, "part": part, "finding": values.pop("finding", ""),
                 "body": Markup(env.get_template(f"sections/{anchor}.html.j2").render(data=page.data, **values))}
                for anchor, heading, values, part in shown]
    units = sum(len(page.experiment.seeds_of(run)) for run in page.experiment.select)
    return env.get_template("index.html.j2").render(
        name=page.experiment.name, summary=summary(page.data), parts=PARTS, sections=sections,
        unfinished=page.unfinished, units=units)


# What a report folder holds: an existing --out with anything else is not a report and is never replaced.
REPORT_ENTRIES = frozenset({"tables", "figures", "confounds.md", ANSWER_MD, "index.html"})


def make_report(exp_dir: Path, experiment: Experiment, out_dir: Path) -> Path:
    """Build ``out_dir`` (results/{exp}/report/): tables/*.csv, confounds.md, answer.md, figures/*.png, index.html.
    Returns the path of index.html. An existing ``out_dir`` that is not a report (``REPORT_ENTRIES``) is refused
    first. The report is written into a folder beside ``out_dir`` that replaces it
    whole (``io.atomic_directory``): a failure leaves the previous report as it was, tables included (under
    Snakemake, which deletes the declared page and figures first, the tables stay wholly the old ones)."""
    out_dir = Path(out_dir)
    refuse_foreign_folder(out_dir, REPORT_ENTRIES, "report folder")
    results = read_results(exp_dir, experiment)
    data = build(results, experiment)
    with atomic_directory(out_dir) as staging:
        tables = {name: atomic_write_csv(staging / "tables" / f"{name}.csv", df) for name, df in data.tables().items()}
        write_confounds(data.confounds, staging / "confounds.md")
        atomic_write_text(staging / ANSWER_MD, answer_markdown(data))
        page = Page(data, staging, tables, make_figures(data, staging / "figures"),
                    tuple(results.unfinished(experiment)))
        atomic_write_text(staging / "index.html", render(page))
    return out_dir / "index.html"
