"""The report's "Assumptions and deviations", rendered against one experiment (one job: compare the config with
the paper's fixed facts, ``lnrepro.paper``):

- ``unstated_rows``: every setting the paper does not state (``paper.UNSTATED``), fairseq's recipe, and the value
  used here (``used_value`` reads it from the experiment);
- ``config_deviations``: the config's differences from the paper's stated setup (dataset, model size, scaled
  schedule, any stated setting, the optimizer's own deviations from its references, the vocabulary), computed
  against the published setup (``paper.published``) and the optimizer registry;
- ``recipe_notes``: stated settings where the paper and fairseq's recipe disagree and the paper's value is used.

The implementation's own deviations, which hold whatever the config, are ``paper.DEVIATIONS``.
"""

from __future__ import annotations

from typing import Any

from ...config.settings import Experiment
from ...optimizers import OPTIMIZERS
from ...paper import FAIRSEQ_DICTS, PAPER_PARAMS_M, SIZE_KEYS, UNSTATED, published


def _per_split(experiment: Experiment, name: str) -> dict[str, Any]:
    """A split's setting (``eval.beam``) of every scored split: {"valid": 1, "test": 5}."""
    return {split: getattr(s, name) for split, s in experiment.eval.splits.items()}


def used_value(experiment: Experiment, key: str) -> Any:
    """A setting's value in the experiment: bpe.* and the shared eval.* from their sections, ``eval.splits`` as
    the scored splits, a split's setting (eval.beam) as its value when every split has it, else "valid 1, test
    5"; a run setting as its distinct values over the selected runs (one value when they agree)."""
    section, _, name = key.partition(".")
    if key == "eval.splits":
        return tuple(experiment.eval.splits)
    if section == "bpe" or (section == "eval" and hasattr(experiment.eval, name)):
        return getattr(getattr(experiment, section), name)
    if section == "eval":
        values = _per_split(experiment, name)
        return next(iter(values.values())) if len(set(values.values())) == 1 else \
            ", ".join(f"{split} {v}" for split, v in values.items())
    distinct = list({repr(v): v for v in (experiment.runs[r].flat()[key] for r in experiment.select)}.items())
    return distinct[0][1] if len(distinct) == 1 else ", ".join(text for text, _ in distinct)


def unstated_rows(experiment: Experiment) -> list[dict[str, Any]]:
    """UNSTATED as table rows: setting, fairseq's recipe, the value used here."""
    rows = []
    for u in UNSTATED:
        used = [f"{u.key} = {show(used_value(experiment, u.key))}"] if u.key else []
        rows.append({"setting": u.setting, "paper": "not stated", "fairseq recipe": u.recipe,
                     "used here": "; ".join(used + ([u.fixed] if u.fixed else []))})
    return rows


def show(v: Any) -> str:
    """A value in a sentence: lists and tuples as "valid, test"."""
    return ", ".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v)


def _runs_text(runs: list[str]) -> str:
    return ", ".join(runs) if len(runs) <= 3 else f"{len(runs)} runs"


def _applies(flat: dict[str, Any], when: dict[str, Any]) -> bool:
    return all(flat.get(k) == v for k, v in when.items())


def _setup_deviations(experiment: Experiment, setup: list[dict[str, Any]]) -> list[str]:
    """Each stated setting of the paper a selected run (or the eval section) does not have, grouped by value."""
    out = []
    for entry in setup:
        key, paper = entry["key"], entry["value"]
        if key.startswith("eval."):  # a split's decoding setting: per split, grouped by value
            splits: dict[str, list[str]] = {}
            for split, value in _per_split(experiment, key.partition(".")[2]).items():
                if _as_list(value) != _as_list(paper):
                    splits.setdefault(repr(value), []).append(split)
            out += [f"{key} {v} on {', '.join(names)} instead of the paper's {paper!r} ({entry['source']})."
                    for v, names in splits.items()]
            continue
        by_value: dict[str, list[str]] = {}
        for run in experiment.select:
            flat = experiment.runs[run].flat()
            if _applies(flat, entry.get("when", {})) and _as_list(flat[key]) != _as_list(paper):
                by_value.setdefault(repr(flat[key]), []).append(run)
        out += [f"{key} {v} in {_runs_text(runs)} instead of the paper's {paper!r} ({entry['source']})."
                for v, runs in by_value.items()]
    return out


def _as_list(v: Any) -> Any:
    return list(v) if isinstance(v, (list, tuple)) else v


def config_deviations(experiment: Experiment) -> list[str]:
    """The config's deviations from the paper: dataset, model size, scaled schedule, every other stated
    setting, and the vocabulary (config-dependent: its size)."""
    paper = published()["paper"]
    out = []
    if experiment.data.dataset != paper["scale"]["dataset"]:
        out.append(f"Dataset: {experiment.data.dataset} instead of the paper's {paper['scale']['dataset']}: "
                   "absolute numbers are not comparable.")
    sizes = [f"{k} {used_value(experiment, f'model.{k}')} (paper {paper['scale']['model'][k]})" for k in SIZE_KEYS
             if str(used_value(experiment, f"model.{k}")) != str(paper["scale"]["model"][k])]
    if sizes:
        out.append(f"Model size: {', '.join(sizes)}.")
    if experiment.scaling:
        out.append("Scaled schedule (the preset's scaling): "
                   + "; ".join(f"{k}: {v}" for k, v in experiment.scaling.items()) + ".")
    out += _setup_deviations(experiment, paper["setup"])
    # the deviations of each optimizer a selected run uses from its references (lnrepro.optimizers)
    for name in dict.fromkeys(experiment.runs[r].optim.name for r in experiment.select):
        out += list(OPTIMIZERS[name].deviations) if name in OPTIMIZERS else []
    v = experiment.bpe.vocab_size
    out.append(
        f"Vocabulary: one joint sentencepiece BPE model ({v:,} pieces, byte fallback) for both languages, where "
        f"fairseq's IWSLT recipe learns subword-nmt merges with separate dictionaries ({FAIRSEQ_DICTS['de']:,} "
        f"German / {FAIRSEQ_DICTS['en']:,} English entries). At the paper's size with 10,000 pieces the model has "
        f"{PAPER_PARAMS_M['joint']} M parameters instead of {PAPER_PARAMS_M['fairseq']} M (the difference is all "
        f"embedding rows), and label smoothing spreads over {v:,} classes instead of {FAIRSEQ_DICTS['en']:,}.")
    return out


def recipe_notes(experiment: Experiment) -> list[str]:
    """Stated settings where the paper and fairseq's recipe disagree and the paper's value is used."""
    out = []
    for entry in published()["paper"]["setup"]:
        if "recipe" in entry and _as_list(used_value(experiment, entry["key"])) == _as_list(entry["value"]):
            out.append(f"{entry['key']} {entry['value']!r} as the paper's {entry['source']} says, where fairseq's "
                       f"IWSLT recipe uses {entry['recipe']!r}.")
    return out
