"""Analysis stages: the report (read once, compute once, render) and the gradient-at-initialization study.
Submodules are imported on use (matplotlib and torch are heavy). The report's parts:

- this package: the data. ``results.py`` (``read_results(exp_dir, experiment)``, the report's one reader of the
  results tree), ``aggregate.py`` and ``tables.py`` (run outputs into tables), ``study.py`` (the factorial
  study's tables) and ``build.py`` (``build(results, experiment) -> ReportData``, every table once;
  ``ReportData.tables()`` lists the CSVs written); ``gradinit.py``, the gradient-at-initialization stage
  (``run_gradinit(...)``: analysis/gradinit.csv, ``run_after_warmup(...)``: one CSV per seed)
- ``stats/``: the statistics, free of the report's wording (budgets and seed fates, the factorial fit, the
  equivalence tests, the gradinit fit over depths)
- ``sections/``: each question's tables and sentences (the Answer, claims, confounds, tuned baselines, depth,
  variants, findings)
- ``render/``: the page (``report.py``: ``make_report(exp_dir, experiment, out_dir) -> Path`` through the Jinja2
  templates of ``render/templates/``), the figures (``plots.py``: ``make_figures(data, fig_dir)``; FIGURES below
  names them), the views the page reshapes tables into, and the README's results
"""


# The figures the report draws (file names in report/figures/); the Snakefile declares them, so this stays
# importable without matplotlib.
FIGURES = {
    "figure4": "figure4_vs_epoch.png",
    "figure4_time": "figure4_vs_updates_and_cpu_time.png",
    "lr": "learning_rate_vs_update.png",
    "cells": "factorial_cells.png",
    "effects": "factorial_effects.png",
    "effects_by_epoch": "factorial_effects_by_epoch.png",
    "interaction": "interaction_norm_warmup.png",
    "failures": "failures_by_cell.png",
    "grad_layers": "grad_norms_early_by_layer.png",
    "grad_total": "grad_norm_total_early.png",
    "gradinit": "gradinit_by_layer.png",
    "gradinit_depth": "gradinit_last_layer_vs_depth.png",
    "answer": "answer_time_and_decomposition.png",
}
# Drawn only for an experiment whose selected runs have more than one depth (lnrepro.analysis.sections.depth; the
# Snakefile declares them then).
DEPTH_FIGURES = {"depth": "failure_rate_vs_depth.png"}
