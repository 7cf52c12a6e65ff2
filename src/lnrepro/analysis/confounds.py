"""Which variables each comparison changes besides the one it studies (one job: confound detection).

A comparison (config ``comparisons``) names runs and the factor it studies. Its runs' resolved configs
(experiment.json ``runs``) are flattened to dotted keys ("schedule.warmup"); every key whose value differs
between the runs is either the studied factor's key or a confound. Figure 4 of Xiong et al. changes the
norm position AND the schedule (warm-up, decay): the table says so. Checkpoints are not time either:
the report always states it and plots against training wall-clock too.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..config.settings import FACTOR_KEYS
from ..errors import LnReproError
from ..io import atomic_write_text

# Top-level keys that identify a run rather than configure it.
IDENTITY_KEYS = {"run", "seed", "name"}

TIME_NOTE = (
    "Comparing checkpoints is not comparing time: checkpoint k of every run is k epochs of updates, "
    "but runs can differ in cost per update, and evaluation happens only at epoch boundaries. "
    "The report therefore also plots validation loss and BLEU against training wall-clock "
    "(summed over attempts, from the epoch manifests), measured on the hardware listed under 'Where it ran'."
)


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dict -> {"a.b": value}; lists stay values (decay_epochs [8] is one setting). A tuple (as
    ``Section.to_dict`` keeps them) becomes the list experiment.json holds, so both read the same."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict) and v:
            out.update(flatten(v, key))
        else:
            out[key] = list(v) if isinstance(v, tuple) else v
    return out


_MISSING = object()


def differing_keys(configs: list[dict[str, Any]]) -> list[str]:
    """Sorted dotted keys whose values are not equal across all ``configs`` (absent counts as a value)."""
    flat = [{k: v for k, v in flatten(c).items() if k.split(".")[0] not in IDENTITY_KEYS} for c in configs]
    keys = sorted(set().union(*flat)) if flat else []
    return [k for k in keys if len({repr(f.get(k, _MISSING)) for f in flat}) > 1]


def factor_key(factor: str) -> str:
    """The config key a factor name stands for; a dotted key is accepted as itself."""
    if factor in FACTOR_KEYS:
        return FACTOR_KEYS[factor]
    if "." in factor:
        return factor
    raise LnReproError(f"comparisons: unknown factor '{factor}'; expected one of {sorted(FACTOR_KEYS)} or a dotted config key")


@dataclass
class ComparisonResult:
    """One comparison's verdict.

    verdict: 'single-factor' (only the studied key differs), 'confounded' (other keys differ too),
    'factor does not vary' (the studied key is equal: the comparison cannot test its claim),
    'skipped' (some run not selected; see reason)."""

    name: str
    runs: list[str]
    factor: str
    factor_key: str
    claim: str
    verdict: str
    factor_values: dict[str, Any] = field(default_factory=dict)   # run -> value of the factor key
    confounds: list[str] = field(default_factory=list)            # other differing keys
    confound_values: dict[str, dict[str, Any]] = field(default_factory=dict)  # key -> run -> value
    reason: str = ""

    def sentence(self) -> str:
        if self.verdict == "skipped":
            return f"{self.name}: skipped ({self.reason})."
        also = ", ".join(self.confounds) if self.confounds else "nothing else"
        return f"{self.name}: factor {self.factor_key}; also differs: {also} -> {self.verdict}."


def analyze_confounds(experiment: dict[str, Any], devices: dict[str, set[str]] | None = None) -> dict[str, Any]:
    """Confound analysis of every comparison in ``experiment`` (experiment.json's dict, or
    ``Experiment.to_dict()``: its tuples count as the JSON lists).

    ``devices`` (optional, run -> set of device names the run trained on, from run.json) adds a
    hardware note when compared runs' wall-clocks come from different devices.
    Returns {"comparisons": [ComparisonResult as dict], "skipped": [names], "time_note": str,
    "hardware_notes": [str]}."""
    runs_cfg = experiment.get("runs") or {}
    selected = set(experiment.get("select") or [])
    comps = experiment.get("comparisons") or {}
    if not isinstance(comps, dict):
        raise LnReproError("experiment.json: 'comparisons' must be a mapping name -> {runs, factor, claim}")
    results: list[ComparisonResult] = []
    hardware: list[str] = []
    for name, comp in comps.items():
        if not isinstance(comp, dict) or not isinstance(comp.get("runs"), (list, tuple)) or "factor" not in comp:
            raise LnReproError(f"experiment.json: comparison '{name}' needs 'runs' (a list) and 'factor'")
        runs = [str(r) for r in comp["runs"]]
        fkey = factor_key(str(comp["factor"]))
        res = ComparisonResult(name=name, runs=runs, factor=str(comp["factor"]), factor_key=fkey,
                               claim=str(comp.get("claim", "")), verdict="skipped")
        not_sel = [r for r in runs if r not in selected]
        no_cfg = [r for r in runs if r in selected and r not in runs_cfg]
        if not_sel or no_cfg or len(runs) < 2:
            res.reason = ("runs not selected: " + ", ".join(not_sel) if not_sel else
                          "no resolved config for: " + ", ".join(no_cfg) if no_cfg else "fewer than two runs")
            results.append(res)
            continue
        cfgs = [runs_cfg[r] for r in runs]
        diff = differing_keys(cfgs)
        flat = [flatten(c) for c in cfgs]
        res.factor_values = {r: f.get(fkey) for r, f in zip(runs, flat)}
        res.confounds = [k for k in diff if k != fkey]
        res.confound_values = {k: {r: f.get(k) for r, f in zip(runs, flat)} for k in res.confounds}
        if fkey not in diff:
            res.verdict = "factor does not vary"
        else:
            res.verdict = "confounded" if res.confounds else "single-factor"
        if devices:
            devs = set().union(*(devices.get(r, set()) for r in runs)) - {""}
            if len(devs) > 1:
                hardware.append(f"{name}: wall-clock measured on different devices ({', '.join(sorted(devs))}); "
                                "time comparisons are also confounded by hardware.")
        results.append(res)
    return {
        "comparisons": [asdict(r) for r in results],
        "skipped": [r.name for r in results if r.verdict == "skipped"],
        "sentences": [r.sentence() for r in results],
        "time_note": TIME_NOTE,
        "hardware_notes": hardware,
    }


def _md_cell(x: Any) -> str:
    return str(x).replace("|", "\\|").replace("\n", " ")


def _fmt_values(values: dict[str, Any]) -> str:
    return "; ".join(f"{r}={v!r}" if isinstance(v, str) else f"{r}={v}" for r, v in values.items())


def confounds_markdown(result: dict[str, Any]) -> str:
    """Markdown: a table (comparison, runs, factor key, also differs, verdict, claim) and one sentence
    per comparison, then the time note."""
    lines = ["# Confounds", "",
             "For each comparison: the resolved-config keys whose values differ between its runs, "
             "split into the studied factor and everything else (the confounds).", "",
             "| comparison | runs | factor | factor values | also differs | verdict | claim |",
             "|---|---|---|---|---|---|---|"]
    for c in result["comparisons"]:
        if c["verdict"] == "skipped":
            also, fv = "", ""
        else:
            also = "; ".join(f"{k} ({_fmt_values(c['confound_values'][k])})" for k in c["confounds"]) or "none"
            fv = _fmt_values(c["factor_values"])
        verdict = c["verdict"] + (f": {c['reason']}" if c["reason"] else "")
        lines.append("| " + " | ".join(_md_cell(x) for x in
                                         (c["name"], ", ".join(c["runs"]), c["factor_key"], fv, also, verdict, c["claim"])) + " |")
    lines += ["", "## In words", ""]
    lines += [f"- {s}" for s in result["sentences"]] or ["- No comparisons are configured."]
    lines += ["", "## Checkpoints are not time", "", result["time_note"]]
    if result.get("hardware_notes"):
        lines += [""] + [f"- {h}" for h in result["hardware_notes"]]
    return "\n".join(lines) + "\n"


def write_confounds(experiment: dict[str, Any], out_md: Path,
                    devices: dict[str, set[str]] | None = None) -> dict[str, Any]:
    """Analyze and write ``out_md`` (report/confounds.md) atomically; returns the structured result."""
    result = analyze_confounds(experiment, devices)
    atomic_write_text(out_md, confounds_markdown(result))
    return result
