# The report: Figure 4 reproduced, the factorial comparisons with their confounds, stability, wall-clock.

from lnrepro.analysis import FIGURES

# The figures make_report draws, each with a caption in workflow/report/<name>.rst.
REPORT_FIGURES = [Path(f).stem for f in FIGURES.values()]


rule make_report:
    input:
        experiment=f"{R}/experiment.json",
        gradinit=f"{R}/analysis/gradinit.csv",
        summaries=all_runs(run_dir() + "/summary.json"),
        evals=[p for run in RUNS for seed in SEEDS for p in eval_outputs(run, seed)],
    output:
        html=f"{R}/report/index.html",
        confounds=f"{R}/report/confounds.md",
        figures=[
            report(f"{R}/report/figures/{name}.png", caption=f"../report/{name}.rst", category="figures")
            for name in REPORT_FIGURES
        ],
    log:
        f"{R}/logs/make_report.log",
    conda:
        CONDA_ENV
    shell:
        "lnrepro report --experiment {input.experiment} --exp-dir {R} --out {R}/report > {log} 2>&1"


rule report:
    input:
        f"{R}/report/index.html",
