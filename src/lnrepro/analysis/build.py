"""Every table of the report, computed once from the loaded results (one job: run the analysis modules in order).

``build`` takes the results tree as ``results.read_results`` read it and computes, each once: the per-run
tables (``aggregate``), the study (``study``: budgets, cells, effects, failures, tuned baselines, claims,
findings), the Answer (``answer``) and the end point's equivalence tests (``equivalence``), the gradient at
initialization's tables (``gradinit_fit``), the confound analysis (``confounds``, the tuned pairs as comparisons
of their own) and Figure 4's published points (``claims.paper_marks``).
``ReportData.tables`` is the one list of the CSV files the report writes (report/tables/{name}.csv); the
figures (``plots``) and the page (``report``) read the same object and compute nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from ..config.settings import Experiment
from . import aggregate as ag
from .sections import answer as an
from .sections import claims as cl
from .stats import equivalence as eq
from .sections import depth as dp
from . import study as st
from .sections import variants as va
from .sections.confounds import analyze_confounds, confounds_rows
from .stats.gradinit_fit import depth_table, figure_depth, layer_table
from .results import Results


@dataclass(frozen=True)
class ReportData:
    """What the report's tables, figures and page show, for one experiment."""

    experiment: Experiment
    agg: ag.Aggregate
    study: st.Study
    gradinit: pd.DataFrame | None  # analysis/gradinit.csv + each seed's gradinit_after_warmup.csv; None: not computed
    gradinit_fit: pd.DataFrame | None  # analysis/gradinit_fit.csv
    gradinit_missing: str  # why gradinit is None
    gradinit_depth: int | None  # the depth Figure 3(a)/(b) shows
    gradinit_tables: dict[str, pd.DataFrame]  # gradinit_summary, gradinit_by_depth, gradinit_fit (those computed)
    confounds: dict[str, Any]  # confounds.analyze_confounds's result, the tuned pairs included
    confounds_table: pd.DataFrame  # its rows, as confounds.md's table shows them
    figure4_runs: list[str]  # the comparisons.figure4 pair (selected runs)
    marks: list[cl.PaperMark]  # the paper's Figure 4 points for them
    marks_note: str  # why there are none
    answer: an.Answer  # the Answer section's tables (answer.answer)
    equivalence: pd.DataFrame  # equivalence.equivalence: Figure 4's arms at the last epoch, within a margin
    variant_contrasts: pd.DataFrame  # variants.variant_contrasts: the other variants against Post-LN and Pre-LN
    depth: dp.Depth  # the depth study's tables (none with one depth)

    def tables(self) -> dict[str, pd.DataFrame]:
        """The one list of the report's CSV files: name -> table (report/tables/{name}.csv)."""
        a, s = self.agg, self.study
        return {
            "epochs": a.epochs, "run_epochs": a.run_epochs, "divergence": a.divergence, "wallclock": a.wallclock,
            "hosts": a.hosts, "cost_spread": a.cost_spread,
            "milestones": a.milestones, "convergence": a.convergence, "train_curves": a.curves,
            "grad_norms_early": a.layers_early, "grad_norms_by_epoch": a.layers_by_epoch,
            "scores_long": s.scores_long, "runs": s.run_facts, "budgets": s.budget_table, "cells": s.cells,
            "failures": s.failures, "seed_fates": s.seed_fates, "effects": s.effects,
            "effects_by_epoch": s.effects_by_epoch, "claims": s.claims, "tuned_grids": s.tuned_grids,
            "tuned_brackets": s.brackets, "tuned": s.tuned,
            # the same rows as confounds.md, for readers of CSV (the README's generated results read figure4's)
            "confounds": self.confounds_table,
            **self.gradinit_tables,
            **self.answer.tables(),
            "equivalence": self.equivalence,
            "variant_contrasts": self.variant_contrasts,
            **self.depth.tables(),
        }


def build(results: Results, experiment: Experiment) -> ReportData:
    """The report's analysis of ``results`` (every table once; ``tables`` lists those written)."""
    agg = ag.aggregate(results, experiment)
    study = st.build(experiment, agg, results.gradinit, results.gradinit_fit)
    pair = cl.figure4_runs(experiment)
    marks, note = cl.paper_marks(experiment, pair, agg.split)
    gi, fit = results.gradinit, results.gradinit_fit
    depth = None if gi is None else figure_depth(gi, experiment.model.decoder_layers)
    gradinit_tables = {} if gi is None else {
        "gradinit_summary": layer_table(gi, depth), "gradinit_by_depth": depth_table(gi),
        **({} if fit is None else {"gradinit_fit": fit})}
    confounds = analyze_confounds(experiment, agg.execution, study.tuned_comparisons)
    return ReportData(
        experiment=experiment, agg=agg, study=study, gradinit=gi, gradinit_fit=fit,
        gradinit_missing=results.gradinit_missing, gradinit_depth=depth, gradinit_tables=gradinit_tables,
        confounds=confounds, confounds_table=pd.DataFrame(confounds_rows(confounds)),
        figure4_runs=pair, marks=marks, marks_note=note, answer=an.answer(experiment, agg.epochs, agg.split),
        equivalence=eq.equivalence(experiment, agg.epochs, study.seed_fates, agg.split),
        variant_contrasts=va.variant_contrasts(agg.epochs, experiment, agg.split),
        depth=dp.depth(agg.epochs, results.seeds, experiment, [(b.label, b.epoch) for b in study.budgets if b.epoch],
                       agg.split, fit))
