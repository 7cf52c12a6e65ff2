"""An experiment's run outputs as tidy pandas tables (one job: tabulate what ``results.read_results`` read).

From each seed's epoch manifests, score files, ``summary.json``, ``run.json`` and ``train.jsonl``: a missing
file gives NaN / "missing", never a crash, because the report must render for a partly finished experiment
too. A run or epoch that diverged is recorded as ``diverged`` (a result), never as missing data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from ..config.settings import Experiment
from ..host import host_key
from ..records import Record, RunStatus
from .intervals import t_quantile
from .results import Results, SeedResults

# Scores read per split from eval/epochNNN.json "splits": {split: {...}}.
SPLIT_METRICS = ("loss", "nll", "loss_base2", "nll_base2", "bleu_tok", "sacrebleu")
# Fields of a train.jsonl record that are scalars of the training curve.
TRAIN_SCALARS = ("loss", "nll", "lr", "grad_norm", "tokens_per_s", "wall_s", "attempt")

COST = "train_cpu_s"  # the report's cost: training CPU-seconds
# How cost compares across hosts, whose CPU-seconds differ.
HOST_FREE_UNIT = "updates and epochs"

# A checkpoint's status in the tables: the records' (lnrepro.records.RunStatus: ok, diverged, stopped), or the
# report's own for work not done yet.
STATUS_OK = RunStatus.OK.value
STATUS_DIVERGED = RunStatus.DIVERGED.value
STATUS_NOT_EVALUATED = "not evaluated"
STATUS_MISSING = "missing"


def _field(record: Record | None, name: str) -> Any:
    """A record's field, None while the record is not written yet."""
    return None if record is None else getattr(record, name)


def _num(x: Any) -> float:
    """A float, NaN for None/missing/non-numeric (so absent scores become NaN, not crashes)."""
    try:
        return float(x) if x is not None else math.nan
    except (TypeError, ValueError):
        return math.nan


def primary_split(experiment: Experiment) -> str:
    """The split of the report's headline numbers: 'valid' (validation loss, as the paper) when scored."""
    splits = experiment.eval.splits
    return "valid" if "valid" in splits else next(iter(splits))


# ---------------------------------------------------------------------------------------------------
# per (run, seed, epoch)


def epoch_table(results: Results, experiment: Experiment) -> pd.DataFrame:
    """One row per (run, seed, epoch): status, updates, training wall-clock at the end of that epoch,
    evaluation wall-clock, and every scored split's scores as ``{split}_{metric}`` columns (NaN at an epoch the
    split is not scored at: ``eval.splits.{split}.epochs``).

    ``status`` is ``diverged`` when the manifest, the evaluation or summary.json says so,
    ``ok`` when scored, ``not evaluated`` when trained but not yet scored, ``missing`` otherwise.
    """
    splits = experiment.eval.splits
    rows: list[dict[str, Any]] = []
    for sr in results.seeds:
        run, seed, div = sr.run, sr.seed, _field(sr.summary, "diverged")
        div_epoch = None if div is None else div.epoch
        for ep in range(1, sr.epochs + 1):
            man, ev = sr.manifests[ep], sr.scores[ep]
            train_status = STATUS_MISSING if man is None else man.status.value
            if man is None and div_epoch is not None and ep >= div_epoch:
                train_status = STATUS_DIVERGED  # summary knows even if manifests are not written yet
            eval_status = STATUS_MISSING if ev is None else ev.status.value
            if STATUS_DIVERGED in (train_status, eval_status):
                status = STATUS_DIVERGED
            elif train_status not in (STATUS_OK, STATUS_MISSING):
                status = str(train_status)  # e.g. "stopped" (train.max_updates reached before this epoch)
            elif eval_status == STATUS_OK:
                status = STATUS_OK
            elif train_status == STATUS_OK:
                status = STATUS_NOT_EVALUATED
            else:
                status = STATUS_MISSING
            row: dict[str, Any] = {
                "run": run, "seed": seed, "epoch": ep, "status": status,
                "train_status": train_status, "eval_status": eval_status,
                "updates": _num(_field(man, "updates")),
                "train_wall_s": _num(_field(man, "wall_s")),
                "eval_wall_s": _num(_field(ev, "wall_s")),
                "train_cpu_s": _num(_field(man, "cpu_s")),
                "eval_cpu_s": _num(_field(ev, "cpu_s")),
            }
            ev_splits = _field(ev, "splits") or {}
            for sp in splits:
                scores = ev_splits.get(sp)
                for m in SPLIT_METRICS:
                    # a diverged epoch has no scores: NaN, with status telling why
                    row[f"{sp}_{m}"] = _num(_field(scores, m)) if status == STATUS_OK else math.nan
            rows.append(row)
    cols = ["run", "seed", "epoch", "status", "train_status", "eval_status", "updates", "train_wall_s",
            "eval_wall_s", "train_cpu_s", "eval_cpu_s"] + [f"{sp}_{m}" for sp in splits for m in SPLIT_METRICS]
    return pd.DataFrame(rows, columns=cols)


def metric_columns(df: pd.DataFrame) -> list[str]:
    """The numeric score columns of an epoch table."""
    return [c for c in df.columns if any(c.endswith("_" + m) for m in SPLIT_METRICS)]


def run_epoch_table(epochs: pd.DataFrame) -> pd.DataFrame:
    """Per (run, epoch) over seeds: seed counts by status, and mean/std/min/max of every score and of the
    wall-clock/updates. Diverged seeds are excluded from the means and counted in ``n_diverged``;
    ``status`` is ok (all seeds scored), diverged (all diverged), partial (some diverged) or missing."""
    if epochs.empty:
        return pd.DataFrame(columns=["run", "epoch", "n_seeds", "n_ok", "n_diverged", "status"])
    value_cols = ["updates", "train_wall_s", "eval_wall_s", "train_cpu_s", "eval_cpu_s"] + metric_columns(epochs)
    out_rows = []
    for (run, ep), g in epochs.groupby(["run", "epoch"], sort=False):
        n, n_ok = len(g), int((g["status"] == STATUS_OK).sum())
        n_div = int((g["status"] == STATUS_DIVERGED).sum())
        if n_div == n:
            status = STATUS_DIVERGED
        elif n_div > 0:
            status = "partial"
        elif n_ok == n:
            status = STATUS_OK
        elif n_ok > 0:
            status = "partial"
        else:  # nothing scored: the seeds' common status (missing, not evaluated, stopped), else "partial"
            statuses = set(g["status"])
            status = statuses.pop() if len(statuses) == 1 else "partial"
        row: dict[str, Any] = {"run": run, "epoch": ep, "n_seeds": n, "n_ok": n_ok, "n_diverged": n_div,
                               "status": status}
        live = g[g["status"] != STATUS_DIVERGED]  # diverged seeds count in n_diverged, not in the means
        for c in value_cols:
            v = live[c].astype(float)
            row[f"{c}_mean"] = v.mean()
            row[f"{c}_std"] = v.std(ddof=1) if v.count() > 1 else (0.0 if v.count() == 1 else math.nan)
            row[f"{c}_min"] = v.min()
            row[f"{c}_max"] = v.max()
        out_rows.append(row)
    return pd.DataFrame(out_rows)


# ---------------------------------------------------------------------------------------------------
# per run


def _by_run(results: Results, experiment: Experiment) -> dict[str, list[SeedResults]]:
    """Each selected run's seeds, in ``select`` order."""
    out: dict[str, list[SeedResults]] = {run: [] for run in experiment.select}
    for sr in results.seeds:
        out[sr.run].append(sr)
    return out


def divergence_table(results: Results, experiment: Experiment, epochs: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per run: seeds finished (summary.json present), seeds diverged, divergence rate, and where."""
    rows = []
    for run, seeds in _by_run(results, experiment).items():
        n_fin, n_div, where = 0, 0, []
        for sr in seeds:
            summary, seed = sr.summary, sr.seed
            div: tuple[Any, Any, str] | None = None  # update, epoch, detail
            if summary is not None:
                n_fin += 1
                d = summary.diverged
                div = None if d is None else (d.update, d.epoch, d.detail)
            elif epochs is not None:
                # no summary yet: a diverged manifest still tells us
                g = epochs[(epochs["run"] == run) & (epochs["seed"] == seed)
                           & (epochs["train_status"] == STATUS_DIVERGED)]
                if len(g):
                    n_fin += 1
                    div = ("?", int(g["epoch"].min()), "")
            if div:
                n_div += 1
                update, epoch, why = div
                where.append(f"seed {seed}: update {update}, epoch {epoch}" + (f" ({why})" if why else ""))
        rows.append({"run": run, "n_seeds": len(seeds), "n_finished": n_fin, "n_diverged": n_div,
                     "divergence_rate": (n_div / n_fin) if n_fin else math.nan, "diverged_at": "; ".join(where)})
    return pd.DataFrame(rows, columns=["run", "n_seeds", "n_finished", "n_diverged", "divergence_rate", "diverged_at"])


def wallclock_table(results: Results, epochs: pd.DataFrame, curves: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per (run, seed): updates, training wall-clock summed over attempts (summary.json), seconds per
    update, mean logged target tokens/s, evaluation wall-clock summed over epochs, attempts, the CPU-seconds of
    training (per update too) and scoring, threads, precision, host, device."""
    rows = []
    for sr in results.seeds:
        run, seed, summary, rj = sr.run, sr.seed, sr.summary, sr.run_info or {}
        ran = rj.get("where_ran") or {}
        g = epochs[(epochs["run"] == run) & (epochs["seed"] == seed)]
        updates = _num(_field(summary, "updates"))
        # training wall-clock summed over attempts: the time in updates whose results were kept, across
        # resumes (the epoch manifests' wall_s is the same clock)
        wall = _num(_field(summary, "train_s"))
        if math.isnan(wall) and len(g):  # summary not yet written: last manifest's cumulative wall-clock
            wall = g["train_wall_s"].max()
            updates = g["updates"].max() if math.isnan(updates) else updates
        cpu = _num(_field(summary, "train_cpu_s"))
        if math.isnan(cpu) and len(g):  # likewise: the last manifest's cumulative CPU time
            cpu = g["train_cpu_s"].max()
        tps, attempts = _num(_field(summary, "tokens_per_s")), _num(_field(summary, "attempts"))
        if curves is not None and len(curves):
            c = curves[(curves["run"] == run) & (curves["seed"] == seed)]
            if len(c) and math.isnan(tps) and c["tokens_per_s"].notna().any():
                tps = c["tokens_per_s"].mean()
            if len(c) and math.isnan(attempts) and c["attempt"].notna().any():
                attempts = c["attempt"].nunique()
        rows.append({
            "run": run, "seed": seed, "updates": updates, "train_wall_s": wall,
            "s_per_update": wall / updates if updates and not math.isnan(updates) else math.nan,
            "wall_s_all_attempts": _num(_field(summary, "wall_s_all_attempts")),
            "tokens_per_s": tps, "attempts": attempts,
            "eval_wall_s": g["eval_wall_s"].sum(min_count=1) if len(g) else math.nan,
            # CPU-seconds beside the wall-clock: equal work costs equal CPU time, whatever else ran
            "train_cpu_s": cpu,
            "cpu_s_per_update": cpu / updates if updates and not math.isnan(updates) else math.nan,
            "cpu_s_all_attempts": _num(_field(summary, "cpu_s_all_attempts")),
            "eval_cpu_s": g["eval_cpu_s"].sum(min_count=1) if len(g) else math.nan,
            "threads": rj.get("threads"), "precision": rj.get("precision"),
            "host": str(ran.get("host") or ""), "device": str(ran.get("device") or ""),
        })
    return pd.DataFrame(rows)


COST_SPREAD_COLUMNS = ["run", "n_seeds", "wall_s_per_update_min", "wall_s_per_update_max", "wall_spread",
                       "cpu_s_per_update_min", "cpu_s_per_update_max", "cpu_spread"]


def cost_spread(wallclock: pd.DataFrame) -> pd.DataFrame:
    """tables/cost_spread.csv: per run with two or more trained seeds, the seeds' wall-clock and CPU-seconds per
    update (the same work: every seed of a run trains as many updates of the same sizes), smallest and largest,
    and each spread (largest over smallest, minus 1). Wall-clock moves with what else runs on the machine; the
    report compares equal cost in CPU time (``aggregate.COST``) and shows this spread instead of a target on it."""
    rows = []
    for run, g in wallclock.groupby("run", sort=False):
        wall, cpu = g["s_per_update"].dropna(), g["cpu_s_per_update"].dropna()
        if max(len(wall), len(cpu)) < 2:
            continue
        row: dict[str, Any] = {"run": run, "n_seeds": int(max(len(wall), len(cpu)))}
        for name, v in (("wall", wall), ("cpu", cpu)):
            lo, hi = (float(v.min()), float(v.max())) if len(v) >= 2 else (math.nan, math.nan)
            row.update({f"{name}_s_per_update_min": lo, f"{name}_s_per_update_max": hi,
                        f"{name}_spread": hi / lo - 1 if lo > 0 else math.nan})
        rows.append(row)
    return pd.DataFrame(rows, columns=COST_SPREAD_COLUMNS)


def cost_spread_sentence(spread: pd.DataFrame) -> str:
    """The largest spread of each clock over the seeds of one run, in words ("" without a run of two seeds)."""
    parts = []
    for name, words in (("wall", "wall-clock"), ("cpu", "CPU-seconds")):
        col = f"{name}_spread"
        if spread[col].notna().any():
            r = spread.loc[spread[col].idxmax()]
            parts.append(f"in {words} per update by up to {r[col]:.0%} ({r['run']}: "
                         f"{r[f'{name}_s_per_update_min']:.3g} to {r[f'{name}_s_per_update_max']:.3g} s)")
    if not parts:
        return ""
    return ("Seeds of one run do the same work, yet differed " + " and ".join(parts) + ". CPU time leaves out the "
            "time a job waits for a core but not the slowdown of sharing one with another job; the report compares "
            "equal cost in CPU-seconds of training, and a difference in cost between runs smaller than these "
            "spreads is within what the machine itself varies.")


def host_sentence(hosts: pd.DataFrame) -> str:
    """How many hosts (``lnrepro.host.host_key``) the trainings ran on, in words ("" when no run.json names one):
    with more than one, costs compare only within a host (the confounds table flags each comparison whose costs
    cross hosts)."""
    keys = sorted({k for k in hosts.loc[hosts["job"] == "train", "host_key"] if k})
    if not keys:
        return ""
    if len(keys) == 1:
        return f"Every training ran on one host: {keys[0]} (its CPU flags and threads)."
    return (f"The trainings ran on {len(keys)} hosts ({'; '.join(keys)}): a cost compares only within a host, "
            "so the confounds table flags each comparison whose runs' costs cross hosts; between hosts, compare "
            f"{HOST_FREE_UNIT} (Where it ran lists each unit's host).")


def execution_facts(results: Results, experiment: Experiment) -> dict[str, dict[str, Any]]:
    """Per selected run, where it ran, as ``confounds.analyze_confounds`` compares it: ``seeds``, the seeds
    trained (with a summary.json, diverged or not), and from their run.json ``device`` (``cpu`` on a CPU, whose
    model is part of the host; else the accelerator's device_name, else the device type), ``precision``,
    ``torch`` (torch_version) and ``threads``, each as the distinct values over the run's seeds joined by ", "
    ("" when no run.json says); ``train_hosts`` and ``score_hosts``: the sorted distinct host keys
    (``lnrepro.host.host_key``) of those seeds' training (run.json) and scoring (their score files), [] when no
    record says (an older lnrepro's)."""
    fields = {"device": ("device_name", "device"), "precision": ("precision",), "torch": ("torch_version",),
              "threads": ("threads",)}
    seeds: dict[str, list[int]] = {run: [] for run in experiment.select}
    values: dict[str, dict[str, set[str]]] = {run: {name: set() for name in fields} for run in experiment.select}
    hosts: dict[str, dict[str, set[str]]] = {run: {"train_hosts": set(), "score_hosts": set()}
                                             for run in experiment.select}
    for sr in results.seeds:
        if sr.summary is None:
            continue
        seeds[sr.run].append(sr.seed)
        rj = sr.run_info or {}
        run = sr.run
        for name, keys in fields.items():
            value = "cpu" if name == "device" and rj.get("device") == "cpu" else \
                next((rj[k] for k in keys if rj.get(k) not in (None, "")), None)
            if value is not None:
                values[run][name].add(str(value))
        for job, rows in _unit_hosts(sr).items():
            hosts[run][f"{job}_hosts"] |= {host_key(row["identity"]) for row in rows if row["identity"]}
    return {run: {"seeds": seeds[run], **{name: ", ".join(sorted(v)) for name, v in values[run].items()},
                  **{name: sorted(v) for name, v in hosts[run].items()}}
            for run in experiment.select}


HOST_COLUMNS = ["run", "seed", "job", "machine", "device", "cpu_model", "cpu_flags", "threads", "matmul_gflops",
                "host_key", "git_commit", "git_dirty"]


def _unit_hosts(sr: SeedResults) -> dict[str, list[dict[str, Any]]]:
    """One unit's jobs by kind: ``train`` (its run.json, when written) and ``score`` (one per distinct scoring
    job among its score files), each {"identity": the host dict or None, "machine", "device", "threads",
    "git_commit", "git_dirty"}."""
    out: dict[str, list[dict[str, Any]]] = {"train": [], "score": []}
    if sr.run_info is not None:
        rj = sr.run_info
        device = rj.get("device_name") or rj.get("device") or ""
        out["train"].append({"identity": rj.get("host"), "machine": (rj.get("where_ran") or {}).get("host", ""),
                             "device": device, "threads": rj.get("threads"), "git_commit": rj.get("git_commit"),
                             "git_dirty": rj.get("git_dirty")})
    for record in sr.scores.values():
        if record is None:
            continue
        job = {"identity": record.host, "machine": record.where_ran.get("host", ""),
               "device": record.where_ran.get("device", ""), "threads": record.threads,
               "git_commit": record.git_commit, "git_dirty": record.git_dirty}
        if job not in out["score"]:
            out["score"].append(job)
    return out


def host_table(results: Results) -> pd.DataFrame:
    """tables/hosts.csv: per unit (run, seed) and job (``train``; ``score``, one row per distinct scoring job),
    where it ran: the machine's name, the device, the CPU model, its flags (``lnrepro.host.CPU_FLAGS``, joined by
    "+"), the threads, the fp32 matmul peak measured at the job's start (GFLOP/s), the host key that decides
    whether costs compare, and the code's commit and whether its checkout had uncommitted changes ("none": a
    host with none of the flags). A record of an older lnrepro has no host: its CPU model, flags, peak and key are
    empty (its device still names the CPU)."""
    rows = []
    for sr in results.seeds:
        for job, entries in _unit_hosts(sr).items():
            for e in entries:
                ident = e["identity"] or {}
                rows.append({
                    "run": sr.run, "seed": sr.seed, "job": job, "machine": e["machine"], "device": e["device"],
                    "cpu_model": ident.get("cpu_model", ""),
                    "cpu_flags": ("+".join(ident.get("cpu_flags") or []) or "none") if ident else "",
                    "threads": ident.get("threads", e["threads"]), "matmul_gflops": _num(ident.get("matmul_gflops")),
                    "host_key": host_key(ident) if ident else "", "git_commit": e["git_commit"] or "",
                    "git_dirty": e["git_dirty"]})
    return pd.DataFrame(rows, columns=HOST_COLUMNS)


def summary_table(results: Results) -> pd.DataFrame:
    """Per (run, seed) with a summary.json: ``status`` (completed / diverged / max_updates), ``updates``,
    ``diverged_update`` (the update whose loss diverged, else NaN), ``target_tokens_per_epoch`` and
    ``target_tokens_trained``."""
    cols = ["run", "seed", "status", "updates", "diverged_update", "target_tokens_per_epoch", "target_tokens_trained"]
    rows = []
    for sr in results.seeds:
        run, seed, summary = sr.run, sr.seed, sr.summary
        if summary is None:
            continue
        rows.append({"run": run, "seed": seed, "status": summary.status.value, "updates": _num(summary.updates),
                     "diverged_update": _num(_field(summary.diverged, "update")),
                     "target_tokens_per_epoch": _num(summary.target_tokens_per_epoch),
                     "target_tokens_trained": _num(summary.target_tokens_trained)})
    return pd.DataFrame(rows, columns=cols)


def milestone_table(run_epochs: pd.DataFrame, split: str, frac: float = 0.95, last: int | None = None
                    ) -> pd.DataFrame:
    """Per run, from the seed means on ``split``: best tokenized BLEU, its epoch and training CPU time, and the
    first epoch (and training CPU time) at which the run reaches ``frac`` x the best BLEU any run
    reaches. Answers the paper's "sooner" claim in checkpoints AND in time. With ``last`` (the last epoch every
    compared run has), only epochs up to it: runs are compared at epochs they all have."""
    col = f"{split}_bleu_tok_mean"
    cols = ["run", "best_bleu", "best_epoch", "best_cpu_s", "target_bleu", "epoch_to_target", "cpu_s_to_target"]
    if last is not None and "epoch" in run_epochs:
        run_epochs = run_epochs[run_epochs["epoch"] <= last]
    if run_epochs.empty or col not in run_epochs:
        return pd.DataFrame(columns=cols)
    target = frac * run_epochs[col].max()
    rows = []
    for run, g in run_epochs.groupby("run", sort=False):
        g = g.sort_values("epoch", kind="stable")
        ok = g[g[col].notna()]
        row: dict[str, Any] = {"run": run, "target_bleu": target}
        if len(ok):
            b = ok.loc[ok[col].idxmax()]
            row.update(best_bleu=b[col], best_epoch=int(b["epoch"]), best_cpu_s=b[f"{COST}_mean"])
            hit = ok[ok[col] >= target]
            if len(hit):
                h = hit.iloc[0]
                row.update(epoch_to_target=int(h["epoch"]), cpu_s_to_target=h[f"{COST}_mean"])
        rows.append(row)
    return pd.DataFrame(rows, columns=cols)


CONVERGED, ANNEALED, IMPROVING, WORSENING, UNDETERMINED = (
    "converged", "annealed", "still improving", "getting worse", "undetermined")
MIN_WINDOW = 3  # a slope and its interval need three epochs at least
CONVERGENCE_COLUMNS = ["run", "epochs", "n_seeds", "nll_first", "nll_last", "slope", "slope_low", "slope_high",
                       "rel_slope", "rel_low", "rel_high", "df", "tolerance", "lr_cut", "label"]


def convergence_rule(window: int, tolerance: float) -> str:
    """The convergence rule in words (printed where the convergence table is shown)."""
    return (f"the per-epoch slope of the validation NLL (bits, without label smoothing) over the last {window} "
            f"scored epochs (analysis.report.convergence_window; all of them when fewer are scored, at least "
            f"{MIN_WINDOW}): each seed's least-squares slope, then their mean "
            f"with a 95% t interval over seeds (one seed: the slope's own t interval over the epochs), as a "
            f"fraction of the window's mean NLL. Converged: the interval lies within +-{tolerance:.1%} an epoch "
            f"(analysis.report.convergence_tolerance); a run whose learning rate a step decay cut before the window "
            f"ends is \"annealed\" instead, since the small learning rate flattens a curve without its having "
            f"converged. Still improving: the interval lies below -{tolerance:.1%}; getting worse: above "
            f"+{tolerance:.1%}; undetermined otherwise")


def slope_label(lo: float, hi: float, tolerance: float, cut: bool) -> str:
    """``convergence_rule``'s label of a loss's relative slope interval [lo, hi] per epoch (NaN: no interval);
    ``cut``: a step decay cut the learning rate before the window ends. The convergence table and the Answer's
    end point both label with it."""
    if math.isnan(lo) or math.isnan(hi):
        return UNDETERMINED
    if -tolerance <= lo and hi <= tolerance:
        return ANNEALED if cut else CONVERGED
    if hi < -tolerance:
        return IMPROVING
    return WORSENING if lo > tolerance else UNDETERMINED


def step_cuts(experiment: Experiment, run: str, last: int) -> list[int]:
    """The epochs at or before ``last`` at whose start a step decay cut ``run``'s learning rate ([] for none)."""
    s = experiment.runs[run].schedule
    return [e for e in (s.decay_epochs or ()) if s.decay == "step" and e <= last]


def slope_fit(x: Any, y: Any) -> tuple[float, float, float]:
    """A least-squares slope with its standard error and residual degrees of freedom."""
    import numpy as np

    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    xc = x - x.mean()
    b = float((xc * (y - y.mean())).sum() / (xc ** 2).sum())
    df = len(x) - 2
    if df < 1:
        return b, math.nan, 0
    resid = y - y.mean() - b * xc
    return b, math.sqrt(float((resid ** 2).sum()) / df / float((xc ** 2).sum())), df


def convergence_table(epochs: pd.DataFrame, experiment: Experiment, split: str, window: int,
                      tolerance: float) -> pd.DataFrame:
    """tables/convergence.csv: per selected run, the slope of the validation NLL of ``split`` over its last
    ``window`` scored epochs (every seed finished there) with its 95% interval, relative to the window's mean,
    and its label by ``convergence_rule``; ``lr_cut`` names the step decay that cut its learning rate before
    the window ends ("" for none)."""
    col = f"{split}_nll_base2"
    rows = []
    for run in experiment.select:
        g = epochs[(epochs["run"] == run) & (epochs["status"] == STATUS_OK) & epochs[col].notna()]
        row: dict[str, Any] = {"run": run}
        scored = sorted(set(g["epoch"]))[-window:]  # fewer when fewer are scored, down to MIN_WINDOW
        g = g[g["epoch"].isin(scored)]
        seeds = [sd for sd, h in g.groupby("seed") if len(h) == len(scored)]
        if len(scored) < min(window, MIN_WINDOW) or not seeds:
            rows.append({**row, "label": "", "lr_cut": ""})
            continue
        g = g[g["seed"].isin(seeds)]
        level = g[col].mean()
        slopes = [slope_fit(h["epoch"], h[col]) for _, h in g.groupby("seed")]
        if len(slopes) > 1:
            v = [b for b, _, _ in slopes]
            slope, se, df = float(sum(v) / len(v)), float(pd.Series(v).std(ddof=1)) / math.sqrt(len(v)), len(v) - 1
        else:
            slope, se, df = slopes[0]
        half = t_quantile(df) * se if not math.isnan(se) else math.nan
        cut = step_cuts(experiment, run, scored[-1])
        factor = experiment.runs[run].schedule.decay_factor
        lr_cut = (f"x{factor:g} from epoch {', '.join(map(str, cut))}") if cut else ""
        lo, hi = (slope - half) / level, (slope + half) / level
        label = slope_label(lo, hi, tolerance, bool(cut))
        first = g[g["epoch"] == scored[0]][col].mean()
        last = g[g["epoch"] == scored[-1]][col].mean()
        rows.append({**row, "epochs": f"{scored[0]}-{scored[-1]}", "n_seeds": len(seeds), "nll_first": first,
                     "nll_last": last, "slope": slope, "slope_low": slope - half, "slope_high": slope + half,
                     "rel_slope": slope / level, "rel_low": lo, "rel_high": hi, "df": df, "tolerance": tolerance,
                     "lr_cut": lr_cut, "label": label})
    return pd.DataFrame(rows, columns=CONVERGENCE_COLUMNS)


# ---------------------------------------------------------------------------------------------------
# train.jsonl: scalar curves and per-layer gradient norms

_STACKS = {"enc": "enc", "encoder": "enc", "encoder_layers": "enc", "dec": "dec", "decoder": "dec",
           "decoder_layers": "dec"}
_NOISE = {"layers", "layer", "grad", "grad_norm", "grad_norms", "layer_grad_norms", "norm", "weight"}


def parse_layer_key(key: str) -> tuple[str, float, str]:
    """Map a flattened per-layer gradient-norm key to (stack 'enc'|'dec'|'other', layer index or NaN,
    sublayer name). Accepts any token order: "enc.3.attn", "encoder.self_attn.3" (a list flattened by
    index), "decoder.layers.0.ffn". Unknown shapes keep the whole key as the sublayer, so nothing the
    training stage logs is dropped."""
    tokens = [t for t in key.split(".") if t]
    stack, layer, rest = "other", math.nan, []
    for t in tokens:
        low = t.lower()
        if stack == "other" and low in _STACKS:
            stack = _STACKS[low]
        elif math.isnan(layer) and t.isdigit():
            layer = float(int(t))
        elif low not in _NOISE:
            rest.append(t)
    if stack == "other" or math.isnan(layer):
        return "other", math.nan, key
    return stack, layer, "_".join(rest) or "all"


def _flatten_numeric(d: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """Nested dicts/lists of numbers -> {"a.b.0": value}; a list index becomes a key (the layer)."""
    out: dict[str, float] = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict):
            out.update(_flatten_numeric(v, key))
        elif isinstance(v, list):  # per-layer lists: the index is the layer
            out.update(_flatten_numeric({str(i): x for i, x in enumerate(v)}, key))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[key] = float(v)
        elif v is None:
            out[key] = math.nan
    return out


@dataclass
class TrainLog:
    """The training logs of all runs: ``curves`` (one row per logged update) and ``layers``
    (one row per logged update and per-layer gradient-norm key)."""

    curves: pd.DataFrame
    layers: pd.DataFrame


def train_logs(results: Results) -> TrainLog:
    """Every selected run's training log as tables, layers numbered from 1 (the bottom layer), as in every table
    and figure of the report. Every dict-valued field of a step record is taken as
    per-layer gradient norms (generic: nested dicts and per-layer lists are flattened; the exact key names
    come from the training stage); top-level lists (``lrs``) are not layers."""
    curve_rows: list[dict[str, Any]] = []
    layer_rows: list[tuple] = []
    for sr in results.seeds:
        for upd, rec in sr.steps.items():
            row = {"run": sr.run, "seed": sr.seed, "update": upd, "epoch": _num(rec.get("epoch"))}
            for k in TRAIN_SCALARS:
                row[k] = _num(rec.get(k))
            curve_rows.append(row)
            for k, v in rec.items():
                if isinstance(v, dict):
                    for key, val in _flatten_numeric(v).items():
                        stack, layer, sub = parse_layer_key(key)  # the logs' index is 0-based
                        layer_rows.append((sr.run, sr.seed, upd, row["epoch"], key, stack, layer + 1, sub, val))
    curves = pd.DataFrame(curve_rows, columns=["run", "seed", "update", "epoch", *TRAIN_SCALARS])
    layers = pd.DataFrame(layer_rows, columns=["run", "seed", "update", "epoch", "key", "stack", "layer",
                                               "sublayer", "grad_norm"])
    return TrainLog(curves=curves, layers=layers)


def learning_rates(results: Results) -> pd.DataFrame:
    """Every update's learning rate per selected run and seed (run, seed, update, lr), from train.jsonl's
    ``lrs`` (a resumed run's repeated updates: the last attempt's)."""
    rows = [(sr.run, sr.seed, u, lr) for sr in results.seeds for u, lr in sr.lrs.items()]
    return pd.DataFrame(rows, columns=["run", "seed", "update", "lr"])


def early_window(epochs: pd.DataFrame) -> int:
    """Updates that count as "early in training" for the per-layer gradient study: the first epoch
    (the smallest updates count at epoch 1 over runs and seeds), else 1000 updates. The paper's
    argument is about initialization and warm-up, which the first epoch covers at every scale."""
    e1 = epochs.loc[(epochs["epoch"] == 1) & epochs["updates"].notna(), "updates"]
    return int(e1.min()) if len(e1) and e1.min() > 0 else 1000


def layer_grad_summary(layers: pd.DataFrame, max_update: int) -> pd.DataFrame:
    """Mean / max of each layer key's gradient norm over the logged updates <= ``max_update``,
    per (run, seed), and averaged over seeds (seed = "mean")."""
    cols = ["run", "seed", "stack", "layer", "sublayer", "key", "grad_norm_mean", "grad_norm_max", "n_updates"]
    if layers.empty:
        return pd.DataFrame(columns=cols)
    early = layers[layers["update"] <= max_update]
    g = (early.groupby(["run", "seed", "stack", "layer", "sublayer", "key"], sort=False, dropna=False)["grad_norm"]
         .agg(grad_norm_mean="mean", grad_norm_max="max", n_updates="count").reset_index())
    return g[cols]


def layer_grad_by_epoch(layers: pd.DataFrame) -> pd.DataFrame:
    """Mean gradient norm per (run, seed, epoch, layer key): the whole training, compressed."""
    if layers.empty:
        return pd.DataFrame(columns=["run", "seed", "epoch", "stack", "layer", "sublayer", "key", "grad_norm_mean"])
    return (layers.groupby(["run", "seed", "epoch", "stack", "layer", "sublayer", "key"], sort=False, dropna=False)
            ["grad_norm"].mean().rename("grad_norm_mean").reset_index())


# ---------------------------------------------------------------------------------------------------
# everything at once


@dataclass(frozen=True)
class Aggregate:
    """Every per-run table of one experiment, each computed once (``lnrepro.analysis.build`` lists which are
    written to report/tables/)."""

    epochs: pd.DataFrame          # per (run, seed, epoch)
    run_epochs: pd.DataFrame      # per (run, epoch), over seeds
    summaries: pd.DataFrame       # per (run, seed) with a summary.json
    execution: dict[str, dict[str, Any]]  # per run: where its seeds ran (execution_facts)
    divergence: pd.DataFrame      # per run
    wallclock: pd.DataFrame       # per (run, seed)
    hosts: pd.DataFrame           # per (run, seed, job): where each job ran (host_table)
    cost_spread: pd.DataFrame     # per run: its seeds' wall-clock and CPU per update, smallest and largest
    milestones: pd.DataFrame      # per run
    convergence: pd.DataFrame     # per run: the validation NLL's slope at the end (convergence_table)
    curves: pd.DataFrame          # per (run, seed, logged update)
    lrs: pd.DataFrame             # per (run, seed, update): every update's learning rate
    layers: pd.DataFrame          # per (run, seed, logged update, layer key) (not written: can be large)
    layers_early: pd.DataFrame    # per (run, seed, layer key), over the early window
    layers_by_epoch: pd.DataFrame  # per (run, seed, epoch, layer key)
    early_updates: int
    split: str


def aggregate(results: Results, experiment: Experiment) -> Aggregate:
    """The per-run tables of the results tree ``results`` (read once by ``results.read_results``)."""
    epochs = epoch_table(results, experiment)
    run_epochs = run_epoch_table(epochs)
    log = train_logs(results)
    early = early_window(epochs)
    split = primary_split(experiment)
    wallclock = wallclock_table(results, epochs, log.curves)
    return Aggregate(
        epochs=epochs, run_epochs=run_epochs, summaries=summary_table(results),
        execution=execution_facts(results, experiment),
        divergence=divergence_table(results, experiment, epochs),
        wallclock=wallclock, hosts=host_table(results), cost_spread=cost_spread(wallclock),
        milestones=milestone_table(run_epochs, split, last=experiment.common_last(experiment.select)),
        convergence=convergence_table(epochs, experiment, split, experiment.analysis.report.convergence_window,
                                      experiment.analysis.report.convergence_tolerance),
        curves=log.curves, lrs=learning_rates(results), layers=log.layers,
        layers_early=layer_grad_summary(log.layers, early),
        layers_by_epoch=layer_grad_by_epoch(log.layers),
        early_updates=early, split=split,
    )
