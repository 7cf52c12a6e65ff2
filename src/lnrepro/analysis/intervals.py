"""The level of every interval of the report and the t quantile its intervals use: one home below the
aggregate, the statistics and the sections, which all draw intervals."""

from __future__ import annotations

import math

LEVEL = 0.95  # every interval of the report: 95%, t over seeds


def t_quantile(df: float, level: float = LEVEL) -> float:
    """The two-sided ``level`` quantile of Student's t with ``df`` degrees of freedom (NaN without any).

    scipy.special.stdtrit is the function scipy.stats.t.ppf calls; importing scipy.stats would cost the gradinit
    job about a second."""
    from scipy import special

    return float(special.stdtrit(df, 0.5 + level / 2)) if df > 0 and math.isfinite(df) else math.nan
