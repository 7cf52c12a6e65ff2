"""Everything the report's data, effects, tuned-baseline and claims sections read, computed once from the
aggregate (one job: wire tables.py, budget.py, effects.py, tuned.py and claims.py together; which of its tables
are written is ``lnrepro.analysis.build``'s list)."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ..config.settings import Comparison, Experiment, ReportSettings
from . import aggregate as ag
from . import budget as bu
from . import claims as cl
from . import effects as ef
from . import tables as tb
from . import tuned as tu


@dataclass
class Study:
    """The report's analysis of one experiment (see each module for what its tables mean)."""

    settings: ReportSettings
    split: str  # the headline split (valid)
    last: str  # the last-epoch budget's label
    target_bleu: float  # settings.target_fraction x the best seed-mean BLEU
    budgets: list[bu.Budget]
    scores_long: pd.DataFrame
    run_facts: pd.DataFrame
    budget_table: pd.DataFrame
    observations: pd.DataFrame  # headline split and time to target; other splits in other_observations
    other_observations: pd.DataFrame
    cells: pd.DataFrame  # every split's
    failures: pd.DataFrame
    design: pd.DataFrame
    design_notes: list[str]
    fits: dict[tuple[str, str], ef.Fit]
    effects: pd.DataFrame
    epoch_fits: dict[tuple[str, int], ef.Fit]  # (metric, epoch) -> the fit at every scored epoch
    effects_by_epoch: pd.DataFrame
    seed_fates: pd.DataFrame  # each seed's fate at the epoch budgets (budget.seed_fates)
    grids: dict[str, pd.DataFrame]  # grid name -> its table
    best: dict[str, str]  # grid name -> its selected run
    brackets: pd.DataFrame  # per grid and axis: whether the grid brackets its best trial (tuned.bracket_table)
    tuned: pd.DataFrame
    tuned_comparisons: dict[str, Comparison]  # for the confound analysis
    claims: pd.DataFrame

    @property
    def tuned_grids(self) -> pd.DataFrame:
        """Every grid's table, one after the other, each row naming its grid."""
        grids = [g.assign(grid=name) for name, g in self.grids.items()]
        return pd.concat(grids, ignore_index=True) if grids else pd.DataFrame(columns=["grid", "run"])


def build(experiment: Experiment, agg: ag.Aggregate, gradinit: pd.DataFrame | None = None,
          gradinit_fit: pd.DataFrame | None = None) -> Study:
    """The study of ``agg`` (aggregate.aggregate); the gradient-at-initialization tables (None when not
    computed) feed the claims of Theorem 1 and Figure 3."""
    settings, split, epochs = experiment.analysis.report, agg.split, agg.epochs
    prog = tb.progress(epochs, agg.summaries, experiment)
    # each split at the budgets its scored epochs allow; every split is scored at the last epoch (config check)
    scored = {sp: s.epochs for sp, s in experiment.eval.splits.items()}
    budget_list = bu.scored_budgets(bu.budgets(epochs, experiment.epochs, settings), scored[split], experiment.epochs)
    last = budget_list[0].label
    target = settings.target_fraction * bu.best_bleu(epochs, split)
    obs = bu.observations(epochs, budget_list, split, target, experiment.epochs)
    at_epochs = [b for b in budget_list if b.kind != "target"]
    other = pd.concat([bu.observations(epochs, bu.scored_budgets(at_epochs, scored[sp], experiment.epochs), sp,
                                       target, experiment.epochs)
                       for sp in experiment.eval.splits if sp != split] or [obs.iloc[0:0]], ignore_index=True)
    cells = bu.cell_table(pd.concat([obs, other], ignore_index=True), experiment.select, settings.bleu_interval)
    design, design_notes = ef.design(experiment)
    fits = ef.fits(obs, design, settings.covariance)
    epoch_fits = ef.epoch_fits(epochs, design, split, scored[split], settings.covariance)
    fates = bu.seed_fates(epochs, experiment.select, [(b.label, b.epoch) for b in budget_list if b.epoch], split,
                          settings)
    grid_runs = {name: g.runs for name, g in experiment.grids.items()}
    loss, bleu = bu.metric_columns(split)
    best = tu.best_of(cells, grid_runs, last, loss)
    pairs = tu.tuned_pairs(experiment)
    test_metrics = [f"test_{m}" for m in ("bleu_tok", "loss_base2")]
    claims = cl.claims_table(cl.Evidence(experiment, epochs, cells, fits, last, gradinit, gradinit_fit))
    return Study(
        settings=settings, split=split, last=last, target_bleu=target, budgets=budget_list,
        scores_long=tb.scores_long(epochs, prog, experiment.eval.splits),
        run_facts=tb.run_facts(experiment, agg.execution, agg.wallclock),
        budget_table=bu.budget_table(prog, budget_list, design["run"].tolist()),
        observations=obs, other_observations=other, cells=cells,
        failures=bu.failure_table(fates, experiment.select, last),
        design=design, design_notes=design_notes, fits=fits, effects=ef.effects_table(fits),
        epoch_fits=epoch_fits, effects_by_epoch=ef.effects_by_epoch(epoch_fits), seed_fates=fates,
        grids={name: tu.grid_table(cells, experiment, g.runs, list(g.values), last, [loss, bleu, *test_metrics],
                                   best.get(name)) for name, g in experiment.grids.items()},
        best=best, brackets=tu.bracket_table(experiment, best, f"the lowest seed-mean {loss} at {last}"),
        tuned=tu.tuned_table(other, pairs, best, last, test_metrics),
        tuned_comparisons=tu.tuned_comparisons(experiment, pairs, best), claims=claims,
    )
