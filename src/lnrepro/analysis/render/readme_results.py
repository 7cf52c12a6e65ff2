"""The README's results, generated from published reports' tables so the two cannot drift apart.

The README has one part per published study (``PARTS``, from ``lnrepro.studies``), each between its own two
markers: one or two sentences of at most ``LEAD_WORDS`` words (the report's Answer's first sentence, or Figure 4's
pair from the tables where the report has no answer.md; the depth study adds how many cells have failed seeds),
the headline figure, the scale and a link to the report, which holds everything else. ``lnrepro readme-results
--part endpoint --report published/endpoint-cpu`` rewrites one part; a part whose published report does not exist
yet says so, and how many units the study's store holds where it has one. ``--check`` only compares and fails
when the README differs (tests/test_readme_results.py runs it on each part). Every number in a part is a cell of
the report's tables or a sentence of answer.md, formatted, never recomputed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ...errors import LnReproError
from ...io import write_generated
from ...config.settings import Experiment
from ...paths import ANSWER_MD, EXPERIMENT_JSON, STORE_INDEX
from ...store import Index, units_of
from ...studies import STUDIES, Study
from .. import DEPTH_FIGURES, FIGURES
from ..numbers import first_sentence

FIGURE4 = "figure4"  # the comparison whose runs are the paper's Figure 4 (config.yaml, comparisons)
LEAD_WORDS = 80  # a part's words at most, besides its figure, scale and link


def _table(report: Path, name: str) -> pd.DataFrame:
    path = report / "tables" / f"{name}.csv"
    if not path.is_file():
        raise LnReproError(f"{path}: missing (the README's results need the report's table {name}.csv)")
    return pd.read_csv(path, keep_default_na=True)


def _num(x: object, digits: int = 2) -> str:
    """A table cell as the README prints it: fixed decimals, an em dash for an empty cell."""
    try:
        v = float(x)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return str(x)
    return "—" if math.isnan(v) else f"{v:.{digits}f}"


def _budget(report: Path) -> str:
    """The last epoch's budget label (budgets.csv lists it first)."""
    return str(_table(report, "budgets").iloc[0]["budget"])


def _scale(report: Path) -> str:
    """The report's scale in words (the claims table's)."""
    scale = _table(report, "claims")["scale"].dropna()
    return str(scale.iloc[0]) if not scale.empty else "unknown"


def _figure4_runs(report: Path) -> tuple[list[str], pd.Series]:
    conf = _table(report, "confounds")
    row = conf[conf["comparison"] == FIGURE4]
    if row.empty:
        raise LnReproError(f"{report / 'tables' / 'confounds.csv'}: no comparison {FIGURE4!r}")
    row = row.iloc[0]
    return [r.strip() for r in str(row["runs"]).split(",")], row


def answer_lead(report: Path) -> str:
    """The first sentence of the report's Answer (answer.md's first paragraph below its heading: the headline a
    researcher quotes); empty for a report without answer.md."""
    path = report / ANSWER_MD
    if not path.is_file():
        return ""
    body = path.read_text(encoding="utf-8").partition("\n")[2].strip()
    return first_sentence(body.split("\n\n", 1)[0]) if body else ""


def figure4_sentence(report: Path) -> str:
    """Figure 4's pair at epoch 2 and at the last epoch: validation BLEU and loss, seed mean ± standard deviation
    (run_epochs.csv), then the pair's confound verdict (confounds.csv)."""
    (a, b), row = _figure4_runs(report)
    per_epoch = _table(report, "run_epochs")
    pair = per_epoch[per_epoch["run"].isin([a, b])]
    epochs = sorted(int(e) for e in pair["epoch"].unique())
    seeds = pair.groupby("run")["n_ok"].max().to_dict()

    def at(run: str, epoch: int) -> str:
        r = pair[(pair["run"] == run) & (pair["epoch"] == epoch)]
        cell = (lambda m: "—" if r.empty or pd.isna(r.iloc[0][f"{m}_mean"])
                else f"{_num(r.iloc[0][f'{m}_mean'])} ± {_num(r.iloc[0][f'{m}_std'])}")
        return f"{cell('valid_bleu_tok')} ({cell('valid_loss_base2')})"

    shown = list(dict.fromkeys([e for e in epochs if e == 2] + epochs[-1:]))
    when = "; ".join(f"at epoch {e}, `{b}` {at(b, e)} against `{a}` {at(a, e)}" for e in shown)
    also = row.get("also differs (confounds)")
    also = "" if pd.isna(also) else f": besides {row['factor']} the pair differs in {also}"
    return (f"Figure 4's pair at this scale, validation BLEU (loss in bits), seed mean ± standard deviation over "
            f"{int(seeds.get(b, 0))} and {int(seeds.get(a, 0))} seeds: {when}. The comparison is "
            f"{row['verdict']}{also}.")


def depth_scale(report: Path) -> str:
    """The depth study's scale: the claims table's, with every depth of its rate table (each run of a claim has
    one depth; the study has several)."""
    depths = sorted(int(d) for d in _table(report, "depth_rates")["depth"].unique())
    return re.sub(r"\d+\+\d+ layers", " and ".join(f"{d}+{d}" for d in depths) + " layers", _scale(report))


def figure_and_link(report: Path, shown_as: str, figure: str, alt: str, scale: str | None = None) -> str:
    """The headline figure as an image in the report's figures/, the scale (the claims table's unless given),
    and the link to the report."""
    scale = scale or _scale(report)
    return (f"![{alt}]({shown_as}/figures/{figure})\n\nScale: {scale}. Every table, figure and deviation from the "
            f"paper: [`{shown_as}/index.html`]({shown_as}/index.html).")


def figure4_part(report: Path, shown_as: str) -> list[str]:
    """A Figure 4 study's part (the factorial study's and the end point's): the Answer's first sentence, or where
    the report has none Figure 4's pair at epoch 2 and at the end; then the headline figure and the link."""
    return [answer_lead(report) or figure4_sentence(report),
            figure_and_link(report, shown_as, FIGURES["figure4"], "Figure 4's pair per epoch")]


def depth_failures_sentence(report: Path) -> str:
    """How many cells have failed seeds at the last epoch (each cell's rate and Wilson interval are the report's
    rates table, depth_rates.csv)."""
    rates = _table(report, "depth_rates")
    at = rates[rates["budget"] == _budget(report)]
    failed = int(((at["n_with_fate"] > 0) & (at["n_failed"] > 0)).sum())
    epoch = int(at["epoch"].iloc[0]) if len(at) else 0
    return (f"Failed seeds at epoch {epoch} (diverged, stopped or did not train): in {failed} of {len(at)} cells, "
            "each rate with its Wilson 95% interval in the report.")


def depth_part(report: Path, shown_as: str) -> list[str]:
    """The depth study's part: the first sentence of its finding (answer.md's lead: which variants trained at the
    deepest depth without warm-up), how many cells have failed seeds, the depth figure and the link."""
    return [" ".join(s for s in (answer_lead(report), depth_failures_sentence(report)) if s),
            figure_and_link(report, shown_as, DEPTH_FIGURES["depth"], "failure rate against depth",
                            depth_scale(report))]


@dataclass(frozen=True)
class Part:
    """One generated part of the README: the published study it quotes and what it shows."""

    study: Study
    paragraphs: Callable[[Path, str], list[str]]

    @property
    def name(self) -> str:
        return self.study.part

    @property
    def published(self) -> str:
        """The published report's folder, as the README names it."""
        return self.study.report

    @property
    def store(self) -> str:
        return self.study.store

    def not_published(self, store: Path) -> str:
        """The part's text while its report does not exist: how far the study's ``store`` has grown, where it
        has one."""
        line = f"The {self.study.title} (`{self.study.preset_file}`) has not been published yet"
        index = Index.read(store) if (store / STORE_INDEX).exists() else None
        if index is None:
            return line + ".\n"
        n = len(units_of(Experiment.read(store / EXPERIMENT_JSON)))
        return (f"{line}: it runs in parts, and its store `{self.store}/` holds {len(index.units)} of its {n} units "
                f"so far; its report follows the last part (`lnrepro publish --status {self.store}` lists the "
                "rest).\n")

    @property
    def begin(self) -> str:
        return (f"<!-- results:{self.name}: begin (generated by `lnrepro readme-results --part {self.name}` from "
                "the report's tables; do not edit) -->")

    @property
    def end(self) -> str:
        return f"<!-- results:{self.name}: end -->"


SHOWN: dict[str, Callable[[Path, str], list[str]]] = {"figure4": figure4_part, "depth": depth_part}
PARTS = {name: Part(study, SHOWN[study.shows]) for name, study in STUDIES.items()}


def results_markdown(report: Path, shown_as: str, part: str = "study") -> str:
    """A part's body from ``report``'s tables; ``shown_as`` is the report's path as the README names it. Its
    sentences are refused beyond ``LEAD_WORDS`` words: everything longer belongs in the report."""
    *said, figure = PARTS[part].paragraphs(Path(report), shown_as)
    words = sum(len(p.split()) for p in said)
    if words > LEAD_WORDS:
        raise LnReproError(f"{report}: the README's part {part!r} would say {words} words besides its figure and "
                           f"link, more than {LEAD_WORDS}: shorten the report's Answer's first sentence")
    return "\n\n".join(p for p in (*said, figure) if p) + "\n"


def replace_section(readme_text: str, body: str, part: str = "study") -> str:
    """``readme_text`` with the text between ``part``'s two markers replaced by ``body``."""
    begin, end = PARTS[part].begin, PARTS[part].end
    if begin not in readme_text or end not in readme_text:
        raise LnReproError(f"the README has no generated results part {part!r} (the markers {begin!r} ... {end!r})")
    head, rest = readme_text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n{body}{end}{tail}"


def update_readme(readme: Path, report: Path, shown_as: str, check: bool = False, part: str = "study") -> bool:
    """Rewrite (or with ``check`` only compare) one generated part of the README; True when it was up to date.
    The part's own published report, while it does not exist, gives the line that says so (with its store's
    progress)."""
    if (Path(report) / "tables").is_dir():
        body = results_markdown(report, shown_as, part)
    elif shown_as == PARTS[part].published and not Path(report).exists():
        body = PARTS[part].not_published(Path(report).parent)
    else:
        raise LnReproError(f"{report}: no report there (its tables/ folder is missing); a part is generated from a "
                           "published report, the study's results/{name}/report/ copied there")
    new = replace_section(Path(readme).read_text(encoding="utf-8"), body, part)
    return write_generated(readme, new, check, f"{readme}: the results part {part!r} differs from {report}'s "
                           f"tables; run `lnrepro readme-results --part {part} --report {shown_as}`")
