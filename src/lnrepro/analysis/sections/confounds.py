"""Which variables each comparison changes besides the one it studies (one job: confound detection).

A comparison (config ``comparisons``) names runs and the factor it studies. Its runs' resolved settings
(``Experiment.runs``) are flattened to dotted keys ("schedule.warmup"); every key whose value differs
between the runs is either the studied factor's key or a confound, unless it is inert in one of the runs (a
setting its schedule does not read, ``lnrepro.config.settings.inert_settings``): then the switch that turns
it on is what differs. Where the runs ran (``execution``: seeds trained, device, precision, torch version,
threads) confounds a comparison too when it differs. Figure 4 of Xiong et al. changes the norm position AND
the schedule (warm-up, decay): the table says so, and names the controlled comparisons that separate them.
A setting is named by its key whatever it is, the optimizer too (``optim.name``).

The host (``lnrepro.host.host_key``: the CPU's vector and matrix extensions and the threads) confounds cost, not
quality: a comparison whose units trained (or were scored) on hosts of different keys has its cost (CPU time,
wall-clock, time to quality in seconds, quality at equal CPU time, tokens per second) flagged as confounded by
the host (``cost_confounds``), while its verdict, the comparison of quality per epoch and per update, stays as
it is. Such cost compares within a host, or in updates and epochs (``HOST_FREE_UNIT``).

``model.norm`` is more than the norm position when a variant changes other things too (``NormVariant.differences``
in ``lnrepro.norms``: parameters, residual scaling, initialization, LayerNorms removed). Wherever the runs' norm
variants differ, the comparison names what they differ in beside it, from the registry: the union of the
variants' differences (the paper's post and pre have none), "deepnorm differs from post in the residual scale
and the initialization", whether model.norm is the studied factor or a confound.
Checkpoints are not time either: the report always states it and plots against training CPU time too.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ...config.settings import FACTOR_KEYS, Comparison, Experiment, RunSettings, inert_settings
from ...errors import LnReproError
from ...io import atomic_write_text
from ...norms import DIFFERENCE_KINDS, NORMS, Difference
from ..aggregate import HOST_FREE_UNIT

# The config key of the norm variant, and how a sentence names each kind of thing a variant changes beside it.
NORM_KEY = FACTOR_KEYS["norm"]
DIFFERENCE_WORDS: dict[str, str] = {"parameters": "the learned parameters", "residual scaling": "the residual scale",
                                    "initialization": "the initialization",
                                    "layernorms removed": "the LayerNorms removed",
                                    "residual connections": "the residual connections"}

# Top-level keys that identify a run rather than configure it.
IDENTITY_KEYS = {"run", "seed", "name"}

# The execution facts of a run (``execution_facts`` in aggregate.py) and how a sentence names them.
EXECUTION_FACTS: dict[str, str] = {"seeds": "the seeds trained", "device": "the device", "precision": "the precision",
                                   "torch": "the torch version", "threads": "the thread count"}
# An execution fact that repeats a config key: when the key is listed, the fact is not listed again.
FACT_MIRRORS: dict[str, str] = {"precision": "train.precision"}
# The hosts of a run's units (``execution_facts``: their host keys) and how a sentence names them: they confound
# the comparison's cost only, whose measures COST_MEASURES names; HOST_FREE_UNIT is how cost compares across hosts.
COST_FACTS: dict[str, str] = {"train_hosts": "the training hosts", "score_hosts": "the scoring hosts"}
COST_MEASURES = ("CPU time, wall-clock, time to quality in seconds, quality at equal CPU time and tokens per "
                 "second")

TIME_NOTE = (
    "Comparing checkpoints is not comparing time: checkpoint k of every run is k epochs of updates, "
    "but runs can differ in cost per update, and evaluation happens only at epoch boundaries. "
    "The report therefore also plots validation loss and BLEU against the CPU-seconds of training "
    "(summed over attempts, from the epoch manifests; wall-clock moves with what else runs on the machine), "
    "measured on the hardware listed under 'Where it ran'. Cost compares only within a host (its CPU flags and "
    f"threads): across hosts the table flags it (cost confounds) and {HOST_FREE_UNIT} are the unit."
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
    """One comparison's verdict: 'controlled', 'confounded', 'factor does not vary' or 'skipped'.

    controlled: only the studied key differs, and the runs ran alike; confounded: other keys or execution
    facts differ too; factor does not vary: the studied key is equal or inert in a run (the comparison cannot
    test its claim); skipped: some run not selected (see reason)."""

    name: str
    runs: list[str]
    factor: str
    factor_key: str
    claim: str
    verdict: str
    factor_values: dict[str, Any] = field(default_factory=dict)   # run -> value of the factor key
    confounds: list[str] = field(default_factory=list)            # other differing config keys that can act
    confound_values: dict[str, dict[str, Any]] = field(default_factory=dict)  # key -> run -> value
    execution_confounds: list[str] = field(default_factory=list)  # names of differing EXECUTION_FACTS
    execution_values: dict[str, dict[str, Any]] = field(default_factory=dict)  # fact -> run -> value
    # what the runs' norm variants change beside the norm position, when model.norm differs: one
    # {"variant", "kind", "what"} per registered Difference (NormVariant.differences)
    variant_differences: list[dict[str, str]] = field(default_factory=list)
    cost_confounds: list[str] = field(default_factory=list)  # names of COST_FACTS whose host keys differ
    cost_values: dict[str, dict[str, list[str]]] = field(default_factory=dict)  # fact -> run -> its host keys
    notes: list[str] = field(default_factory=list)                # e.g. "no spread: one seed" (not confounds)
    reason: str = ""
    sentence: str = ""


def and_words(items: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return " and ".join([", ".join(items[:-1]), items[-1]] if len(items) > 1 else items)


def _differ(items: list[str]) -> str:
    """The verb for ``items`` as a subject: 'differs' for one, 'differ' for more."""
    return "differs" if len(items) == 1 else "differ"


def variant_differences(norms: list[str]) -> list[tuple[str, Difference]]:
    """What the norm variants ``norms`` (model.norm of each run) differ in beside the norm position: the union of
    the distinct variants' registered differences, as (variant, Difference), by kind in ``DIFFERENCE_KINDS``
    order, then by variant in the order given. None when the variants are one; an unregistered name has none."""
    distinct = list(dict.fromkeys(norms))
    if len(distinct) < 2:
        return []
    out = [(n, d) for n in distinct for d in (NORMS[n].differences if n in NORMS else ())]
    return sorted(dict.fromkeys(out), key=lambda nd: DIFFERENCE_KINDS.index(nd[1].kind))


def variant_sentence(norms: list[str], differences: list[tuple[str, Difference]]) -> str:
    """"deepnorm differs from post in the residual scale and the initialization" (the variants with
    differences first, the others after "from"); "" when there are none."""
    if not differences:
        return ""
    distinct = list(dict.fromkeys(norms))
    kinds = [DIFFERENCE_WORDS[k] for k in DIFFERENCE_KINDS if any(d.kind == k for _, d in differences)]
    changing = [n for n in distinct if any(v == n for v, _ in differences)]
    plain = [n for n in distinct if n not in changing]
    subject = (f"{and_words(changing)} {_differ(changing)} from {and_words(plain)}" if plain
               else f"{and_words(changing)} differ")
    return f"{subject} in {and_words(kinds)}"


def _differing_facts(runs: list[str], execution: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """fact -> run -> value for every execution fact that differs between ``runs``. Seed sets compare as sets
    (an untrained run has none); a fact a run does not know ("" or absent, e.g. an older run.json) is not
    evidence of a difference."""
    out: dict[str, dict[str, Any]] = {}
    for fact in EXECUTION_FACTS:
        values = {r: execution.get(r, {}).get(fact) for r in runs}
        if fact == "seeds":
            values = {r: sorted(v or []) for r, v in values.items()}
            distinct = {tuple(v) for v in values.values()}
        else:
            distinct = {str(v) for v in values.values() if v not in (None, "")}
        if len(distinct) > 1:
            out[fact] = values
    return out


def _differing_hosts(runs: list[str], execution: dict[str, dict[str, Any]]) -> dict[str, dict[str, list[str]]]:
    """fact -> run -> host keys for every ``COST_FACTS`` under which the runs' units ran on more than one host
    key (across runs, or among the seeds of one run: its mean cost then mixes hosts). A unit whose records
    name no host (an older lnrepro's) is not evidence of a difference."""
    out: dict[str, dict[str, list[str]]] = {}
    for fact in COST_FACTS:
        values = {r: sorted(execution.get(r, {}).get(fact) or []) for r in runs}
        if len({k for v in values.values() for k in v}) > 1:
            out[fact] = values
    return out


def _seed_notes(runs: list[str], execution: dict[str, dict[str, Any]]) -> list[str]:
    """What the seed counts allow: no spread from one seed, nothing yet from none."""
    fewest = min(len(execution.get(r, {}).get("seeds") or []) for r in runs)
    return ["no seed trained yet"] if fewest == 0 else ["no spread: one seed"] if fewest == 1 else []


def _compare(res: ComparisonResult, settings: list[RunSettings], execution: dict[str, dict[str, Any]]) -> None:
    """Fill in ``res``'s differences and verdict from its runs' settings and execution facts."""
    runs, fkey = res.runs, res.factor_key
    cfgs = [s.to_dict() for s in settings]
    flat = [flatten(c) for c in cfgs]
    inert = set().union(*(inert_settings(s.schedule) for s in settings))
    # a setting inert in any run cannot make the runs differ: the switch that turns it on does
    acting = [k for k in differing_keys(cfgs) if k not in inert]
    res.factor_values = {r: f.get(fkey) for r, f in zip(runs, flat)}
    res.confounds = [k for k in acting if k != fkey]
    res.confound_values = {k: {r: f.get(k) for r, f in zip(runs, flat)} for k in res.confounds}
    listed = {fkey, *res.confounds}
    facts = _differing_facts(runs, execution)
    res.execution_values = {k: v for k, v in facts.items() if FACT_MIRRORS.get(k) not in listed}
    res.execution_confounds = list(res.execution_values)
    res.cost_values = _differing_hosts(runs, execution)
    res.cost_confounds = list(res.cost_values)
    res.notes = _seed_notes(runs, execution)
    if NORM_KEY in acting:
        norms = [str(f.get(NORM_KEY)) for f in flat]
        res.variant_differences = [{"variant": n, "kind": d.kind, "what": d.what}
                                   for n, d in variant_differences(norms)]
    if fkey not in acting:
        res.verdict = "factor does not vary"
    else:
        res.verdict = "confounded" if res.confounds or res.execution_confounds else "controlled"


def _sentence(res: ComparisonResult, controlled: dict[str, list[str]]) -> str:
    """The plain-language verdict, then what the norm variants differ in beside the norm position when they
    differ, then whether its cost is confounded by the host."""
    sentence = _verdict_sentence(res, controlled)
    if res.variant_differences:
        norms = list(res.factor_values.values()) if res.factor_key == NORM_KEY else \
            list(res.confound_values.get(NORM_KEY, {}).values())
        diffs = [(d["variant"], Difference(d["kind"], d["what"])) for d in res.variant_differences]
        sentence += f" {NORM_KEY} is not the norm position alone: {variant_sentence(norms, diffs)}."
    return f"{sentence} {_cost_sentence(res)}" if res.cost_confounds else sentence


def _cost_sentence(res: ComparisonResult) -> str:
    """Its cost is confounded by the host: which hosts differ (each run's host keys), and the unit cost compares
    in instead."""
    differ = [f"{COST_FACTS[f]} differ (" + "; ".join(f"{r}: {' and '.join(k) or 'unknown'}" for r, k in v.items())
              + ")" for f, v in res.cost_values.items()]
    return (f"Its cost ({COST_MEASURES}) is confounded by the host: {and_words(differ)}; compare its cost within a "
            f"host or in {HOST_FREE_UNIT} (its quality per epoch and per update is compared as above).")


def _verdict_sentence(res: ComparisonResult, controlled: dict[str, list[str]]) -> str:
    """The plain-language verdict; a confounded one names the controlled comparisons (``controlled``: factor
    key -> their names) that vary its factor and each confounding key alone."""
    runs, fkey = and_words(res.runs), res.factor_key
    if res.verdict == "skipped":
        return f"{res.name} is skipped: {res.reason}."
    if res.verdict == "controlled":
        return f"{res.name} is controlled: only {fkey} differs between {runs}."
    what = res.confounds + [EXECUTION_FACTS[f] for f in res.execution_confounds]
    if res.verdict == "factor does not vary":
        values = list(res.factor_values.values())
        how = (f"has the same value, {values[0]!r}, in {runs}" if all(v == values[0] for v in values)
               else f"differs between {runs} but is inert (unused by the schedule) in at least one of them")
        also = f", while {and_words(what)} {_differ(what)}" if what else ""
        return f"{res.name} cannot test its claim: {fkey} {how}{also}."
    sentence = f"{res.name} is confounded by {and_words(what)}, which {_differ(what)} between {runs} as well as {fkey}"
    if res.confounds:
        alone = [f"{k} alone ({', '.join(controlled[k])})" if controlled.get(k) else f"{k} alone (none selected)"
                 for k in [fkey, *res.confounds]]
        sentence += f"; the controlled comparisons that separate them vary {and_words(alone)}"
    return sentence + "."


def analyze_confounds(experiment: Experiment, execution: Mapping[str, dict[str, Any]] | None = None,
                      extra: Mapping[str, Comparison] | None = None) -> dict[str, Any]:
    """Confound analysis of every comparison of ``experiment``, then of ``extra`` (the tuned pairs).

    ``execution`` (optional; run -> {"seeds": [int], "device", "precision", "torch", "threads": str,
    "train_hosts", "score_hosts": [host key]}, as ``aggregate.execution_facts`` reads them) adds the execution
    facts that differ as confounds and the hosts that differ as cost confounds; without it the seeds are the
    experiment's. Returns {"comparisons": [ComparisonResult as dict], "skipped": [names],
    "time_note": str}."""
    if execution is None:  # nothing known of where they ran: every run has the experiment's seeds
        execution = {r: {"seeds": list(experiment.seeds)} for r in experiment.runs}
    results: list[ComparisonResult] = []
    for name, comp in {**experiment.comparisons, **(extra or {})}.items():
        runs = list(comp.runs)
        res = ComparisonResult(name=name, runs=runs, factor=comp.factor, factor_key=factor_key(comp.factor),
                               claim=comp.claim, verdict="skipped")
        not_sel = [r for r in runs if r not in experiment.select]
        if not_sel or len(runs) < 2:
            res.reason = "runs not selected: " + ", ".join(not_sel) if not_sel else "fewer than two runs"
        else:
            _compare(res, [experiment.runs[r] for r in runs], dict(execution))
        results.append(res)
    controlled: dict[str, list[str]] = {}
    for r in results:
        if r.verdict == "controlled":
            controlled.setdefault(r.factor_key, []).append(r.name)
    for r in results:
        r.sentence = _sentence(r, controlled)
    return {
        "comparisons": [asdict(r) for r in results],
        "skipped": [r.name for r in results if r.verdict == "skipped"],
        "time_note": TIME_NOTE,
    }


def _fmt_values(values: dict[str, Any]) -> str:
    return "; ".join(f"{r}={v!r}" if isinstance(v, str) else f"{r}={v}" for r, v in values.items())


def confounds_rows(result: dict[str, Any]) -> list[dict[str, str]]:
    """One row per comparison, as both the markdown and the report's table show it: verdict, the confounding
    keys and execution facts, what each differing thing was per run, notes and claim."""
    rows = []
    for c in result["comparisons"]:
        differ = {**c["confound_values"], **c["execution_values"]}
        rows.append({
            "comparison": c["name"], "runs": ", ".join(c["runs"]), "factor": c["factor_key"],
            "factor values": _fmt_values(c["factor_values"]),
            "variant differences": "; ".join(f"{d['variant']}: {d['kind']} ({d['what']})"
                                             for d in c.get("variant_differences", [])),
            "verdict": c["verdict"] + (f": {c['reason']}" if c["reason"] else ""),
            "also differs (confounds)": ", ".join(c["confounds"]),
            "execution confounds": ", ".join(c["execution_confounds"]),
            "values": "; ".join(f"{k} ({_fmt_values(v)})" for k, v in differ.items()),
            "notes": "; ".join(c["notes"]),
            "cost confounds": "; ".join(f"{COST_FACTS[f]} ({_fmt_values({r: ' and '.join(k) for r, k in v.items()})})"
                                        for f, v in c.get("cost_values", {}).items()),
            "claim": c["claim"],
        })
    return rows


def _md_cell(x: Any) -> str:
    return str(x).replace("|", "\\|").replace("\n", " ")


def confounds_markdown(result: dict[str, Any]) -> str:
    """Markdown: the table of ``confounds_rows`` and one sentence per comparison, then the time note."""
    rows = confounds_rows(result)
    cols = list(rows[0]) if rows else ["comparison"]
    lines = ["# Confounds", "",
             "For each comparison: the resolved-config keys whose values differ between its runs (settings "
             "inert in a run left out), split into the studied factor and everything else (the confounds), "
             "and the execution facts (seeds trained, device, precision, torch version, threads) that differ; "
             "where the norm variants differ, what they change beside the norm position (the registry's "
             f"differences); and the hosts (CPU flags and threads) that differ, which confound cost ({COST_MEASURES}) "
             f"but not quality per epoch or per update: such cost compares within a host or in {HOST_FREE_UNIT}.",
             "",
             "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(_md_cell(row[k]) for k in cols) + " |" for row in rows]
    lines += ["", "## In words", ""]
    lines += [f"- {c['sentence']}" for c in result["comparisons"]] or ["- No comparisons are configured."]
    lines += ["", "## Checkpoints are not time", "", result["time_note"]]
    return "\n".join(lines) + "\n"


def write_confounds(result: dict[str, Any], out_md: Path) -> Path:
    """Write ``analyze_confounds``'s ``result`` as ``out_md`` (report/confounds.md) atomically."""
    atomic_write_text(out_md, confounds_markdown(result))
    return Path(out_md)
