# Training: one job per (run, seed), one rule per length of training (LENGTH, common.smk). Everything kept
# across attempts lives in the undeclared state/ folder.

for _last in X.lengths:

    rule:
        name:
            "train_run" + LENGTH[_last]
        input:
            config=P.run_config(),
            spm=P.spm_model[0],
            ids=P.bpe_ids,
        output:
            P.train_outputs(_last),
        wildcard_constraints:
            run=run_pattern(X.runs_of_length(_last)),
        params:
            # the digest of the config.json the experiment resolves this run to (the text write_run_config
            # writes): the trainer refuses a config.json edited by hand. Not an input: it changes exactly when
            # config.json's content does, so it reruns nothing config.json would not.
            config_sha256=lambda w: X.run_config(w.run, int(w.seed)).sha256(),
        threads: res("train_run").threads
        resources:
            **job_resources("train_run"),
        log:
            P.log("train_run", "{run}.seed{seed}"),
        benchmark:
            P.benchmark("train_run", "{run}.seed{seed}")
        conda:
            CONDA_ENV
        shell:
            "lnrepro train --config {input.config} --bpe " + P.bpe + " --run-dir " + P.run_dir("{wildcards.run}", "{wildcards.seed}")
            + " --config-sha256 {params.config_sha256} --threads {threads} --device " + res("train_run").device + " > {log} 2>&1"


# Every file training declares, so that a deleted one is written again (a target that wants only some leaves
# the others missing for good: Snakemake reruns a job for its requested outputs only).
rule train:
    input:
        each_run(lambda run, seed: P.train_outputs(X.last_of(run), run, seed)),
