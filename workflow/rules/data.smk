import re

# Download and preparation: results/downloads/<file> (shared by experiments) -> results/{exp}/data/prepared/.

DATA = config["defaults"]["data"]
PREPARED_FILES = expand(f"{PREPARED}/{{split}}.{{lang}}", split=["train", "valid", "test"], lang=LANGS) + expand(
    f"{PREPARED}/{{split}}.raw.{{lang}}", split=["valid", "test"], lang=LANGS
) + [f"{PREPARED}/stats.json"]


def download_args(wildcards):
    """The CLI flags that locate and verify one download (URL, mirror, local archive, checksum)."""
    if DATASET == "iwslt14":
        d = DATA["iwslt14"]
        args = [f"--url {u}" for u in d["urls"]] + [f"--md5 {d['md5']}", f"--checksum-key defaults.data.iwslt14.md5"]
        args += [f"--size {d['size']}"] if d.get("size") else []
        args += [f"--archive {d['archive']}"] if d.get("archive") else []
        args += [f"--mirror {d['mirror']}"] if d.get("mirror") else []
        args += ["--archive-key defaults.data.iwslt14.archive --mirror-key defaults.data.iwslt14.mirror"]
        return " ".join(args)
    d = DATA["multi30k"]
    name = Path(wildcards.file).name
    args = [f"--url {d['url_base']}{name}", f"--sha256 {d['sha256'][name]}"]
    args += [f"--checksum-key defaults.data.multi30k.sha256.{name}"]
    args += [f"--mirror {d['mirror']}"] if d.get("mirror") else []
    args += ["--mirror-key defaults.data.multi30k.mirror"]
    return " ".join(args)


def downloads():
    if DATASET == "iwslt14":
        return {"archive": f"results/downloads/{DATA['iwslt14']['file']}"}
    if DATASET == "multi30k":
        return {Path(n).name: f"results/downloads/multi30k/{n}" for n in DATA["multi30k"]["sha256"]}
    return {}


def prepare_args(wildcards, input):
    if DATASET == "iwslt14":
        d = DATA["iwslt14"]
        if not d.get("check_counts", True):
            return f"iwslt14 --archive {input.archive} --no-check-counts"
        counts = " ".join(f"{k}={v}" for k, v in d["expected_counts"].items())
        return f"iwslt14 --archive {input.archive} --expected-counts {counts}"
    if DATASET == "multi30k":
        clean = DATA["multi30k"].get("clean")
        flags = f"--clean {clean['min_len']} {clean['max_len']} {clean['ratio']}" if clean else ""
        return f"multi30k --folder results/downloads/multi30k {flags}"
    s = DATA["synthetic"]
    return f"synthetic --seed {s['seed']} --train {s['train']} --valid {s['valid']} --test {s['test']}"


rule fetch_archive:
    output:
        "results/downloads/{file}",
    wildcard_constraints:
        file="|".join(re.escape(p.removeprefix("results/downloads/")) for p in downloads().values()) or "^$",
    params:
        args=download_args,
    log:
        "results/downloads/logs/{file}.log",
    conda:
        CONDA_ENV
    shell:
        "lnrepro download {params.args} --out {output} > {log} 2>&1"


rule prepare_corpus:
    input:
        **downloads(),
    output:
        PREPARED_FILES,
    params:
        data=cfg.data_slice(config),
        args=prepare_args,
    threads: res("prepare_corpus")["threads"]
    resources:
        mem_mb=res("prepare_corpus")["mem_mb"],
        runtime=res("prepare_corpus")["runtime"],
    log:
        f"{R}/logs/prepare_corpus.log",
    conda:
        CONDA_ENV
    shell:
        "lnrepro prepare {params.args} --out {PREPARED} --threads {threads} > {log} 2>&1"


rule data:
    input:
        PREPARED_FILES,
