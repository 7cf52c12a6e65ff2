# The report: Figure 4 reproduced, the factorial comparisons with their confounds, stability, wall-clock.

from lnrepro.analysis import DEPTH_FIGURES, FIGURES
from lnrepro.paper import PUBLISHED

# The figures make_report draws, each with a caption in workflow/report/<name>.rst; the depth study's only for
# runs of more than one depth.
REPORT_FIGURES = [Path(f).stem for f in FIGURES.values()]
if len(X.depths) > 1:
    REPORT_FIGURES += [Path(f).stem for f in DEPTH_FIGURES.values()]


rule make_report:
    input:
        experiment=P.experiment_json,
        # the paper's published numbers: a change of them reruns the report alone
        published=str(PUBLISHED),
        gradinit=GRADINIT_OUTPUTS,
        summaries=each_run(P.summary),
        evals=each_run(lambda run, seed: P.scores(X.last_of(run), run, seed)),
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
        rules.make_report.output,
