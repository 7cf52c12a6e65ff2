# Scoring: one job per run, seed and group of splits scored together (SCORING, common.smk), which scores every
# checkpoint of that group in one process (validation loss, decoding, both BLEU kinds, each split with its own
# decoding) and writes one score file per checkpoint. One process, not one per checkpoint: each job's start
# (Python, torch, the splits) cost about 3.5 CPU-seconds, as much as scoring a Multi30k checkpoint greedily
# (docs/measurements.md, issue 21). Training writes every epoch manifest at its end, so no scoring could start
# earlier. A rule's outputs are fixed patterns, so each group is one rule over its epochs: its outputs are
# exactly its splits' hypotheses and it reads its group's slice; runs of different lengths have their own rules
# (LENGTH, common.smk). Every variant is sized, logged and benchmarked as score_checkpoint.

for _last in X.lengths:
    for _splits, _epochs in X.eval.groups(_last).items():

        rule:
            name:
                "score_checkpoint" + SCORING[_splits] + LENGTH[_last]
            input:
                # the training's summary, not its epoch manifests: the same input whatever epochs the group has,
                # so that regrouping the epochs (a split's epochs changed) rescores only the checkpoints that gain
                # or lose a split. Training writes every manifest before it (one job); lnrepro evaluate reads the
                # manifest of each score file's epoch.
                summary=P.summary(),
                eval=P.eval_json(SCORING[_splits]),
                spm=P.spm_model[0],
                ids=P.bpe_ids,
                refs=P.prepared_files,
            output:
                json=[P.score(ep=f"{ep:03d}") for ep in _epochs],
                hyp=[h for ep in _epochs for h in P.hypotheses(_splits, ep=f"{ep:03d}")],
            wildcard_constraints:
                run=run_pattern(X.runs_of_length(_last)),
            params:
                # the digest of the slice the experiment resolves this group to (the text write_slice writes):
                # scoring refuses an eval.json edited by hand, as training a hand-edited config.json
                eval_sha256=X.eval.scoring(_splits).sha256(),
            threads: res("score_checkpoint").threads
            resources:
                **job_resources("score_checkpoint"),
            log:
                P.log("score_checkpoint", "{run}.seed{seed}" + SCORING[_splits]),
            benchmark:
                P.benchmark("score_checkpoint", "{run}.seed{seed}" + SCORING[_splits])
            conda:
                CONDA_ENV
            shell:
                "lnrepro evaluate --out {output.json} --eval-config {input.eval} --bpe " + P.bpe + " --prepared " + P.prepared
                + " --eval-config-sha256 {params.eval_sha256} --threads {threads} > {log} 2>&1"


rule evaluate:
    input:
        each_run(lambda run, seed: P.scores(X.last_of(run), run, seed)),
