"""The variants beyond the paper's two against Post-LN and Pre-LN at an equal schedule
(analysis/sections/variants.py)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from lnrepro import config
from lnrepro.analysis.stats import effects as ef
from lnrepro.analysis.sections import variants as va

REPO = Path(__file__).resolve().parents[1]
SELECT = ["postln_warmup_isqrt", "preln_warmup_isqrt", "preln_nowarmup_step8", "deepnorm_warmup_isqrt",
          "rezero_nowarmup_isqrt"]


@pytest.fixture(scope="module")
def experiment() -> config.Experiment:
    c = config.load_config([REPO / "config.yaml"])
    c["select"] = SELECT
    config.validate_config(c)
    return config.experiment(c)


def epochs(experiment: config.Experiment) -> pd.DataFrame:
    """Two epochs, three seeds: a run's value is its index in SELECT plus the seed / 10 (plus the epoch)."""
    rows = [{"run": r, "seed": s, "epoch": e, "status": "ok", "valid_nll_base2": i + s / 10 + e,
             "valid_bleu_tok": 10 * i + s + e}
            for i, r in enumerate(SELECT) for s in (1, 2, 3) for e in (1, 2)]
    return pd.DataFrame(rows)


def test_a_variant_is_contrasted_with_both_bases_of_its_schedule(experiment):
    assert va.bases(experiment, "deepnorm_warmup_isqrt") == {"post": "postln_warmup_isqrt", "pre": "preln_warmup_isqrt"}
    # no Post-LN or Pre-LN run without warm-up and with isqrt decay is selected
    assert va.bases(experiment, "rezero_nowarmup_isqrt") == {}
    t = va.variant_contrasts(epochs(experiment), experiment, "valid")
    assert set(t["variant_run"]) == {"deepnorm_warmup_isqrt"} and set(t["base"]) == {"post", "pre"}
    assert len(t) == 2 * 2 * 2  # bases x metrics x epochs
    row = t[(t["base"] == "post") & (t["metric"] == "valid_bleu_tok") & (t["epoch"] == 2)].iloc[0]
    assert row["difference"] == pytest.approx(30.0) and row["seeds"] == "3/3"
    d, lo, hi, _ = ef.welch([0 + s + 2 for s in (1, 2, 3)], [30 + s + 2 for s in (1, 2, 3)])
    assert (row["ci_low"], row["ci_high"]) == (pytest.approx(lo), pytest.approx(hi))
    # what DeepNorm changes beside the norm position, from the registry
    assert "residual scaling" in row["differences"] and "initialization" in row["differences"]


def test_the_factorial_fit_leaves_the_variants_out(experiment):
    cells, notes = ef.design(experiment)
    assert "deepnorm_warmup_isqrt" not in set(cells["run"])
    assert any(n.startswith("deepnorm_warmup_isqrt: a level outside the 2x2x2 design") for n in notes)
