"""Everything the report's data, effects, tuned-baseline and claims sections read, computed once from the
aggregate (one job: wire tables.py, budget.py, effects.py, tuned.py and claims.py together; which of its tables
are written is ``lnrepro.analysis.build``'s list)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import pandas as pd

from ..config.settings import Comparison, Experiment, ReportSettings
from . import aggregate as ag
from .stats import budget as bu
from .sections import claims as cl
from .stats import effects as ef
from . import tables as tb
from .sections import tuned as tu


@dataclass
class Study:
    """The report's analysis of one experiment (see each module for what its tables mean)."""

    settings: ReportSettings
    split: str  # the headline split (valid)
    last: str  # the last-epoch budget's label: the last epoch every selected run has
    fit_epoch: int  # the factorial fit's last epoch: the last epoch every cell of the design has
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
    grid_last: dict[str, str]  # grid name -> the budget its best run is chosen at (its runs' common last epoch)
    best: dict[str, str]  # grid name -> its selected run
    brackets: pd.DataFrame  # per grid and axis: whether the grid brackets its best trial (tuned.bracket_table)
    tuned: pd.DataFrame
    tuned_comparisons: dict[str, Comparison]  # for the confound analysis
    claims: pd.DataFrame

    @property
    def fit_last(self) -> str:
        """The factorial fit's last-epoch budget's label."""
        return bu.epoch_label(self.fit_epoch)

    @property
    def tuned_grids(self) -> pd.DataFrame:
        """Every grid's table, one after the other, each row naming its grid."""
        grids = [g.assign(grid=name) for name, g in self.grids.items()]
        return pd.concat(grids, ignore_index=True) if grids else pd.DataFrame(columns=["grid", "run"])


def _budgets_of(experiment: Experiment, length: int, split: str, budget_list: Sequence[bu.Budget], last: int
                ) -> list[bu.Budget]:
    """The budgets a run of ``length`` epochs is observed at on ``split``: those at epochs it scores the split
    (``budget.scored_budgets``; the scored epochs are each run's own), within its training."""
    at = bu.scored_budgets(budget_list, experiment.eval.splits[split].scored(length), last)
    return [b for b in at if b.epoch is None or b.epoch <= length]


def _observe(experiment: Experiment, epochs: pd.DataFrame, budget_list: Sequence[bu.Budget], split: str,
             target: float, last: int) -> pd.DataFrame:
    """``split``'s observations of every selected run at the budgets its length and scoring allow (``last``: the
    last epoch every selected run has), the runs of one length at a time."""
    parts = [bu.observations(epochs[epochs["run"].isin(experiment.runs_of_length(n))],
                             _budgets_of(experiment, n, split, budget_list, last), split, target, last)
             for n in experiment.lengths]
    return pd.concat(parts, ignore_index=True)


def build(experiment: Experiment, agg: ag.Aggregate, gradinit: pd.DataFrame | None = None,
          gradinit_fit: pd.DataFrame | None = None) -> Study:
    """The study of ``agg`` (aggregate.aggregate); the gradient-at-initialization tables (None when not
    computed) feed the claims of Theorem 1 and Figure 3.

    Runs are compared at epochs every compared run has (``budget.length_rule``): the study's last-epoch budget
    is the last epoch of the shortest selected run, a longer training's last epoch a budget of the runs that
    reach it; the factorial fit is at every budget its cells reach (``fit_epoch``: their common last epoch), each
    grid's best and each tuned pair at the common last epoch of their runs."""
    settings, split, epochs = experiment.analysis.report, agg.split, agg.epochs
    prog = tb.progress(epochs, agg.summaries, experiment)
    last_epoch = experiment.common_last(experiment.select)
    within = epochs[epochs["epoch"] <= last_epoch]
    target = settings.target_fraction * bu.best_bleu(within, split)
    every = bu.budgets(epochs, last_epoch, settings, experiment.lengths)
    # each split at the budgets its scored epochs allow; every split is scored at each run's last epoch
    observable = {b.label for n in experiment.lengths for b in _budgets_of(experiment, n, split, every, last_epoch)}
    budget_list = [b for b in every if b.label in observable]
    last = bu.epoch_label(last_epoch)
    obs = _observe(experiment, epochs, budget_list, split, target, last_epoch)
    at_epochs = [b for b in budget_list if b.kind != "target"]
    other = pd.concat([_observe(experiment, epochs, at_epochs, sp, target, last_epoch)
                       for sp in experiment.eval.splits if sp != split] or [obs.iloc[0:0]], ignore_index=True)
    cells = bu.cell_table(pd.concat([obs, other], ignore_index=True), experiment.select, settings.bleu_interval)
    design, design_notes = ef.design(experiment)
    cell_runs = design["run"].tolist()
    fit_epoch = experiment.common_last(cell_runs or experiment.select)
    fitted = [b.label for b in budget_list if b.epoch is None or b.epoch <= fit_epoch]
    fits = ef.fits(obs[obs["budget"].isin(fitted)], design, settings.covariance)
    epoch_fits = ef.epoch_fits(epochs, design, split, experiment.common_scored(cell_runs or experiment.select, split),
                               settings.covariance)
    fates = bu.seed_fates(tb.scored_rows(epochs, experiment, split), experiment.select,
                          [(b.label, b.epoch) for b in budget_list if b.epoch], split, settings)
    loss, bleu = bu.metric_columns(split)
    grid_last = {name: bu.epoch_label(experiment.common_last(g.runs)) for name, g in experiment.grids.items()}
    best: dict[str, str] = {}
    for name, g in experiment.grids.items():
        best.update(tu.best_of(cells, {name: g.runs}, grid_last[name], loss))
    pairs = tu.tuned_pairs(experiment)
    test_metrics = [f"test_{m}" for m in ("bleu_tok", "loss_base2")]
    grids = experiment.grids
    tuned = [tu.tuned_table(other, [p], best, bu.epoch_label(experiment.common_last(
        grids[p.grid_a].runs + grids[p.grid_b].runs)), test_metrics) for p in pairs]  # each at both grids' end
    claims = cl.claims_table(cl.Evidence(experiment, epochs, cells, fits, last, gradinit, gradinit_fit,
                                         fit_last=bu.epoch_label(fit_epoch)))
    # what each budget is in updates and tokens: the fit's over its cells, a longer training's over every run
    budget_table = bu.budget_table(prog, [b for b in budget_list if b.label in fitted], cell_runs)
    beyond = [b for b in budget_list if b.label not in fitted]
    if beyond:
        budget_table = pd.concat([budget_table, bu.budget_table(prog, beyond, experiment.select)], ignore_index=True)
    return Study(
        settings=settings, split=split, last=last, fit_epoch=fit_epoch, target_bleu=target, budgets=budget_list,
        scores_long=tb.scores_long(epochs, prog, experiment),
        run_facts=tb.run_facts(experiment, agg.execution, agg.wallclock),
        budget_table=budget_table,
        observations=obs, other_observations=other, cells=cells,
        failures=bu.failure_table(fates, experiment.select, last),
        design=design, design_notes=design_notes, fits=fits, effects=ef.effects_table(fits),
        epoch_fits=epoch_fits, effects_by_epoch=ef.effects_by_epoch(epoch_fits), seed_fates=fates,
        grids={name: tu.grid_table(cells, experiment, g.runs, list(g.values), grid_last[name],
                                   [loss, bleu, *test_metrics], best.get(name))
               for name, g in experiment.grids.items()},
        grid_last=grid_last, best=best,
        brackets=tu.bracket_table(experiment, best, f"the lowest seed-mean {loss} at "
                                  + (", ".join(dict.fromkeys(grid_last.values())) or last)),
        tuned=pd.concat(tuned, ignore_index=True) if tuned else tu.tuned_table(other, [], best, last, test_metrics),
        tuned_comparisons=tu.tuned_comparisons(experiment, pairs, best), claims=claims,
    )
