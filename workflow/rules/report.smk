# The report: Figure 4 reproduced, the factorial comparisons with their confounds, stability, wall-clock.

from lnrepro.analysis import FIGURES
from lnrepro.paper import PUBLISHED

# The figures make_report draws, each with a caption in workflow/report/<name>.rst.
REPORT_FIGURES = [Path(f).stem for f in FIGURES.values()]


rule make_report:
    input:
        experiment=P.experiment_json,
        # the paper's published numbers: a change of them reruns the report alone
        published=str(PUBLISHED),
        gradinit=GRADINIT_OUTPUTS,
        summaries=each_run(P.summary),
        evals=rules.evaluate.input,
    output:
        html=P.report_html,
        confounds=P.confounds_md,
        answer=P.answer_md,
        figures=[
            report(P.figure(name), caption=f"../report/{name}.rst", category="figures")
            for name in REPORT_FIGURES
        ],
    log:
        P.log("make_report"),
    conda:
        CONDA_ENV
    shell:
        "lnrepro report --experiment {input.experiment} --exp-dir " + P.root + " --out " + P.report + " > {log} 2>&1"


rule report:
    input:
        P.report_html,
