"""The workflow's rules by kind: one list, read by the Snakefile (localrules) and the config check (resources).

Adding a stage: its rule file in workflow/rules/, its name here, its CLI subcommand (docs/architecture.md).
"""

# Rules that run an ``lnrepro`` subcommand; each may have a ``resources:`` entry in the config.
WORKER_RULES: tuple[str, ...] = (
    "fetch_archive",
    "prepare_corpus",
    "learn_bpe",
    "apply_bpe",
    "train_run",
    "score_checkpoint",
    "gradinit",
    "gradinit_after_warmup",
    "make_report",
)

# Rules that write a configuration slice (data.json, bpe.json, eval.json, experiment.json; a run's
# config.json) from the loaded config: instant, always local. write_large_slice, which exists only in a workflow
# with a slice longer than a shell argument, declares itself local (``localrule: True``): a name listed here must
# name a rule of every workflow, or Snakemake warns.
SLICE_RULES: tuple[str, ...] = ("write_slice", "write_run_config")

# Named targets a user builds (``snakemake bpe``); ``all`` is the default target.
TARGET_RULES: tuple[str, ...] = ("all", "data", "bpe", "train", "evaluate", "report")

# Run on the submitting host, never as a cluster job: targets, slices, a download (needs the network the
# login node has) and the report (seconds of work).
LOCAL_RULES: tuple[str, ...] = TARGET_RULES + SLICE_RULES + ("fetch_archive", "make_report")
