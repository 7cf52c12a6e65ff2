"""Figure 3(c)'s fit, and the views of gradinit.csv that the fit, the figures and the report share (torch-free):
the report's tables of it (``layer_table``, ``depth_table``) are computed here too.

The fit: the last layer's expected gradient against depth, value ~ c * L^b, a straight line on log-log axes
fitted by ordinary least squares over every (depth, seed) value; the 95% interval of b is the OLS t interval
(df = n - 2) with the seeds as replicates at each depth. Theorem 1 (Section 3.3) bounds the gradient of the
last FFN's W^2 by O(d sqrt(ln d)) in Post-LN and O(d sqrt(ln d / L)) in Pre-LN: b = 0 and b = -0.5.
The seeds are independent models on independent batches; a seed's batches are shared across its depths,
which adds a per-seed offset to log(value): it widens the residuals, so the interval errs on the wide side.

A series with a value of exactly 0 has no power law (log 0): its b, interval and c are NaN and its ``note`` says
"undefined at initialization". ReZero's branches are multiplied by scalars initialized to 0, so every weight
matrix of its layers has a zero gradient at initialization (and so do its encoder's scalars); the fit then also
covers the scalars a variant's residual modules carry (sublayer ``residual``: ReZero's ``resweight``), the
gradient that variant has instead.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ...norms import NORMS
from ...io import atomic_write_csv
from ...records import GRADINIT_FIT_COLUMNS
from .budget import t_quantile

INTERVAL = "OLS 95% t interval (df = n - 2), seeds as replicates"
THEORY_B = {"post": 0.0, "pre": -0.5}  # Theorem 1 for the last FFN's W^2; none for other variants
HEADLINE = {"stack": "dec", "layer": "last", "param": "fc2", "statistic": "expected_grad_fro"}  # Figure 3(c)
_FIT_PARAMS = ("fc2", "fc1")  # the FFN's W^2 (the theorem's) and W^1
_SUBLAYERS = ("self_attn", "encoder_attn", "ffn")  # the layers' weight matrices; any other sublayer: a variant's own
UNDEFINED = ("undefined at initialization: the gradient is exactly 0 in {zeros} of {n} models (ReZero: every branch "
             "multiplied by its scalar, 0 at initialization), no power law")
_STACKS = ("dec", "enc")
_AFTER_WARMUP_LABEL = "after warm-up"


def init_rows(gi: pd.DataFrame) -> pd.DataFrame:
    """The fresh models' rows (checkpoint init)."""
    return gi[gi["checkpoint"] == "init"]


def last_layer(gi: pd.DataFrame) -> pd.DataFrame:
    """The rows of each model's last layer (layer = depth - 1; encoder and decoder have ``depth`` layers)."""
    return gi[gi["layer"] == gi["depth"] - 1]


def series_label(norm: str, checkpoint: str) -> str:
    """How figures and tables name a series: the variant's label, "after warm-up" for a trained checkpoint."""
    label = NORMS[norm].label if norm in NORMS else norm
    return label if checkpoint == "init" else f"{label} {_AFTER_WARMUP_LABEL}"


def figure_depth(gi: pd.DataFrame, preferred: int) -> int:
    """The depth Figure 3(a)/(b) shows: ``preferred`` (the experiment's) when measured at init, else the smallest."""
    depths = sorted(init_rows(gi)["depth"].unique().tolist())
    return preferred if preferred in depths else int(depths[0])


def power_law(depths: np.ndarray, values: np.ndarray, level: float = 0.95) -> tuple[float, float, float, float]:
    """(b, b_low, b_high, c) of value ~ c * depth^b by least squares on the logs, with the t interval of b
    (NaN where fewer than three points or one depth leave no residual degree of freedom)."""
    x, y = np.log(np.asarray(depths, dtype=float)), np.log(np.asarray(values, dtype=float))
    if len(x) < 3 or np.ptp(x) == 0:
        return (np.nan,) * 4
    dx = x - x.mean()
    b = float(dx @ (y - y.mean()) / (dx @ dx))
    a = y.mean() - b * x.mean()
    resid = y - a - b * x
    half = t_quantile(len(x) - 2, level) * float(np.sqrt(resid @ resid / (len(x) - 2) / (dx @ dx)))
    return b, b - half, b + half, float(np.exp(a))


def fit_depths(gi: pd.DataFrame) -> pd.DataFrame:
    """One row per norm variant, stack, FFN matrix (and parameter of the variant's own residual modules) and
    statistic: the power law of the last layer's value against depth at initialization (columns GRADINIT_FIT_COLUMNS; the
    Figure 3(c) row is HEADLINE's); NaN with its ``note`` where a value is 0 (``UNDEFINED``)."""
    last = last_layer(init_rows(gi))
    rows = []
    for norm in [n for n in NORMS if n in set(last["norm"])] + sorted(set(last["norm"]) - set(NORMS)):
        of_norm = last[last["norm"] == norm]
        own = list(dict.fromkeys(of_norm.loc[~of_norm["sublayer"].isin(_SUBLAYERS), "param"]))
        for stack in _STACKS:
            for param in [*_FIT_PARAMS, *own]:
                for statistic, g in of_norm[(of_norm["stack"] == stack) &
                                            (of_norm["param"] == param)].groupby("statistic", sort=False):
                    zeros, note = int((g["value"] <= 0).sum()), np.nan  # no note: empty in the CSV
                    if zeros:
                        b = lo = hi = c = np.nan
                        note = UNDEFINED.format(zeros=zeros, n=len(g))
                    else:
                        b, lo, hi, c = power_law(g["depth"].to_numpy(), g["value"].to_numpy())
                    rows.append({"norm": norm, "stack": stack, "layer": "last", "param": param,
                                 "statistic": statistic, "b": b, "b_low": lo, "b_high": hi, "c": c,
                                 "depths": ";".join(map(str, sorted(g["depth"].unique()))),
                                 "seeds": ";".join(map(str, sorted(g["seed"].unique()))), "n": len(g),
                                 "theory_b": THEORY_B.get(norm, np.nan), "interval": INTERVAL, "note": note})
    return pd.DataFrame(rows, columns=GRADINIT_FIT_COLUMNS)


def headline(fit: pd.DataFrame) -> pd.DataFrame:
    """The Figure 3(c) rows of a fit table (last decoder layer's W^2, expected gradient), one per norm variant."""
    mask = np.logical_and.reduce([fit[k] == v for k, v in HEADLINE.items()])
    return fit[mask]


def series_order(gi: pd.DataFrame) -> list[str]:
    """The gradinit series in figure order: the variants at init (in NORMS order), then after warm-up."""
    rank = {n: i for i, n in enumerate(NORMS)}
    pairs = sorted(set(map(tuple, gi[["norm", "checkpoint"]].values)),
                   key=lambda p: (p[1] != "init", rank.get(p[0], len(rank)), p[0]))
    return [series_label(n, c) for n, c in pairs]


def layer_table(gi: pd.DataFrame, depth: int) -> pd.DataFrame:
    """tables/gradinit_summary.csv: at ``depth`` layers, each weight matrix's expected gradient averaged over
    seeds (layers numbered from 1): one column per series, the first variant's ratio to each other one at init
    ("Post-LN/Pre-LN"), and the largest seed-mean noise of the row's values (a difference below it is not a result)."""
    keys = ["stack", "layer", "sublayer", "param"]
    g = gi[(gi["statistic"] == "expected_grad_fro") & (gi["depth"] == depth)]
    g = g.assign(series=[series_label(n, c) for n, c in zip(g["norm"], g["checkpoint"])])
    means = g.groupby([*keys, "series"])[["value", "noise"]].mean()
    piv = means["value"].unstack("series")
    series = [s for s in series_order(g) if s in piv.columns]
    piv = piv[series]
    inits = [series_label(n, "init") for n in NORMS if series_label(n, "init") in series]
    for other in inits[1:]:  # no ratio (NaN) to a zero value: ReZero's matrices at init
        piv[f"{inits[0]}/{other}"] = piv[inits[0]] / piv[other].where(piv[other] != 0)
    piv["noise (max)"] = means["noise"].unstack("series").max(axis=1)
    piv = piv.reset_index()
    piv["layer"] = piv["layer"] + 1  # numbered from 1 (the bottom layer), as every table and figure of the report
    piv.columns.name = None
    order = {"enc": 0, "dec": 1}
    return piv.sort_values(keys, key=lambda s: s.map(order) if s.name == "stack" else s)


def depth_table(gi: pd.DataFrame) -> pd.DataFrame:
    """tables/gradinit_by_depth.csv, Figure 3(c) as a table: per depth and variant at init, the last decoder
    layer's W^2 expected gradient (seed mean, seed standard deviation, mean noise) and the per-batch mean of
    norms beside it."""
    last = last_layer(init_rows(gi))
    last = last[(last["stack"] == HEADLINE["stack"]) & (last["param"] == HEADLINE["param"])]
    out = pd.DataFrame({"depth": sorted(last["depth"].unique())}).set_index("depth")
    for norm in [n for n in NORMS if n in set(last["norm"])]:
        g = last[last["norm"] == norm]
        e = g[g["statistic"] == HEADLINE["statistic"]].groupby("depth")
        label = series_label(norm, "init")
        out[label] = e["value"].mean()
        out[f"{label} seed sd"] = e["value"].std()
        out[f"{label} noise"] = e["noise"].mean()
        out[f"{label} mean_grad_norm"] = g[g["statistic"] == "mean_grad_norm"].groupby("depth")["value"].mean()
    return out.reset_index()


def write_fit(gi: pd.DataFrame, path: Path) -> pd.DataFrame:
    """``fit_depths`` of gradinit.csv's table, written to ``path`` (gradinit_fit.csv)."""
    fit = fit_depths(gi)
    atomic_write_csv(path, fit)
    return fit
