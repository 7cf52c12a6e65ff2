# Scoring: one job per epoch manifest (validation loss, decoding, both BLEU kinds on the splits scored at its
# epoch, each with its own decoding). A rule's outputs are fixed patterns, so each group of splits scored
# together (SCORING, common.smk) is one rule over its epochs: its outputs are exactly its splits' hypotheses and
# it reads its group's slice. Every variant is sized, logged and benchmarked as score_checkpoint.

for _splits, _epochs in X.eval.groups().items():

    rule:
        name:
            "score_checkpoint" + SCORING[_splits]
        input:
            manifest=P.epoch_manifest(),
            eval=P.eval_json(SCORING[_splits]),
            spm=P.spm_model[0],
            ids=P.bpe_ids,
            refs=P.prepared_files,
        output:
            json=P.score(),
            hyp=P.hypotheses(_splits),
        wildcard_constraints:
            ep="|".join(f"{ep:03d}" for ep in _epochs),
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
