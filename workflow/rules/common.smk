# What the rule files share besides lnrepro.paths (P): the configuration slices every stage reads.


from lnrepro.io import atomic_write_text

# Scoring: the splits scored together at some epochs (EvalSettings.groups) have one rule and one slice each,
# named by a suffix: none for the group of every split (score_checkpoint, eval.json), else _{splits}
# (score_checkpoint_valid, eval_valid.json). A slice holds only its splits' settings, so a split's change
# rescores only the checkpoints that score that split.
SCORING = {splits: "" if splits == tuple(X.eval.splits) else "_" + "_".join(splits)
           for last in X.lengths for splits in X.eval.groups(last)}

# Runs of different lengths (train.epochs per run) declare different outputs, and a rule's outputs are fixed
# patterns: training and scoring have one rule per length, each constrained to that length's runs and named by
# a suffix, none when every selected run has the same length (train_run, score_checkpoint), else _e{epochs}
# (train_run_e20, score_checkpoint_valid_e20). Logs, benchmarks and resources are the rule's without it.
LENGTH = {last: "" if len(X.lengths) == 1 else f"_e{last}" for last in X.lengths}

# Each stage reads its settings from one JSON slice of the loaded config (lnrepro.config.settings); a rule
# reruns exactly when its slice changes (Snakemake's params trigger). Each slice holds only what its readers
# read: gradinit has its own rather than experiment.json, which the beam, the notes and every run change. Each is
# held as the file's text (Section.text: the bytes Section.write writes and Section.sha256 digests).
SLICES = {
    "data": X.data.text(),
    "bpe": X.bpe.text(),
    **{"eval" + suffix: X.eval.scoring(splits).text() for splits, suffix in SCORING.items()},
    "experiment": X.text(),
    "gradinit": X.gradinit_config().text(),
}
if X.after_warmup_run:  # the measurement after warm-up: only when its run is selected
    SLICES["gradinit_after_warmup"] = X.gradinit_config(after_warmup=True).text()


def each_run(paths):
    """``paths(run, seed)`` (a path or a list) for every selected run and each of its seeds, flattened."""
    out = []
    for run in RUNS:
        for seed in X.seeds_of(run):
            p = paths(run, seed)
            out += p if isinstance(p, list) else [p]
    return out


def job_resources(rule):
    """The ``resources:`` of a worker rule (threads are set separately, from the same entry; so is the device its
    torch stages are passed as ``--device``: ``res(rule).device``, CUDA exactly when the job is given a GPU)."""
    r = res(rule)
    return {"mem_mb": r.mem_mb, "runtime": r.runtime, "gpu": r.gpus}


# A slice is written by a shell job (milliseconds; a `run:` job is a second Snakemake process that parses the
# Snakefile again, seconds), its text one argument of the shell's command line, which Linux caps at 128 KiB
# (131,072 bytes); a longer slice (the experiment slice of several hundred runs) by write_large_slice, a `run:` job.
SHELL_SLICE_MAX = 120_000  # bytes of a slice's text (ASCII: json_text escapes the rest), room left for the command
LARGE_SLICES = [name for name, text in SLICES.items() if len(text) > SHELL_SLICE_MAX]


rule write_slice:
    output:
        P.root + "/{slice}.json",
    wildcard_constraints:
        slice="|".join(name for name in SLICES if name not in LARGE_SLICES),
    params:
        slice=lambda w: SLICES[w.slice],
    shell:
        "printf '%s' {params.slice:q} > {output}.tmp && mv {output}.tmp {output}"


if LARGE_SLICES:

    rule write_large_slice:
        localrule: True  # here, not in lnrepro.stages.LOCAL_RULES: a workflow without a large slice has no such rule
        output:
            P.root + "/{slice}.json",
        wildcard_constraints:
            slice="|".join(LARGE_SLICES),
        params:
            slice=lambda w: SLICES[w.slice],
        run:
            atomic_write_text(output[0], params.slice)


# One per training, a shell job as write_slice. The JSON is the slice's text (Section.text, the
# bytes RunConfig.write writes and whose digest train_run passes to the trainer), to a temporary name and
# renamed into place. It leaves out the schedule settings the run's switches do not use
# (Experiment.run_config), so changing one retrains only the runs that use it.
rule write_run_config:
    output:
        P.run_config(),
    params:
        slice=lambda w: X.run_config(w.run, int(w.seed)).text(),
    shell:
        "printf '%s' {params.slice:q} > {output}.tmp && mv {output}.tmp {output}"
