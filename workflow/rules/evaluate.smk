# Scoring: one job per epoch manifest (validation loss, decoding, both BLEU kinds on every listed split).


rule write_eval_config:
    output:
        f"{R}/eval.json",
    params:
        slice=cfg.eval_slice(config),
    run:
        from lnrepro.io import atomic_write_json

        atomic_write_json(output[0], params.slice)


rule score_checkpoint:
    input:
        manifest=run_dir() + "/epochs/epoch{ep}.json",
        eval=f"{R}/eval.json",
        spm=f"{BPE}/spm.model",
        ids=BPE_IDS,
        refs=PREPARED_FILES,
    output:
        json=run_dir() + "/eval/epoch{ep}.json",
        hyp=expand(run_dir("{{run}}", "{{seed}}") + "/eval/epoch{{ep}}.{split}.hyp", split=SPLITS),
    threads: res("score_checkpoint")["threads"]
    resources:
        mem_mb=res("score_checkpoint")["mem_mb"],
        runtime=res("score_checkpoint")["runtime"],
        gpu=res("score_checkpoint")["gpus"],
    log:
        f"{R}/logs/score_checkpoint/{{run}}.seed{{seed}}.epoch{{ep}}.log",
    benchmark:
        f"{R}/benchmarks/score_checkpoint/{{run}}.seed{{seed}}.epoch{{ep}}.tsv"
    conda:
        CONDA_ENV
    shell:
        "lnrepro evaluate --manifest {input.manifest} --eval-config {input.eval} --bpe {BPE} --prepared {PREPARED}"
        " --out {output.json} --threads {threads} > {log} 2>&1"


rule evaluate:
    input:
        [p for run in RUNS for seed in SEEDS for p in eval_outputs(run, seed)],
