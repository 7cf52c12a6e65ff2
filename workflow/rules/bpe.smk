# Joint sentencepiece BPE: prepared train text -> spm.model -> encoded splits (ids).

BPE_IDS = expand(f"{BPE}/{{split}}.{{lang}}.ids", split=["train", "valid", "test"], lang=LANGS)


rule learn_bpe:
    input:
        f"{PREPARED}/train.de",
        f"{PREPARED}/train.en",
    output:
        f"{BPE}/spm.model",
        f"{BPE}/spm.vocab",
    params:
        bpe=config["defaults"]["bpe"],
    threads: res("learn_bpe")["threads"]
    resources:
        mem_mb=res("learn_bpe")["mem_mb"],
        runtime=res("learn_bpe")["runtime"],
    log:
        f"{R}/logs/learn_bpe.log",
    conda:
        CONDA_ENV
    shell:
        "lnrepro bpe learn --prepared {PREPARED} --out {BPE} --vocab-size {params.bpe[vocab_size]}"
        " --character-coverage {params.bpe[character_coverage]} --seed {params.bpe[seed]}"
        " --threads {threads} > {log} 2>&1"


rule apply_bpe:
    input:
        PREPARED_FILES,
        f"{BPE}/spm.model",
    output:
        BPE_IDS,
        f"{BPE}/stats.json",
    threads: res("apply_bpe")["threads"]
    resources:
        mem_mb=res("apply_bpe")["mem_mb"],
        runtime=res("apply_bpe")["runtime"],
    log:
        f"{R}/logs/apply_bpe.log",
    conda:
        CONDA_ENV
    shell:
        "lnrepro bpe apply --prepared {PREPARED} --bpe {BPE} --threads {threads} > {log} 2>&1"


rule bpe:
    input:
        BPE_IDS,
