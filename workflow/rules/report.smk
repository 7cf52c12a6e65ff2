# The report: Figure 4 reproduced, the factorial comparisons with their confounds, stability, wall-clock.


rule make_report:
    input:
        experiment=f"{R}/experiment.json",
        gradinit=f"{R}/analysis/gradinit.csv",
        summaries=all_runs(run_dir() + "/summary.json"),
        evals=[p for run in RUNS for seed in SEEDS for p in eval_outputs(run, seed)],
    output:
        html=f"{R}/report/index.html",
        confounds=f"{R}/report/confounds.md",
    log:
        f"{R}/logs/make_report.log",
    shell:
        "lnrepro report --experiment {input.experiment} --exp-dir {R} --out {R}/report > {log} 2>&1"


rule report:
    input:
        f"{R}/report/index.html",
