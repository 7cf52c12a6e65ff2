# lnrepro: Xiong et al. (ICML 2020) Figure 4 and the norm x warm-up x decay design, as one static DAG.
# Stage contracts: ../shared/design.md and docs/outputs.md. Every rule is a thin call of the `lnrepro` CLI.
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version, validate

min_version("9.0")

sys.path.insert(0, str(Path(workflow.basedir) / "src"))  # the package, also when it is not installed
from lnrepro import config as cfg  # noqa: E402


configfile: "config.yaml"


try:  # one line naming the bad key first; snakemake's own report of the same schema follows it otherwise
    cfg.validate_config(config)
except cfg.LnReproError as e:
    raise WorkflowError(str(e)) from None
validate(config, "workflow/schemas/config.schema.yaml")

EXP = config["name"]
R = f"results/{EXP}"
DATASET = config["defaults"]["data"]["dataset"]
RUNS = cfg.selected_runs(config)
SEEDS = config["seeds"]
EPOCHS = cfg.epochs(config)
SPLITS = config["defaults"]["eval"]["splits"]
LANGS = ["de", "en"]
PREPARED = f"{R}/data/prepared"
BPE = f"{R}/data/bpe"


def res(rule):
    """threads/mem_mb/runtime/gpus of a rule, from the config's resources section only."""
    return cfg.resources(config, rule)


wildcard_constraints:
    run="|".join(RUNS),
    seed=r"\d+",
    ep=r"\d{3}",
    split="|".join(SPLITS),


localrules:
    all,
    data,
    bpe,
    train,
    evaluate,
    report,
    fetch_archive,
    write_run_config,
    write_eval_config,
    write_experiment_config,
    make_report,


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/bpe.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/analysis.smk"
include: "workflow/rules/report.smk"


rule all:
    default_target: True
    input:
        f"{R}/report/index.html",
