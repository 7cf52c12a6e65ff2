"""Analysis stages: aggregation of the results tree, confound detection, figures, the HTML report and the
gradient-at-initialization study. Submodules are imported on use (matplotlib and torch are heavy):

- ``lnrepro.analysis.aggregate``: tidy tables from results/{exp}/runs/ (``aggregate``, ``write_tables``)
- ``lnrepro.analysis.confounds``: per comparison, the differing config keys (``analyze_confounds``, ``write_confounds``;
  they take experiment.json's plain dict)
- ``lnrepro.analysis.plots``: PNG figures (``make_figures``; FIGURES below names them)
- ``lnrepro.analysis.report``: ``make_report(exp_dir, experiment, out_dir) -> Path`` (report/index.html; ``experiment``
  is the typed ``lnrepro.config.Experiment``)
- ``lnrepro.analysis.gradinit``: ``run_gradinit(...)`` (analysis/gradinit.csv), ``run_after_warmup(...)``
  (analysis/gradinit_after_warmup.csv)
- ``lnrepro.analysis.gradinit_fit``: the fit over depths (analysis/gradinit_fit.csv) and the views of gradinit.csv
  the figures and the report share
"""

# The figures the report draws (file names in report/figures/); the Snakefile declares them, so this stays
# importable without matplotlib.
FIGURES = {
    "figure4": "figure4_vs_epoch.png",
    "figure4_time": "figure4_vs_updates_and_wallclock.png",
    "lr": "learning_rate_vs_update.png",
    "cells": "factorial_cells.png",
    "effects": "factorial_effects.png",
    "interaction": "interaction_norm_warmup.png",
    "failures": "failures_by_cell.png",
    "grad_layers": "grad_norms_early_by_layer.png",
    "grad_total": "grad_norm_total_early.png",
    "gradinit": "gradinit_by_layer.png",
    "gradinit_depth": "gradinit_last_layer_vs_depth.png",
}
