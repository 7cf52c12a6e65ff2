# lnrepro: Xiong et al. (ICML 2020) Figure 4 and the norm x warm-up x decay design, as one static DAG.
# The stages and their contracts: docs/architecture.md and docs/outputs.md. Every worker rule is a thin
# `shell:` call of the `lnrepro` CLI; file names come from lnrepro.paths, settings from lnrepro.config.
import gc
import re
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version

min_version("9.0")

sys.path.insert(0, str(Path(workflow.basedir) / "src"))  # the package, also when it is not installed
from lnrepro import config as cfg  # noqa: E402
from lnrepro.paths import LANGS, Paths  # noqa: E402
from lnrepro.stages import LOCAL_RULES  # noqa: E402


# The paper's experiment, found beside this Snakefile, so that `snakemake -s /path/to/Snakefile` works from any
# folder (a relative configfile: is read from the working directory). --configfile layers are merged over it.
# Results, logs and relative paths in the config (archive, mirror) stay relative to the working directory, as
# Snakemake's convention is.
configfile: str(Path(workflow.basedir) / "config.yaml")


try:  # the one validation: schema and semantic checks, a message naming the key
    cfg.validate_config(config)
    X = cfg.experiment(config)  # the typed, resolved experiment
except cfg.LnReproError as e:
    raise WorkflowError(str(e)) from None

P = Paths(X.name)
RUNS, SPLITS = X.select, X.eval.splits
# The software environment of every shell rule, for --software-deployment-method conda.
CONDA_ENV = str(Path(workflow.basedir) / "envs" / "lnrepro.yaml")


def res(rule):
    """threads/mem_mb/runtime/gpus of a rule, from the config's resources section only."""
    return cfg.resources(config, rule)


def run_pattern(runs):
    """The ``run`` wildcard's constraint: exactly these run names (grid run names hold "." and "=")."""
    return "|".join(map(re.escape, runs))


wildcard_constraints:
    run=run_pattern(RUNS),
    seed=r"\d+",
    ep=r"\d{3}",
    split="|".join(SPLITS),


workflow.localrules(*LOCAL_RULES)


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/bpe.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/analysis.smk"
include: "workflow/rules/report.smk"


# Every file a stage declares, each named target's: a declared output that no job or target wants is never written
# again once deleted (Snakemake reruns a job for its requested outputs only). The report reads the rest.
rule all:
    default_target: True
    input:
        rules.data.input,
        rules.bpe.input,
        rules.train.input,
        rules.evaluate.input,
        rules.report.input,


# What the parse built lives as long as Snakemake does: frozen, it is left out of every collection of the garbage
# collector's, the last one at exit included (about a third of a CPU-second of each snakemake process).
gc.freeze()
