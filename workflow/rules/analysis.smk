# The paper's gradient-at-initialization analysis (Section 3): per-layer gradient norms of fresh models.


rule write_experiment_config:
    output:
        f"{R}/experiment.json",
    params:
        slice=cfg.experiment_slice(config),
    run:
        from lnrepro.io import atomic_write_json

        atomic_write_json(output[0], params.slice)


rule gradinit:
    input:
        experiment=f"{R}/experiment.json",
        spm=f"{BPE}/spm.model",
        ids=BPE_IDS,
    output:
        f"{R}/analysis/gradinit.csv",
    threads: res("gradinit")["threads"]
    resources:
        mem_mb=res("gradinit")["mem_mb"],
        runtime=res("gradinit")["runtime"],
        gpu=res("gradinit")["gpus"],
    log:
        f"{R}/logs/gradinit.log",
    conda:
        CONDA_ENV
    shell:
        "lnrepro gradinit --experiment {input.experiment} --bpe {BPE} --out {output} --threads {threads} > {log} 2>&1"
