# The paper's gradient-at-initialization analysis (Section 3.4, Figure 3): the expected gradient of every layer
# weight of fresh models (every norm position and depth), its fit over depth, and the same measurement on a
# Post-LN run's checkpoint at the end of warm-up when the experiment trains that run.

# The run measured after warm-up: analysis.gradinit.after_warmup_run when selected, else none.
AFTER_WARMUP = X.after_warmup_run
# What the report reads of this stage: the tables at init and, per seed of the run measured after warm-up, its
# table (an output of that unit, beside its training's).
GRADINIT_OUTPUTS = [P.gradinit_csv, P.gradinit_fit_csv] + (
    [P.gradinit_after_warmup_csv(AFTER_WARMUP, seed) for seed in X.seeds_of(AFTER_WARMUP)] if AFTER_WARMUP else [])


rule gradinit:
    input:
        config=P.gradinit_json,
        spm=P.spm_model[0],
        ids=P.bpe_ids,
    output:
        csv=P.gradinit_csv,
        fit=P.gradinit_fit_csv,
    threads: res("gradinit").threads
    resources:
        **job_resources("gradinit"),
    log:
        P.log("gradinit"),
    benchmark:
        P.benchmark("gradinit", "gradinit")
    conda:
        CONDA_ENV
    shell:
        "lnrepro gradinit --gradinit-config {input.config} --bpe " + P.bpe + " --out {output.csv} --fit {output.fit} --threads {threads} --device " + res("gradinit").device + " > {log} 2>&1"


if AFTER_WARMUP:

    # One job per seed of the run, on that seed's epoch manifests: it picks the first epoch whose update count
    # reaches T_warmup (which one is in the CSV's epoch column and the log) and reads its weights, which only the
    # part that trained the seed has.
    rule gradinit_after_warmup:
        input:
            config=P.gradinit_after_warmup_json,
            spm=P.spm_model[0],
            ids=P.bpe_ids,
            manifests=P.epoch_manifests(X.last_of(AFTER_WARMUP)),
        output:
            P.gradinit_after_warmup_csv(),
        wildcard_constraints:
            run=run_pattern([AFTER_WARMUP]),
        threads: res("gradinit_after_warmup").threads
        resources:
            **job_resources("gradinit_after_warmup"),
        log:
            P.log("gradinit_after_warmup", "{run}.seed{seed}"),
        conda:
            CONDA_ENV
        shell:
            "lnrepro gradinit --gradinit-config {input.config} --bpe " + P.bpe + " --after-warmup {input.manifests} --out {output} --threads {threads} --device " + res("gradinit_after_warmup").device + " > {log} 2>&1"
