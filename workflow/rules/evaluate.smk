# Scoring: one job per epoch manifest (validation loss, decoding, both BLEU kinds on every listed split).


rule score_checkpoint:
    input:
        manifest=P.epoch_manifest(),
        eval=P.eval_json,
        spm=P.spm_model[0],
        ids=P.bpe_ids,
        refs=P.prepared_files,
    output:
        json=P.score(),
        hyp=P.hypotheses(SPLITS),
    threads: res("score_checkpoint").threads
    resources:
        **job_resources("score_checkpoint"),
    log:
        P.log("score_checkpoint", "{run}.seed{seed}.epoch{ep}"),
    benchmark:
        P.benchmark("score_checkpoint", "{run}.seed{seed}.epoch{ep}")
    conda:
        CONDA_ENV
    shell:
        "lnrepro evaluate --manifest {input.manifest} --eval-config {input.eval} --bpe " + P.bpe + " --prepared " + P.prepared + " --out {output.json} --threads {threads} > {log} 2>&1"


rule evaluate:
    input:
        each_run(lambda run, seed: P.scores(EPOCHS, run, seed)),
