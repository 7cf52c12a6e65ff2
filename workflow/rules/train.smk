# Training: one job per (run, seed). Everything kept across attempts lives in the undeclared state/ folder.


rule write_run_config:
    output:
        run_dir() + "/config.json",
    params:
        slice=lambda w: cfg.run_slice(config, w.run, int(w.seed)),
    run:
        from lnrepro.io import atomic_write_json

        atomic_write_json(output[0], params.slice)


rule train_run:
    input:
        config=run_dir() + "/config.json",
        spm=f"{BPE}/spm.model",
        ids=BPE_IDS,
    output:
        run_dir() + "/run.json",
        run_dir() + "/train.jsonl",
        run_dir() + "/summary.json",
        epoch_manifests(),
    threads: res("train_run")["threads"]
    resources:
        mem_mb=res("train_run")["mem_mb"],
        runtime=res("train_run")["runtime"],
        gpu=res("train_run")["gpus"],
    log:
        f"{R}/logs/train_run/{{run}}.seed{{seed}}.log",
    benchmark:
        f"{R}/benchmarks/train_run/{{run}}.seed{{seed}}.tsv"
    conda:
        CONDA_ENV
    shell:
        "lnrepro train --config {input.config} --bpe {BPE} --run-dir " + run_dir("{wildcards.run}", "{wildcards.seed}") + " --threads {threads} > {log} 2>&1"


rule train:
    input:
        all_runs(run_dir() + "/summary.json"),
