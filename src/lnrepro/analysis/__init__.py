"""Analysis stages: the report (read once, compute once, render) and the gradient-at-initialization study.
Submodules are imported on use (matplotlib and torch are heavy):

- ``lnrepro.analysis.results``: ``read_results(exp_dir, experiment)``, the report's one reader of the results tree
- ``lnrepro.analysis.build``: ``build(results, experiment) -> ReportData``, every table once (aggregate, tables,
  budget, effects, tuned, claims, confounds, gradinit_fit); ``ReportData.tables()`` lists the CSVs written
- ``lnrepro.analysis.plots``: PNG figures (``make_figures(data, fig_dir)``; FIGURES below names them)
- ``lnrepro.analysis.report``: ``make_report(exp_dir, experiment, out_dir) -> Path`` (report/index.html, rendered
  through the Jinja2 templates of ``templates/``; ``experiment`` is the typed ``lnrepro.config.Experiment``)
- ``lnrepro.analysis.gradinit``: ``run_gradinit(...)`` (analysis/gradinit.csv), ``run_after_warmup(...)``
  (runs/{run}/seed{seed}/gradinit_after_warmup.csv, one per seed)
- ``lnrepro.analysis.gradinit_fit``: the fit over depths (analysis/gradinit_fit.csv) and the views of gradinit.csv
  the figures and the report share
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
# Drawn only for an experiment whose selected runs have more than one depth (lnrepro.analysis.depth; the Snakefile
# declares them then).
DEPTH_FIGURES = {"depth": "failure_rate_vs_depth.png"}
