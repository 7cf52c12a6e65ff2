# Joint sentencepiece BPE: prepared train text -> spm.model -> encoded splits (ids).


rule learn_bpe:
    input:
        config=P.bpe_json,
        prepared=P.prepared_files,
    output:
        P.spm_model,
    threads: res("learn_bpe").threads
    resources:
        **job_resources("learn_bpe"),
    log:
        P.log("learn_bpe"),
    conda:
        CONDA_ENV
    shell:
        "lnrepro bpe learn --bpe-config {input.config} --prepared " + P.prepared + " --out " + P.bpe
        + " --threads {threads} > {log} 2>&1"


rule apply_bpe:
    input:
        prepared=P.prepared_files,
        spm=P.spm_model[0],
    output:
        P.bpe_ids,
        P.bpe_stats,
    threads: res("apply_bpe").threads
    resources:
        **job_resources("apply_bpe"),
    log:
        P.log("apply_bpe"),
    conda:
        CONDA_ENV
    shell:
        "lnrepro bpe apply --prepared " + P.prepared + " --bpe " + P.bpe + " --threads {threads} > {log} 2>&1"


rule bpe:
    input:
        P.spm_model,
        P.bpe_ids,
        P.bpe_stats,
