# Paths shared by the rule files: one place names every file of the stage contracts.

# The software environment of every shell rule, for --software-deployment-method conda.
CONDA_ENV = str(Path(workflow.basedir) / "envs" / "lnrepro.yaml")


def run_dir(run="{run}", seed="{seed}"):
    return f"{R}/runs/{run}/seed{seed}"


def epoch_manifests(run="{run}", seed="{seed}"):
    return [f"{run_dir(run, seed)}/epochs/epoch{ep:03d}.json" for ep in range(1, EPOCHS + 1)]


def all_runs(pattern):
    """``pattern`` (with {run} and {seed}) for every selected run and seed."""
    return [pattern.format(run=run, seed=seed) for run in RUNS for seed in SEEDS]


def eval_outputs(run, seed):
    return [f"{run_dir(run, seed)}/eval/epoch{ep:03d}.json" for ep in range(1, EPOCHS + 1)]
