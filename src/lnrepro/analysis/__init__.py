"""Analysis stages: aggregation of the results tree, confound detection, figures, the HTML report and the
gradient-at-initialization study. Submodules are imported on use (matplotlib and torch are heavy):

- ``lnrepro.analysis.aggregate``: tidy tables from results/{exp}/runs/ (``aggregate``, ``write_tables``)
- ``lnrepro.analysis.confounds``: per comparison, the differing config keys (``analyze_confounds``, ``write_confounds``)
- ``lnrepro.analysis.plots``: PNG figures (``make_figures``)
- ``lnrepro.analysis.report``: ``make_report(exp_dir, experiment, out_dir) -> Path`` (report/index.html)
- ``lnrepro.analysis.gradinit``: ``run_gradinit(...)`` (analysis/gradinit.csv)
"""
