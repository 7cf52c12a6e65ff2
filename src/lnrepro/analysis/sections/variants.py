"""The variants beyond the paper's two: each selected run of another ``model.norm`` against the Post-LN
and the Pre-LN run of an equal schedule, never folded into the 2x2x2 fit (``effects.code`` leaves them out).

A base is the selected run whose resolved settings (``Experiment.runs``, flattened to dotted keys) equal the
variant run's in every key but ``model.norm``, with norm ``post`` or ``pre``; a variant run without one has no
row. The contrast is variant minus base of the seed means at every scored epoch, with the 95% Welch interval
(``effects.welch``: per-run variances), on the headline split's NLL (bits) and tokenized BLEU, and names what
the variant changes beside the norm position (``lnrepro.norms.NormVariant.differences``), so that a contrast is
not read as one of norm positions alone.
"""

from __future__ import annotations

import pandas as pd

from ...config.settings import Experiment
from ...norms import norm_variant
from ..stats.budget import OK
from .confounds import flatten
from ..pair import seed_values
from ..stats.effects import welch

BASES = ("post", "pre")  # the paper's two: every other variant is contrasted with both
METRICS = ("nll_base2", "bleu_tok")
COLUMNS = ["epoch", "metric", "variant_run", "variant", "base_run", "base", "variant_mean", "base_mean",
           "difference", "ci_low", "ci_high", "seeds", "differences"]


def bases(experiment: Experiment, run: str) -> dict[str, str]:
    """Base variant -> the selected run that differs from ``run`` in ``model.norm`` alone (the first in select)."""
    own = {k: v for k, v in flatten(experiment.runs[run].to_dict()).items() if k != "model.norm"}
    found: dict[str, str] = {}
    for other in experiment.select:
        s = flatten(experiment.runs[other].to_dict())
        norm = s.pop("model.norm")
        if norm in BASES and norm not in found and s == own:
            found[norm] = other
    return found


def variant_contrasts(epochs: pd.DataFrame, experiment: Experiment, split: str) -> pd.DataFrame:
    """tables/variant_contrasts.csv (COLUMNS): one row per variant run, base, metric and epoch both are scored at."""
    ok = epochs[epochs["status"] == OK]
    rows = []
    for run in experiment.select:
        norm = experiment.runs[run].model.norm
        if norm in BASES:
            continue
        changes = "; ".join(f"{d.kind}: {d.what}" for d in norm_variant(norm).differences)
        for base, base_run in bases(experiment, run).items():
            for metric in (f"{split}_{m}" for m in METRICS):
                a, b = (set(ok[(ok["run"] == r) & ok[metric].notna()]["epoch"]) for r in (base_run, run))
                for epoch in sorted(a & b):
                    x, y = (seed_values(epochs, r, epoch, metric) for r in (base_run, run))
                    d, lo, hi, _ = welch(x, y)
                    rows.append({"epoch": int(epoch), "metric": metric, "variant_run": run, "variant": norm,
                                 "base_run": base_run, "base": base, "variant_mean": sum(y) / len(y),
                                 "base_mean": sum(x) / len(x), "difference": d, "ci_low": lo, "ci_high": hi,
                                 "seeds": f"{len(y)}/{len(x)}", "differences": changes})
    return pd.DataFrame(rows, columns=COLUMNS)
