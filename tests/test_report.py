"""The report, aggregation and figures on a fabricated results tree (the real stages are not needed)."""

from __future__ import annotations

import copy
import html
import json
import math
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest

from lnrepro import config
from lnrepro.analysis import FIGURES
from lnrepro.analysis import aggregate as ag
from lnrepro.analysis.sections import claims as cl
from lnrepro.analysis.render import plots
from lnrepro.analysis.numbers import interval, sig
from lnrepro.analysis.sections.claims import STATUSES
from lnrepro.analysis.render.report import make_report
from lnrepro.analysis.build import build
from lnrepro.analysis.results import read_results
from lnrepro.config import Experiment
from lnrepro.paper import DEVIATIONS
from lnrepro.paths import Paths
from lnrepro.records import CheckpointScores, EpochManifest, RunSummary

REPO = Path(__file__).resolve().parents[1]
RUNS = ["postln_warmup_isqrt", "preln_nowarmup_step8", "postln_nowarmup_isqrt", "preln_warmup_isqrt"]
SEEDS = [1, 2]
EPOCHS = 3
# The demo preset's resolved experiment, as experiment.json holds it: the base every fabricated one edits.
DEMO = config.experiment(config.load_config([REPO / "config.yaml", REPO / "presets" / "demo.yaml"])).to_dict()


def resolved(run: str, epochs: int = EPOCHS) -> dict:
    """The run's settings: the demo's, with the norm, warm-up and decay its name says, over ``epochs`` epochs."""
    cfg = copy.deepcopy(DEMO["runs"]["postln_warmup_isqrt"])
    cfg["model"]["norm"] = "pre" if run.startswith("pre") else "post"
    cfg["schedule"]["warmup"] = "_warmup_" in run
    cfg["schedule"]["decay"] = "step" if run.endswith("step8") else "isqrt"
    cfg["schedule"]["decay_epochs"] = [2]
    cfg["train"]["epochs"] = epochs
    return cfg


def bleu(run: str, seed: int, ep: int) -> float:
    return round(10 + 3 * ep + RUNS.index(run) + 0.5 * seed, 2)


# The fields of the fabricated records (lnrepro.records) that no assertion reads.
RECORD = {"where_ran": {"host": "h", "device": "Fake CPU", "slurm_job_id": None}}
SCORED = {**RECORD, "manifest": "m", "label_smoothing": 0.1, "threads": 1, "torch": "2"}


def decode(exp: Experiment, run: str, ep: int) -> dict:
    """A score file's decode settings: per split scored at epoch ``ep`` of ``run``, the experiment's."""
    splits = exp.eval.scoring(exp.eval.due(ep, exp.last_of(run))).splits
    return {sp: {**s.to_dict(), "max_tokens": exp.eval.max_tokens} for sp, s in splits.items()}


def make_tree(root: Path, *, diverge: dict | None = None, unevaluated: set | None = None,
              scored: dict | None = None, lengths: dict | None = None) -> tuple[Path, Experiment]:
    """Fabricate results/{exp}/ as the stages write it. ``diverge``: {(run, seed): epoch}; ``unevaluated``:
    {(run, seed, epoch)} trained but not scored; ``scored``: {split: epoch numbers, the last added} for a
    split not scored at every epoch (eval.splits.{split}.epochs: a list and last; its scoring JSONs hold it only
    there); ``lengths``: {run: epochs} for a run that trains other than EPOCHS epochs. Two layer-gradient
    formats: nested lists (as lnrepro.train.gradstats returns them) and flat "enc.0.attn" keys."""
    diverge = diverge or {}
    unevaluated = unevaluated or set()
    lengths = {r: (lengths or {}).get(r, EPOCHS) for r in RUNS}
    eval_splits = {sp: {**s, "every": sp not in (scored or {}), "listed": (scored or {}).get(sp, [])}
                   for sp, s in DEMO["eval"]["splits"].items()}
    exp_dir = root / "results" / "fake"
    exp = Experiment.from_dict({
        **DEMO, "name": "fake", "select": RUNS, "seeds": SEEDS, "runs": {r: resolved(r, lengths[r]) for r in RUNS},
        "grids": {},  # the demo's grid runs are not among the fabricated ones
        "comparisons": {
            "figure4": {"runs": ["postln_warmup_isqrt", "preln_nowarmup_step8"], "factor": "norm", "claim": "Figure 4"},
            "norm_warmup_isqrt": {"runs": ["postln_warmup_isqrt", "preln_warmup_isqrt"], "factor": "norm", "claim": "n"},
            "decay_preln_warmup": {"runs": ["preln_warmup_isqrt", "preln_warmup_step8"], "factor": "decay", "claim": "d"},
        },
        "eval": {**DEMO["eval"], "splits": eval_splits},
        "notes": "DEMO NOTE: T_warmup, T_anchor and the decay epoch are scaled to 3 epochs.",
        "scaling": {"warmup_updates": 40, "decay_epochs": [2]},
    })
    exp_dir.mkdir(parents=True)
    exp.write(exp_dir / "experiment.json")
    upe = 10  # updates per epoch
    for run in RUNS:
        n = lengths[run]
        for seed in SEEDS:
            rd = exp_dir / "runs" / run / f"seed{seed}"
            (rd / "epochs").mkdir(parents=True)
            (rd / "eval").mkdir()
            config = exp.run_config(run, seed)
            config.write(rd / "config.json")
            (rd / "run.json").write_text(json.dumps({"run": run, "seed": seed, "config_sha256": config.sha256(),
                                                     "threads": 1, "precision": "fp32",
                                                     "where_ran": {"host": "h", "device": "Fake CPU"}}))
            div_ep = diverge.get((run, seed))
            lines = []
            last = (div_ep - 1) * upe + 3 if div_ep else n * upe
            for u in range(1, last + 1, 2):
                rec = {"update": u, "epoch": (u - 1) // upe + 1, "loss": 10 - u / 10, "nll": 9.0, "lr": 1e-4,
                       "grad_norm": 1.0 + u, "tokens_per_s": 1000.0, "wall_s": u * 0.1, "attempt": 1}
                if run.startswith("post"):  # lnrepro.train.loop's format
                    rec.update(kind="step", lrs=[1e-4, 1e-4], train_s=u * 0.1)
                    rec["grad_norms"] = {
                        "encoder": {"self_attn": [0.1, 0.2], "ffn": [0.3, 0.4]},
                        "decoder": {"self_attn": [0.5, 0.6], "encoder_attn": [0.7, 0.8], "ffn": [0.9, 1.0 + u]}}
                else:
                    rec["grad_norms"] = {f"{s}.{i}.{k}": 0.1 * (i + 1) for s in ("enc", "dec") for i in range(2)
                                         for k in ("attn", "ffn")}
                lines.append(json.dumps(rec))
            last_logged = u
            lines.append(json.dumps({"update": 1, "epoch": 1, "loss": 99.0, "attempt": 2}))  # resumed attempt
            if run.startswith("post"):  # the loop's non-step markers are not updates
                lines.append(json.dumps({"kind": "attempt", "attempt": 2, "resumed_update": 0, "wall_s": 0.1}))
            # what a finished training's log ends with: each completed epoch's record and the finished record
            lines += [json.dumps({"kind": "epoch", "attempt": 2, "epoch": ep, "updates": ep * upe, "wall_s": 1.0})
                      for ep in range(1, (div_ep or n + 1))]
            lines.append(json.dumps({"kind": "finished", "attempt": 2, "update": last, "wall_s": 9.0}))
            (rd / "train.jsonl").write_text("\n".join(lines) + "\n")
            summary = {**RECORD, "status": "diverged" if div_ep else "completed", "final_loss": 9.0, "final_nll": 8.0,
                       "final_loss_update": last_logged, "updates": last, "epochs_completed": (div_ep or n + 1) - 1,
                       "epochs": n, "target_tokens_per_epoch": 1000, "target_tokens_trained": last * 100,
                       "diverged": {"update": last, "epoch": div_ep, "detail": "loss nan", "loss": None, "lr": 1e-4}
                       if div_ep else None, "attempts": 2}
            if run.startswith("post"):
                summary.update(train_s=last * 0.11, wall_s_all_attempts=last * 0.2, tokens_per_s=None)
            else:  # throughput unknown here: the training log's mean
                summary.update(train_s=last * 0.1, wall_s_all_attempts=last * 0.1, tokens_per_s=None)
            # CPU time beside the wall-clock, differing by seed (the same work: the report's cost spread)
            summary.update(train_cpu_s=last * (0.08 + 0.01 * seed))
            RunSummary.from_dict({**summary, "run": run, "seed": seed}).write(rd / "summary.json")
            for ep in range(1, n + 1):
                diverged = div_ep is not None and ep >= div_ep
                status = "diverged" if diverged else "ok"
                EpochManifest.from_dict({
                    **RECORD, "run": run, "seed": seed, "epoch": ep, "status": status,
                    "updates": min(ep * upe, last), "wall_s": min(ep * upe, last) * 0.1 + RUNS.index(run),
                    "cpu_s": min(ep * upe, last) * (0.08 + 0.01 * seed),
                    "weights": None if diverged else f"state/epochs/epoch{ep:03d}.pt",
                    "sha256": None if diverged else "ab" * 32, "partial": False, "config_sha256": config.sha256(),
                }).write(rd / "epochs" / f"epoch{ep:03d}.json")
                if (run, seed, ep) in unevaluated:
                    continue
                ev = {**SCORED, "run": run, "seed": seed, "epoch": ep, "updates": min(ep * upe, last),
                      "weights": None if diverged else f"state/epochs/epoch{ep:03d}.pt",
                      "weights_sha256": None if diverged else "ab" * 32, "decode": decode(exp, run, ep)}
                if diverged:
                    ev.update(status="diverged", splits={sp: None for sp in ev["decode"]}, wall_s=0.0)
                else:
                    b = bleu(run, seed, ep)
                    ev.update(status="ok", wall_s=1.5, splits={sp: {
                        "loss": 5.0 / ep, "nll": 4.0 / ep, "loss_base2": 5.0 / ep / math.log(2),
                        "nll_base2": 4.0 / ep / math.log(2), "target_tokens": 100, "bleu_tok": b + (sp == "test"),
                        "bleu_tok_detail": {}, "sacrebleu": b - 1, "sacrebleu_signature": "nrefs:1|case:lc|tok:13a",
                        "sacrebleu_detail": {}, "sentences": 10, "decode_s": 2.0, "sent_per_s": 5.0}
                        for sp in ("valid", "test") if ep in exp.scored(run, sp)})
                CheckpointScores.from_dict(ev).write(rd / "eval" / f"epoch{ep:03d}.json")
    return exp_dir, exp


class Tables(HTMLParser):
    """Collect every <table id=...> as a list of rows of cell texts, and every <img src>. A cell that names a run
    or a metric in words holds its identifier in ``title``: the identifier is the cell's text here."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.imgs: list[str] = []
        self._cur: str | None = None
        self._cell: list[str] | None = None
        self._title: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table":
            self._cur = a.get("id", f"anon{len(self.tables)}")
            self.tables[self._cur] = []
        elif tag == "tr" and self._cur:
            self.tables[self._cur].append([])
        elif tag in ("td", "th") and self._cur:
            self._cell = []
            self._title = a.get("title")
        elif tag == "img":
            self.imgs.append(a["src"])

    def handle_endtag(self, tag):
        if tag == "table":
            self._cur = None
        elif tag in ("td", "th") and self._cell is not None and self._cur:
            self.tables[self._cur][-1].append(self._title or "".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


DIVERGE = {("postln_nowarmup_isqrt", 1): 2, ("postln_nowarmup_isqrt", 2): 2, ("preln_nowarmup_step8", 2): 3}
UNEVAL = {("preln_warmup_isqrt", 1, 3), ("preln_warmup_isqrt", 2, 3)}


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = tmp_path_factory.mktemp("rep")
    exp_dir, exp = make_tree(root, diverge=DIVERGE, unevaluated=UNEVAL)
    index = make_report(exp_dir, exp, exp_dir / "report")
    p = Tables()
    p.feed(index.read_text())
    return exp_dir, exp, index, p


def as_frame(rows: list[list[str]]) -> pd.DataFrame:
    return pd.DataFrame(rows[1:], columns=rows[0]).set_index("epoch")


def test_one_bleu_value_per_run_per_epoch(report):
    _, _, _, p = report
    t = as_frame(p.tables["bleu-per-epoch"])
    assert list(t.columns) == RUNS
    assert list(t.index) == [str(e) for e in range(1, EPOCHS + 1)]
    for run in ("postln_warmup_isqrt", "preln_nowarmup_step8"):
        for ep in (1, 2):
            vals = [bleu(run, s, ep) for s in SEEDS]
            assert t.loc[str(ep), run] == f"{sig(sum(vals) / 2)} ± {sig(pd.Series(vals).std(), 2)}"
    assert (t != "").all().all() and not t.isin(["missing", ""]).any().any()


def test_diverged_and_unevaluated_are_shown_as_such(report):
    _, _, _, p = report
    t = as_frame(p.tables["bleu-per-epoch"])
    assert t.loc["1", "postln_nowarmup_isqrt"] != "diverged"
    assert t.loc["2", "postln_nowarmup_isqrt"] == "diverged" and t.loc["3", "postln_nowarmup_isqrt"] == "diverged"
    # one of two seeds diverged at epoch 3: the other seed's value, with the count
    assert t.loc["3", "preln_nowarmup_step8"] == f"{sig(bleu('preln_nowarmup_step8', 1, 3))} (1/2 diverged)"
    assert t.loc["3", "preln_warmup_isqrt"] == "not evaluated"
    loss = as_frame(p.tables["loss-per-epoch"])
    assert loss.loc["2", "postln_nowarmup_isqrt"] == "diverged"
    div = pd.DataFrame(p.tables["divergence"][1:], columns=p.tables["divergence"][0]).set_index("run")
    assert float(div.loc["postln_nowarmup_isqrt", "divergence_rate"]) == 1.0
    assert float(div.loc["preln_nowarmup_step8", "divergence_rate"]) == 0.5
    assert float(div.loc["postln_warmup_isqrt", "divergence_rate"]) == 0.0
    assert "loss nan" in div.loc["preln_nowarmup_step8", "diverged_at"]


def test_sections_notes_confounds_deviations(report):
    exp_dir, exp, index, p = report
    text = index.read_text()
    for sec in ("Settings", "Figure 4 reproduced", "Confounds in full", "Stability and failures",
                "Runs and their cost", "Gradient at initialization", "Assumptions and deviations", "Where it ran"):
        assert sec in text
    assert "DEMO NOTE: T_warmup" in text and all(d in html.unescape(text) for d in DEVIATIONS)
    assert "Expected gradient at initialization: not computed" in text
    assert "not comparing time" in text
    conf = pd.DataFrame(p.tables["confounds"][1:], columns=p.tables["confounds"][0]).set_index("comparison")
    assert conf.loc["figure4", "verdict"] == "confounded"
    assert conf.loc["figure4", "also differs (confounds)"] == "schedule.decay, schedule.warmup"
    assert conf.loc["norm_warmup_isqrt", "verdict"] == "controlled"
    assert conf.loc["decay_preln_warmup", "verdict"].startswith("skipped")
    md = (exp_dir / "report" / "confounds.md").read_text()
    assert "- figure4 is confounded by schedule.decay and schedule.warmup," in md
    assert "Post-LN solid, Pre-LN dashed." in text  # the figures' line style per registered norm variant


def test_settings_tables(report):
    _, exp, _, p = report
    runs = p.tables["runs"]
    assert runs[0] == ["run", "model.norm", "schedule.warmup", "schedule.decay"]  # the factors; nothing else differs
    assert runs[2] == ["preln_nowarmup_step8", "pre", "False", "step"]
    kv = {name: dict(map(tuple, p.tables[name][1:])) for name in ("scaling", "shared-settings", "eval-settings")}
    assert all(p.tables[name][0] == ["key", "value"] for name in kv)  # one key/value table shape throughout
    assert kv["scaling"] == {"decay_epochs": "[2]", "warmup_updates": "40"}
    shared = kv["shared-settings"]
    assert shared["schedule.decay_epochs"] == "[2]" and shared["optim.betas"] == "[0.9, 0.98]"
    assert shared["bpe.vocab_size"] == str(exp.bpe.vocab_size) and shared["train.epochs"] == str(EPOCHS)
    assert "model.norm" not in shared and list(shared)[-1] == "data.dataset" and shared["data.dataset"] == "synthetic"
    assert kv["eval-settings"]["splits.test.beam"] == "1" and kv["eval-settings"]["splits.valid.epochs"] == "[1, 2, 3]"
    assert kv["eval-settings"]["label_smoothing"] == "0.1"


def test_figures_and_tables_exist(report):
    exp_dir, _, index, p = report
    out = exp_dir / "report"
    assert p.imgs and all((out / src).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for src in p.imgs)
    # every figure but the gradinit ones (no gradinit.csv here) is on the page once, each with its caption
    drawn = [f"figures/{f}" for key, f in FIGURES.items() if not key.startswith("gradinit")]
    assert sorted(p.imgs) == sorted(drawn)
    assert all((REPO / "workflow" / "report" / f"{Path(f).stem}.rst").exists() for f in FIGURES.values())
    ep = pd.read_csv(out / "tables" / "epochs.csv")
    assert len(ep) == len(RUNS) * len(SEEDS) * EPOCHS
    assert set(ep["status"]) == {"ok", "diverged", "not evaluated"}
    for name in ("run_epochs", "divergence", "wallclock", "milestones", "convergence", "train_curves",
                 "grad_norms_early", "grad_norms_by_epoch"):
        assert (out / "tables" / f"{name}.csv").exists(), name
    assert not list(out.rglob("*.tmp"))


def _section(text: str, anchor: str) -> str:
    """The HTML of one section of the page, from its heading to the next."""
    return text.split(f'<h2 id="{anchor}">', 1)[1].split("<h2 ", 1)[0]


def test_findings_open_the_page_and_come_from_the_tables(report):
    exp_dir, _, index, p = report
    text = index.read_text()
    # a results section: one section per question, then the appendix (no variant beyond the paper's two, no
    # second depth: no such sections)
    assert re.findall(r'<h2 id="([a-z0-9]+)">', text) == [
        "answer", "figure4", "effects", "endpoint", "tuned", "stability", "gradinit",
        "claims", "confounds", "findings", "run", "assumptions", "wallclock", "where", "files"]
    # the summary, then the table of contents, then the Answer: the first screen answers
    assert text.index('<p class="summary">') < text.index('<a href="#answer">') < text.index('<h2 id="answer">')
    assert '<h2 id="deviations">' not in text and '<h2 id="assumptions">' in text
    claims = pd.read_csv(exp_dir / "report" / "tables" / "claims.csv")
    section = _section(text, "findings")
    # the order: the gap, the confounds and controlled comparisons, stability and failures, the claims,
    # the absolute numbers of the paper's scale last
    heads = [html.unescape(h) for h in re.findall(r"<h3>(.*?)</h3>", section)]
    assert heads[0].startswith("The gap: ") and heads[1:] == [
        "Figure 4's confounds and the comparisons that separate them", "Stability and failures",
        "The paper's claims", "Absolute numbers of the paper's scale, and references"]
    groups = [re.findall(r"<li>(.*?)</li>", g) for g in section.split("<h3>")[1:]]
    findings = [html.unescape(x) for g in groups for x in g]
    assert len(groups[3]) + len(groups[4]) == len(claims)  # a sentence per claim
    absolute = claims[claims["kind"].isin(["absolute", "reference"])]
    for sentence, row in zip([html.unescape(x) for x in groups[4]], absolute.itertuples()):
        assert row.status in sentence
    assert claims.set_index("id").loc["figure4_postln_bleu", "status"] == "not measured at this scale"  # demo size
    assert set(claims["status"]) <= set(STATUSES)
    gap = [html.unescape(x) for x in groups[0]]
    assert all(s.startswith("Figure 4's pair, preln_nowarmup_step8 minus postln_warmup_isqrt, at epoch ") for s in gap)
    assert "Welch interval" in gap[0] and "the last epoch" in gap[-1]
    assert not any("attributes it to" in s for s in findings)  # no attribution from last-epoch main effects
    controlled = " ".join(map(html.unescape, groups[1]))
    assert "schedule.decay, schedule.warmup" in controlled or "schedule.warmup, schedule.decay" in controlled
    assert "Divergence (a non-finite training loss)" in html.unescape(groups[2][0])
    rows = {r[0]: r for r in p.tables["claims"][1:]}
    measured = claims.set_index("id").loc["figure4_postln_bleu", "measured"]
    row = claims.set_index("id").loc["figure4_postln_bleu"]
    # the value [its interval], as the page writes numbers
    assert rows["figure4_postln_bleu"][3] == interval(measured, row["ci_low"], row["ci_high"])


def test_answer_md_quotes_the_answer_section_and_the_equivalence_tests(report):
    """answer.md: the Answer section's sentences (the answer's, then the end point's equivalence tests) as
    paragraphs under a one-line heading; equivalence.csv on the page; an arm with a diverged seed is not tested."""
    exp_dir, exp, index, p = report
    out = exp_dir / "report"
    assert Paths(exp.name).answer_md == "results/fake/report/answer.md"
    md = (out / "answer.md").read_text(encoding="utf-8")
    head, *paragraphs = md.rstrip("\n").split("\n\n")
    assert head == "# The answer: fake" and "\n" not in "".join(paragraphs)
    # the Answer's finding first, then its list and the end point's sentences (the page shows the notes in the
    # Answer's list, answer.md last)
    answer, end_point = _section(index.read_text(), "answer"), _section(index.read_text(), "endpoint")
    finding = re.findall(r'<p class="finding">(.*?)</p>', answer)
    assert paragraphs[0] == html.unescape(finding[0])
    assert sorted(paragraphs) == sorted(html.unescape(x) for x in finding + re.findall(r"<li>(.*?)</li>",
                                                                                        answer + end_point))
    eq = pd.read_csv(out / "tables" / "equivalence.csv")
    assert list(eq["metric"]) == ["valid_bleu_tok", "valid_nll_base2", "test_bleu_tok", "test_nll_base2"]
    assert set(eq["verdict"]) == {"not tested"}  # preln_nowarmup_step8's seed 2 diverged at epoch 3
    assert paragraphs[-1] == ("No equivalence test of validation BLEU, validation NLL, test BLEU and test NLL at epoch "
                              "3: preln_nowarmup_step8 failed at epoch 3 (1 of 2 seeds: 1 diverged).")
    assert p.tables["equivalence"][0][:3] == ["metric", "seeds (b / a)", "pooled sd"]
    assert "answer.md" in _section(index.read_text(), "files")


@pytest.mark.usefixtures("drawn")
def test_equivalence_tested_and_failure_reference_printed(tmp_path):
    """Without a failed arm the end point is tested (its resolution first); a run of
    analysis.report.failure_reference is judged against its reference, which the failure rule names."""
    exp_dir, exp = make_tree(tmp_path)
    d = exp.to_dict()
    d["analysis"]["report"]["failure_reference"] = {"postln_nowarmup_isqrt": "postln_warmup_isqrt"}
    exp = Experiment.from_dict(d)
    index = make_report(exp_dir, exp, exp_dir / "report")
    tables = exp_dir / "report" / "tables"
    eq = pd.read_csv(tables / "equivalence.csv").set_index("metric")
    bleu_row = eq.loc["valid_bleu_tok"]
    assert bleu_row["difference"] == pytest.approx(1.0) and (bleu_row["n_a"], bleu_row["n_b"]) == (2, 2)
    assert bleu_row["verdict"] == "undetermined with these seeds"  # 2 seeds: the 95% interval includes 0
    assert bleu_row["largest_equivalent"] == "none"  # the 90% half-width with two seeds a side exceeds 1 BLEU
    md = (exp_dir / "report" / "answer.md").read_text(encoding="utf-8")
    assert "Resolution of the validation BLEU test at epoch 3: 2 seeds of Pre-LN and 2 seeds of Post-LN" in md
    assert md.index("Resolution of the validation BLEU") < md.index("Validation BLEU at epoch 3, Pre-LN minus Post-LN")
    fates = pd.read_csv(tables / "seed_fates.csv", keep_default_na=False)
    judged = fates[fates["run"] == "postln_nowarmup_isqrt"]
    assert set(judged["reference"]) == {"postln_warmup_isqrt"}
    assert set(fates.loc[fates["run"] != "postln_nowarmup_isqrt", "reference"]) == {""}
    stability = html.unescape(_section(index.read_text(), "stability"))
    assert "analysis.report.failure_reference: postln_nowarmup_isqrt against postln_warmup_isqrt" in stability


def test_data_budget_effect_and_failure_tables(report):
    exp_dir, _, index, p = report
    tables = exp_dir / "report" / "tables"
    long = pd.read_csv(tables / "scores_long.csv")
    assert list(long.columns) == ["run", "seed", "epoch", "split", "metric", "value"]
    assert len(long) == len(RUNS) * len(SEEDS) * EPOCHS * (2 * 6 + 5)
    status = long[(long["metric"] == "status")].set_index(["run", "seed", "epoch"])["value"]
    assert status[("postln_nowarmup_isqrt", 1, 2)] == "diverged at update 13"  # summary.json's update
    assert status[("preln_warmup_isqrt", 1, 3)] == "not evaluated" and status[("postln_warmup_isqrt", 1, 3)] == "ok"
    runs = pd.read_csv(tables / "runs.csv")
    assert list(runs["run"]) == RUNS and set(runs["precision"]) == {"fp32"} and set(runs["seeds_trained"]) == {"1 2"}
    budgets = pd.read_csv(tables / "budgets.csv")
    assert list(budgets["budget"])[:2] == ["epoch 3", "epoch 2"] and budgets["budget"][2].startswith("training CPU")
    assert list(budgets["updates"][:2]) == [30, 20]
    effects = pd.read_csv(tables / "effects.csv")
    assert list(effects.columns[:9]) == ["metric", "budget", "effect", "estimate", "ci_low", "ci_high", "df",
                                         "covariance", "n_seeds"]
    by_epoch = pd.read_csv(tables / "effects_by_epoch.csv")
    assert set(by_epoch["epoch"]) == {1, 2, 3} and set(by_epoch["kind"]) == {"main", "interaction", "simple"}
    fates = pd.read_csv(tables / "seed_fates.csv")
    assert set(fates["budget"]) == {"epoch 3", "epoch 2"} and "did not train" in set(fates["fate"]) | {"did not train"}
    effects_html = html.unescape(_section(index.read_text(), "effects"))
    assert "Welch-Satterthwaite" in effects_html
    assert "analysis.report.failure_bleu_fraction" in html.unescape(_section(index.read_text(), "stability"))
    assert "analysis.report.convergence_window" in html.unescape(_section(index.read_text(), "figure4"))
    last = effects[(effects["metric"] == "valid_bleu_tok") & (effects["budget"] == "epoch 3")].set_index("effect")
    # epoch 3: postln_nowarmup_isqrt diverged, preln_warmup_isqrt not scored: two cells, only norm identified
    assert last["estimate"].notna().tolist() == [True] + [False] * 6
    assert last.loc["norm", "n_left_out"] == 3 and last.loc["norm", "n_missing"] == 2
    failures = pd.read_csv(tables / "failures.csv").set_index("run")
    assert failures.loc["postln_nowarmup_isqrt", "failure_rate"] == 1.0
    assert failures.loc["preln_nowarmup_step8", "failure_rate"] == 0.5
    assert {"budgets", "design", "cells", "effects", "failures", "claims", "unstated"} <= set(p.tables)
    text = index.read_text()
    assert "No grid is selected" in _section(text, "tuned")
    assumptions = html.unescape(_section(text, "assumptions"))
    assert "41.78 M parameters instead of 39.47 M" in assumptions and all(d in assumptions for d in DEVIATIONS)
    assert "Dataset: synthetic instead of the paper's iwslt14" in assumptions
    assert [r[0] for r in p.tables["unstated"][1:]][:3] == ["weight decay", "Adam eps", "gradient clipping"]


@pytest.mark.usefixtures("drawn")
def test_tuned_baselines_in_the_report(tmp_path):
    exp_dir, exp = make_tree(tmp_path, diverge=DIVERGE)
    grids = {"g_post": {"base": "postln_warmup_isqrt", "values": {"schedule.warmup": [True, False]}, "seeds": SEEDS,
                        "runs": ["postln_warmup_isqrt", "postln_nowarmup_isqrt"]},
             "g_pre": {"base": "preln_nowarmup_step8", "values": {"schedule.warmup": [False, True]}, "seeds": SEEDS,
                       "runs": ["preln_nowarmup_step8", "preln_warmup_isqrt"]}}
    exp = Experiment.from_dict({**exp.to_dict(), "grids": grids})
    index = make_report(exp_dir, exp, exp_dir / "report")
    p = Tables()
    p.feed(index.read_text())
    post = {r[0]: r for r in p.tables["grid-g_post"][1:]}
    assert post["postln_warmup_isqrt"][-1] == "best" and post["postln_nowarmup_isqrt"][-1] == ""  # it diverged
    tuned = pd.read_csv(exp_dir / "report" / "tables" / "tuned.csv").set_index("metric")
    row = tuned.loc["test_bleu_tok"]
    # the fabricated losses tie: the first run with a finished seed is the best (seed 2 diverged at epoch 3)
    assert (row["run_a"], row["run_b"], row["n_a"], row["n_b"]) == ("postln_warmup_isqrt", "preln_nowarmup_step8", 2, 1)
    mean_a = sum(bleu("postln_warmup_isqrt", s, 3) + 1 for s in SEEDS) / 2
    assert row["difference"] == pytest.approx(bleu("preln_nowarmup_step8", 1, 3) + 1 - mean_a, abs=1e-4)
    assert math.isnan(row["ci_low"])  # one seed on a side: no interval
    conf = pd.DataFrame(p.tables["confounds"][1:], columns=p.tables["confounds"][0]).set_index("comparison")
    assert conf.loc["figure4_tuned", "runs"] == "postln_warmup_isqrt, preln_nowarmup_step8"
    assert conf.loc["figure4_tuned", "verdict"] == "confounded"
    assert "tuned against tuned" in conf.loc["figure4_tuned", "claim"]
    brackets = pd.read_csv(exp_dir / "report" / "tables" / "tuned_brackets.csv").set_index("grid")
    assert brackets.loc["g_post", ["axis", "best_run", "n_values", "position"]].tolist() == [
        "schedule.warmup", "postln_warmup_isqrt", 2, "not ordered"]  # a switch: no upward or downward
    tuned_html = html.unescape(_section(index.read_text(), "tuned"))
    assert "Does each grid bracket its optimum?" in tuned_html and p.tables["tuned-brackets"][0][0] == "grid"
    assert "Grid g_post: its best trial postln_warmup_isqrt (the lowest seed-mean valid_loss_base2 at epoch 3)" \
        in tuned_html


TUNED_GRIDS = {"g_post": {"base": "postln_warmup_isqrt", "values": {"schedule.warmup": [True, False]}, "seeds": SEEDS,
                          "runs": ["postln_warmup_isqrt", "postln_nowarmup_isqrt"]},
               "g_pre": {"base": "preln_nowarmup_step8", "values": {"schedule.warmup": [False, True]}, "seeds": SEEDS,
                         "runs": ["preln_nowarmup_step8", "preln_warmup_isqrt"]}}


@pytest.mark.usefixtures("drawn")
def test_report_with_test_scored_at_the_last_epoch_only(tmp_path):
    """eval.splits.test.epochs [last]: test's scores are NaN in epochs.csv and absent from scores_long.csv where
    not scored, its per-epoch table has the last epoch's row only, its cells only the last-epoch budget (the
    earlier epoch and the CPU-time budget need test there and at every epoch), and the claims and
    tuned-against-tuned on test read it at the last epoch."""
    exp_dir, exp = make_tree(tmp_path, diverge=DIVERGE, scored={"test": [EPOCHS]})
    exp = Experiment.from_dict({**exp.to_dict(), "grids": TUNED_GRIDS})
    index = make_report(exp_dir, exp, exp_dir / "report")
    p = Tables()
    p.feed(index.read_text())
    tables = exp_dir / "report" / "tables"
    epochs = pd.read_csv(tables / "epochs.csv")
    ok = epochs[epochs["status"] == "ok"]
    assert ok["valid_bleu_tok"].notna().all() and ok.loc[ok["epoch"] == EPOCHS, "test_bleu_tok"].notna().all()
    assert ok.loc[ok["epoch"] < EPOCHS, "test_bleu_tok"].isna().all()
    long = pd.read_csv(tables / "scores_long.csv")
    assert set(long.loc[long["split"] == "test", "epoch"]) == {EPOCHS}
    assert set(long.loc[long["split"] == "valid", "epoch"]) == set(range(1, EPOCHS + 1))
    test = as_frame(p.tables["bleu-per-epoch-test"])
    assert list(test.index) == [str(EPOCHS)]
    vals = [bleu("postln_warmup_isqrt", s, EPOCHS) + 1 for s in SEEDS]
    assert test.loc[str(EPOCHS), "postln_warmup_isqrt"] == f"{sig(sum(vals) / 2)} ± {sig(pd.Series(vals).std(), 2)}"
    assert list(as_frame(p.tables["bleu-per-epoch"]).index) == [str(e) for e in range(1, EPOCHS + 1)]
    cells = pd.read_csv(tables / "cells.csv")
    assert set(cells.loc[cells["metric"].str.startswith("test_"), "budget"]) == {f"epoch {EPOCHS}"}
    valid_budgets = set(cells.loc[cells["metric"].str.startswith("valid_"), "budget"])
    assert {f"epoch {EPOCHS}", "epoch 2"} <= valid_budgets and any(b.startswith("training CPU") for b in valid_budgets)
    tuned = pd.read_csv(tables / "tuned.csv").set_index("metric")
    row = tuned.loc["test_bleu_tok"]  # as in test_tuned_baselines_in_the_report: test at the last epoch
    assert (row["run_a"], row["run_b"], row["n_a"], row["n_b"]) == ("postln_warmup_isqrt", "preln_nowarmup_step8", 2, 1)
    assert row["mean_a"] == pytest.approx(sum(vals) / 2, abs=1e-4)
    claims = pd.read_csv(tables / "claims.csv").set_index("id")
    for claim in ("liu2020_postln_test_bleu", "liu2020_preln_test_bleu"):
        assert claims.loc[claim, "measured_as"].endswith(f"test_bleu_tok at epoch {EPOCHS}")
        assert not math.isnan(claims.loc[claim, "measured"])


@pytest.mark.usefixtures("drawn")
def test_report_over_runs_of_two_lengths(tmp_path):
    """Figure 4's pair trains 5 epochs, the other cells 3, test scored at each run's last epoch: every comparison
    is made at epochs all its runs have. The study's last budget is epoch 3 and epoch 5 one of the pair alone;
    the factorial fit (cells of 3 and 5 epochs) stops at 3; a grid of two 5-epoch runs picks its best at 5; the
    pair's gap runs to 5; the end point reads each run at its own last epochs; the rule is printed."""
    pair, long = ["postln_warmup_isqrt", "preln_nowarmup_step8"], 5
    exp_dir, exp = make_tree(tmp_path, scored={"test": []}, lengths={r: long for r in pair})
    grid = {"g_long": {"base": pair[0], "values": {"model.norm": ["post", "pre"]}, "seeds": SEEDS, "runs": pair}}
    exp = Experiment.from_dict({**exp.to_dict(), "grids": grid})
    assert exp.lengths == (EPOCHS, long) and exp.scored(pair[0], "test") == (long,)
    index = make_report(exp_dir, exp, exp_dir / "report")
    text = html.unescape(index.read_text())
    p = Tables()
    p.feed(index.read_text())
    tables = exp_dir / "report" / "tables"
    epochs = pd.read_csv(tables / "epochs.csv")
    assert epochs.groupby("run")["epoch"].max().to_dict() == {r: long if r in pair else EPOCHS for r in RUNS}
    long_table = pd.read_csv(tables / "scores_long.csv")
    test = long_table[long_table["split"] == "test"].groupby("run")["epoch"].unique()
    assert {r: list(v) for r, v in test.items()} == {r: [long if r in pair else EPOCHS] for r in RUNS}
    # budgets: the fit's (its cells' common last epoch, 3) first, then the pair's last epoch
    budgets = pd.read_csv(tables / "budgets.csv")
    assert budgets["budget"].iloc[0] == f"epoch {EPOCHS}" and budgets["budget"].iloc[-1] == f"epoch {long}"
    assert "the last checkpoint of the runs that train this many epochs" in budgets["how"].iloc[-1]
    cells = pd.read_csv(tables / "cells.csv")
    assert set(cells.loc[cells["budget"] == f"epoch {long}", "run"]) == set(pair)
    at_last = cells[(cells["budget"] == f"epoch {EPOCHS}")]
    assert set(at_last.loc[at_last["metric"].str.startswith("valid_"), "run"]) == set(RUNS)
    assert set(at_last.loc[at_last["metric"].str.startswith("test_"), "run"]) == set(RUNS) - set(pair)  # at 5 only
    effects = pd.read_csv(tables / "effects.csv")
    assert f"epoch {EPOCHS}" in set(effects["budget"]) and f"epoch {long}" not in set(effects["budget"])
    assert pd.read_csv(tables / "effects_by_epoch.csv")["epoch"].max() == EPOCHS
    grid_rows = {r[0]: r for r in p.tables["grid-g_long"][1:]}
    assert set(grid_rows) == set(pair) and "best" in (grid_rows[pair[0]][-1], grid_rows[pair[1]][-1])
    assert f"lowest seed-mean validation loss at epoch {long}" in _section(text, "tuned")
    # the Answer: the pair to its common last epoch, the end point each run's own
    assert pd.read_csv(tables / "gap.csv")["epoch"].max() == long
    gap = pd.read_csv(tables / "endpoint_gap.csv").set_index(["pair", "metric"])
    assert gap.loc[("figure4", "valid_loss_base2"), "epoch"] == long
    end = pd.read_csv(tables / "endpoint.csv").set_index(["run", "metric"])["epochs"]
    assert end[(pair[0], "valid_loss_base2")] == end[(pair[1], "valid_loss_base2")] == f"2-{long}"
    convergence = pd.read_csv(tables / "convergence.csv").set_index("run")["epochs"]
    assert convergence[pair[0]] == f"2-{long}" and convergence["preln_warmup_isqrt"] == f"1-{EPOCHS}"
    assert "each pair is compared at the epochs both its runs have" not in _section(text, "answer")  # both end at 5
    assert "train different numbers of epochs (3, 5)" in _section(text, "effects")
    assert "up to epoch 3, the last epoch every run has" in _section(text, "figure4")
    # the per-epoch table: every epoch some run scores, "—" where a run trains fewer epochs
    per_epoch = as_frame(p.tables["bleu-per-epoch"])
    assert list(per_epoch.index) == [str(e) for e in range(1, long + 1)]
    assert per_epoch.loc[str(long), "preln_warmup_isqrt"] == "—" and per_epoch.loc[str(long), pair[0]] != "—"
    test_table = as_frame(p.tables["bleu-per-epoch-test"])
    assert list(test_table.index) == [str(EPOCHS), str(long)] and test_table.loc[str(EPOCHS), pair[0]] == "—"
    kv = dict(map(tuple, p.tables["eval-settings"][1:]))
    assert kv["splits.test.epochs"] == f"{EPOCHS} epochs: [{EPOCHS}]; {long} epochs: [{long}]"


@pytest.mark.usefixtures("drawn")
def test_a_claim_needing_an_unscored_epoch_says_so(tmp_path):
    """valid scored at epochs 1 and 3 only (test at 2 and 3): the Figure 4 epoch-ratio claim needs valid at
    epoch 2 (three quarters of 3), so it is not measured and says why; valid's cells leave out the earlier
    epoch and the CPU-time budget."""
    from lnrepro.analysis.sections.claims import published

    exp_dir, exp = make_tree(tmp_path, scored={"valid": [1, EPOCHS], "test": [2, EPOCHS]})
    make_report(exp_dir, exp, exp_dir / "report")
    claims = pd.read_csv(exp_dir / "report" / "tables" / "claims.csv").set_index("id")
    (ratio,) = [c["id"] for c in published()["claims"] if c["measure"]["kind"] == "epoch_ratio"]
    assert claims.loc[ratio, "status"] == "not measured"
    assert "valid is not scored at epoch 2, which this claim needs (eval.splits.valid.epochs: 1, 3)" in \
        claims.loc[ratio, "note"]
    cells = pd.read_csv(exp_dir / "report" / "tables" / "cells.csv")
    assert set(cells.loc[cells["metric"].str.startswith("valid_"), "budget"]) == {f"epoch {EPOCHS}"}


def test_train_logs_parsed_generically(tmp_path):
    exp_dir, exp = make_tree(tmp_path)
    results = read_results(exp_dir, exp)
    log = ag.train_logs(results)
    c = log.curves[(log.curves["run"] == RUNS[0]) & (log.curves["seed"] == 1)]
    assert c["update"].is_unique and c.loc[c["update"] == 1, "loss"].item() == 99.0  # last attempt wins
    assert c["update"].max() == EPOCHS * 10 - 1 and c["loss"].notna().all()  # no "finished" marker row
    assert set(log.layers["stack"]) == {"enc", "dec"}  # "lrs" (a list) is not a layer
    agg0 = ag.aggregate(results, exp)
    w = agg0.wallclock.set_index(["run", "seed"])
    assert w.loc[("postln_warmup_isqrt", 1), "train_wall_s"] == pytest.approx(3.3)  # summary train_s
    assert w.loc[("preln_warmup_isqrt", 1), "train_wall_s"] == pytest.approx(3.0)
    assert w.loc[("postln_warmup_isqrt", 1), "attempts"] == 2 and w.loc[("preln_warmup_isqrt", 1), "attempts"] == 2
    assert set(w["device"]) == {"Fake CPU"} and set(w["host"]) == {"h"}  # run.json's where_ran
    lay = log.layers
    post = lay[lay["run"] == "postln_warmup_isqrt"]
    assert set(map(tuple, post[["stack", "sublayer"]].drop_duplicates().values)) == {
        ("enc", "self_attn"), ("enc", "ffn"), ("dec", "self_attn"), ("dec", "encoder_attn"), ("dec", "ffn")}
    assert set(post["layer"]) == {1.0, 2.0}  # numbered from 1, as in the figures (the logs' lists are 0-based)
    pre = lay[lay["run"] == "preln_warmup_isqrt"]
    assert set(map(tuple, pre[["stack", "sublayer"]].drop_duplicates().values)) == {
        ("enc", "attn"), ("enc", "ffn"), ("dec", "attn"), ("dec", "ffn")}
    agg = ag.aggregate(results, exp)
    assert agg.early_updates == 10  # the first epoch's updates
    e = agg.layers_early
    v = e[(e["run"] == "postln_warmup_isqrt") & (e["stack"] == "dec") & (e["sublayer"] == "ffn") & (e["layer"] == 2)]
    # updates <= 10; update 1's record is the resumed attempt's, which logged no layer norms
    assert v["grad_norm_mean"].tolist() == [pytest.approx(1 + (3 + 5 + 7 + 9) / 4)] * 2


@pytest.mark.parametrize("key,expected", [
    ("enc.3.attn", ("enc", 3.0, "attn")), ("dec.0.ffn", ("dec", 0.0, "ffn")),
    ("decoder.encoder_attn.5", ("dec", 5.0, "encoder_attn")), ("encoder.layers.2.self_attn", ("enc", 2.0, "self_attn")),
    ("embed", ("other", math.nan, "embed")),
])
def test_parse_layer_key(key, expected):
    got = ag.parse_layer_key(key)
    assert got[0] == expected[0] and got[2] == expected[2]
    assert (math.isnan(got[1]) and math.isnan(expected[1])) or got[1] == expected[1]


def _gradinit_rows(checkpoint: str = "init", depths=(2, 3), seeds=(1, 2, 3)) -> list[dict]:
    """gradinit.csv rows: the FFN matrices of every layer; Post-LN's value is 0.2 (layer + 1) / depth and
    Pre-LN's 0.1 (layer + 1) / depth^1.5, so the last layer's fit gives b = 0 and b = -0.5 exactly."""
    norms = ("post", "pre") if checkpoint == "init" else ("post",)
    return [{"checkpoint": checkpoint, "norm": n, "depth": d, "seed": seed, "stack": s, "layer": i, "sublayer": "ffn",
             "param": w, "statistic": st, "value": (0.2 if n == "post" else 0.1 * d ** -0.5) * (i + 1) / d,
             "noise": 0.01, "d_model": 64, "ffn_dim": 128, "heads": 4, "batches": 2, "max_tokens": 1024,
             "target_tokens": 900, "label_smoothing": 0.0, "dropout": False, "precision": "fp32",
             "run": "postln_warmup_isqrt" if checkpoint != "init" else "", "epoch": 2 if checkpoint != "init" else 0,
             "updates": 40 if checkpoint != "init" else 0}
            for n in norms for d in depths for seed in seeds for s in ("enc", "dec") for i in range(d)
            for w in ("fc1", "fc2") for st in ("expected_grad_fro", "mean_grad_norm")]


def test_report_with_gradinit_and_partial_tree(tmp_path):
    from lnrepro.analysis.stats.gradinit_fit import write_fit

    exp_dir, _ = make_tree(tmp_path)
    # a run folder deleted (not trained yet) must not break the report
    shutil.rmtree(exp_dir / "runs" / "preln_warmup_isqrt")
    experiment = json.loads((exp_dir / "experiment.json").read_text())
    experiment["analysis"]["gradinit"]["depths"] = [2, 3]  # what the tables measure (the report checks them whole)
    experiment["analysis"]["gradinit"]["norms"] = ["post", "pre"]
    (exp_dir / "experiment.json").write_text(json.dumps(experiment))
    gi = pd.DataFrame(_gradinit_rows())
    (exp_dir / "analysis").mkdir()
    gi.to_csv(exp_dir / "analysis" / "gradinit.csv", index=False)
    for seed in SEEDS:  # each seed's table, in its run folder
        pd.DataFrame(_gradinit_rows("after_warmup", (2,), seeds=(seed,))).to_csv(
            exp_dir / "runs" / "postln_warmup_isqrt" / f"seed{seed}" / "gradinit_after_warmup.csv", index=False)
    write_fit(gi, exp_dir / "analysis" / "gradinit_fit.csv")
    # the experiment as the CLI reads it back from experiment.json
    index = make_report(exp_dir, Experiment.read(exp_dir / "experiment.json"), exp_dir / "report")
    assert index == exp_dir / "report" / "index.html"
    p = Tables()
    p.feed(index.read_text())
    t = as_frame(p.tables["bleu-per-epoch"])
    assert set(t["preln_warmup_isqrt"]) == {"missing"}
    figures = exp_dir / "report" / "figures"
    assert (figures / "gradinit_by_layer.png").exists() and (figures / "gradinit_last_layer_vs_depth.png").exists()
    text = index.read_text()
    assert "not computed" not in text
    assert f"Post-LN b = {interval(0, 0, 0)} (theory 0)" in text and "Pre-LN b = −0.50 [−0.50, −0.50]" in text
    assert "seed 1: epoch 2 (40 updates)" in text
    header, *cells = p.tables["gradinit"]  # at the experiment's depth (2): NORMS order, after warm-up, ratio, noise
    assert header == ["stack", "layer", "sublayer", "param", "Post-LN", "Pre-LN", "Post-LN after warm-up",
                      "Post-LN/Pre-LN", "noise (max)"]
    assert [row[:2] for row in cells[:2]] == [["enc", "1"], ["enc", "1"]]  # layers numbered from 1
    assert {row[-2] for row in cells} == {sig(2 * 2 ** 0.5)}
    header, *cells = p.tables["gradinit-by-depth"]
    assert header[:2] == ["depth", "Post-LN"] and [row[0] for row in cells] == ["2", "3"]


# --- the figures, each drawn from fabricated tables (conftest's ``drawn``: the figure is inspected, not the PNG)


def _texts(fig) -> str:
    """Every text of a figure: titles, axis labels, tick labels, legends, free text."""
    return " | ".join(t.get_text() for t in fig.findobj(plots.plt.Text))


def _paper_scale(epochs: int = 20) -> Experiment:
    """The fabricated experiment at the paper's dataset and model size, over ``epochs`` epochs."""
    runs = {}
    for r in RUNS:
        runs[r] = resolved(r)
        runs[r]["model"].update(encoder_layers=6, decoder_layers=6, d_model=512, ffn_dim=1024, heads=4)
        runs[r]["train"]["epochs"] = epochs
    exp = Experiment.from_dict(DEMO)
    return Experiment.from_dict({**exp.to_dict(), "select": RUNS, "runs": runs, "grids": {},
                                 "data": {"dataset": "iwslt14", "options": {}},
                                 "comparisons": {"figure4": {"runs": RUNS[:2], "factor": "norm", "claim": "F4"}}})


def test_figure4_paper_points_only_at_the_papers_scale():
    exp = _paper_scale()
    pair = cl.figure4_runs(exp)
    assert pair == ["postln_warmup_isqrt", "preln_nowarmup_step8"]
    marks, note = cl.paper_marks(exp, pair, "valid")
    assert note == ""
    values = {(m.run, m.metric): (m.epoch, m.value) for m in marks if m.value is not None}
    assert values == {(r, "bleu_tok"): (20, 34.0) for r in pair} | {(r, "loss_base2"): (20, 4.0) for r in pair}
    # Pre-LN's 9th checkpoint about as good as Post-LN's 15th (of 20 epochs)
    assert {(m.run, m.epoch) for m in marks if m.value is None} == {(pair[1], 9.0), (pair[0], 15)}
    assert cl.paper_marks(exp, pair, "test") == ([], "")  # published for the validation split only
    demo = Experiment.from_dict({**exp.to_dict(), "data": DEMO["data"]})
    marks, note = cl.paper_marks(demo, pair, "valid")
    assert marks == [] and note.startswith("paper's points not shown: synthetic, 6+6 layers")


def test_plot_figure4_marks_and_note(report, drawn):
    exp_dir, exp, _, _ = report
    run_epochs = pd.read_csv(exp_dir / "report" / "tables" / "run_epochs.csv")
    pair = cl.figure4_runs(exp)
    marks, _ = cl.paper_marks(_paper_scale(EPOCHS), pair, "valid")
    plots.plot_figure4(run_epochs, pair, "valid", Path("f4.png"), marks=marks)
    plots.plot_figure4(run_epochs, pair, "valid", Path("f4.png"), note="paper's points not shown: X differs")
    plots.plot_figure4(run_epochs, [], "valid", Path("f4.png"))
    with_marks, with_note, no_pair = map(_texts, drawn)
    assert "validation loss (bits per target token)" in with_marks and "validation BLEU (tokenized, 0-100)" in with_marks
    assert "epoch (checkpoint)" in with_marks and "preln_nowarmup_step8 (diverged 1/2 seeds)" in with_marks
    assert "paper, Post-LN: about 34 at the end" in with_marks and "paper, Pre-LN: about 4 at the end" in with_marks
    assert "checkpoint 1.2 as good as Post-LN's 2" in with_marks  # 0.6 x round(0.75 x 3)
    assert "paper's points not shown: X differs" in with_note and "paper," not in with_note
    assert "no Figure 4 pair" in no_pair and "no scored checkpoints yet" in no_pair


def test_plot_figure4_time_axes(report, drawn):
    exp_dir, exp, _, _ = report
    run_epochs = pd.read_csv(exp_dir / "report" / "tables" / "run_epochs.csv")
    plots.plot_figure4_time(run_epochs, cl.figure4_runs(exp), "valid", Path("t.png"))
    (fig,) = drawn
    assert [ax.get_xlabel() for ax in fig.axes] == ["updates (optimizer steps)",
                                                     "training CPU time (s, summed over attempts)"] * 2
    post = fig.axes[0].lines[0]  # Post-LN's loss against its seed-mean updates: 10 per epoch
    assert list(post.get_xdata()) == [10, 20, 30]
    assert "postln_warmup_isqrt" in _texts(fig)


def test_learning_rates_from_train_jsonl(tmp_path, drawn):
    exp_dir, exp = make_tree(tmp_path)
    rd = exp_dir / "runs" / RUNS[0] / "seed1"
    # attempt 1 logs updates 1-4 in two records, is killed; attempt 2 resumes after update 2 and redoes 3-4
    recs = [{"kind": "step", "attempt": 1, "update": 2, "lrs": [0.0, 1.0]},
            {"kind": "step", "attempt": 1, "update": 4, "lrs": [2.0, 3.0]},
            {"kind": "attempt", "attempt": 2, "resumed_update": 2},
            {"kind": "step", "attempt": 2, "update": 4, "lrs": [2.5, 3.5]}]
    (rd / "train.jsonl").write_text("\n".join(map(json.dumps, recs)) + "\n")
    (rd / "summary.json").unlink()  # a log of 4 updates: not the summary's (the report checks the two agree)
    lrs = ag.learning_rates(read_results(exp_dir, exp))
    mine = lrs[(lrs["run"] == RUNS[0]) & (lrs["seed"] == 1)]
    assert mine[["update", "lr"]].values.tolist() == [[1, 0.0], [2, 1.0], [3, 2.5], [4, 3.5]]
    assert set(lrs["run"]) == {r for r in RUNS if r.startswith("post")}  # the others log no lrs
    plots.plot_learning_rates(lrs, Path("lr.png"), experiment=exp)
    plots.plot_learning_rates(lrs.iloc[0:0], Path("lr.png"))
    full, empty = drawn
    # faceted by schedule (no panel overplots runs with repeated colours), log scale
    titles = [ax.get_title() for ax in full.axes]
    want = list(dict.fromkeys(plots._schedule_panel(exp, r) for r in dict.fromkeys(lrs["run"])))
    assert titles == want and len(titles) > 1
    assert all(ax.get_yscale() == "log" for ax in full.axes) and "update (optimizer step)" in _texts(full)
    assert sum(len(ax.lines) for ax in full.axes) == len(set(map(tuple, lrs[["run", "seed"]].values)))
    assert _texts(full).count("postln_warmup_isqrt") == 1  # one legend entry per run
    colours = [ax.lines[0].get_color() for ax in full.axes]
    assert len(set(map(str, colours))) == len(colours)
    assert "no learning rates logged" in _texts(empty)


def _factorial_tables() -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Observations, cells and design of the full 2x2x2 design, two seeds, the no-warm-up Post-LN cells diverged."""
    from lnrepro.analysis.stats import budget as bu
    from lnrepro.analysis.stats.effects import FACTORS

    design = pd.DataFrame([{"run": f"c{n}{w}{d}", "norm": n, "warmup": w, "decay": d}
                           for n in (-1, 1) for w in (-1, 1) for d in (-1, 1)])
    rows = []
    for cell in design.itertuples():
        failed = cell.norm < 0 and cell.warmup < 0
        for seed in (1, 2):
            for metric, value in (("valid_loss_base2", 4 - cell.norm), ("valid_bleu_tok", 30 + 2 * cell.norm + seed)):
                rows.append({"run": cell.run, "seed": seed, "budget": "epoch 3", "metric": metric,
                             "value": math.nan if failed else value, "outcome": "diverged" if failed else "ok"})
    obs = pd.DataFrame(rows)
    assert list(design.columns[1:]) == list(FACTORS)
    return obs, bu.cell_table(obs, design["run"].tolist()), design


def test_plot_cells_effects_interaction(drawn):
    from lnrepro.analysis.stats import effects as ef

    obs, cells, design = _factorial_tables()
    effects = ef.effects_table(ef.fits(obs, design))
    plots.plot_cells(obs, cells, design, "epoch 3", "valid", Path("c.png"))
    plots.plot_effects(effects, "epoch 3", "valid", Path("e.png"))
    plots.plot_interaction(cells, design, "epoch 3", "valid", Path("i.png"))
    cells_fig, effects_fig, interaction_fig = drawn
    text = _texts(cells_fig)
    assert "Post-LN\nno warm-up\nisqrt" in text and text.count("2 left out") == 4  # both metrics, two cells
    assert "cell mean, 95% t interval" in text and "validation loss (bits per target token)" in text
    bleu = cells_fig.axes[1]
    assert sum(len(c.get_offsets()) for c in bleu.collections if hasattr(c, "get_offsets")) >= 12  # 6 cells x 2
    text = _texts(effects_fig)
    assert "norm: pre minus post" in text and "warm-up: on minus off" in text and "norm x warm-up x decay" in text
    assert "effect on validation BLEU (BLEU points)" in text
    assert "not identified by the cells with data" in text  # six cells identify six of the seven terms
    text = _texts(interaction_fig)
    assert "warm-up off" in text and "isqrt decay" in text and "step decay" in text and "Pre-LN" in text
    # Post-LN without warm-up diverged: its line has only the warm-up point in each panel
    post_lines = [ln for ax in interaction_fig.axes for ln in ax.lines if ln.get_label() == "Post-LN"]
    assert [len(ln.get_xdata()) for ln in post_lines] == [1] * 4


def test_plot_failures(report, drawn):
    exp_dir, _, _, _ = report
    failures = pd.read_csv(exp_dir / "report" / "tables" / "failures.csv")
    plots.plot_failures(failures, Path("f.png"))
    plots.plot_failures(failures.iloc[0:0], Path("f.png"))
    fig, empty = drawn
    text = _texts(fig)
    assert "diverged" in text and "did not train (far from the best run)" in text
    assert "2/2 failed" in text and "1/2 failed" in text and "no seed finished" in text  # unevaluated last epoch
    diverged = [p.get_width() for p in fig.axes[0].patches[:len(failures)]]
    assert diverged == [0.0, 50.0, 100.0, 0.0]  # RUNS order: postln_nowarmup_isqrt all, preln_nowarmup_step8 half
    assert "no run selected" in _texts(empty)


def test_plot_effects_by_epoch(report, drawn):
    """Every main effect with its simple effects, a panel per factor and metric, the interactions in their own
    column; no panel has more than six lines, each line with its own colour and style."""
    exp_dir, _, _, _ = report
    by_epoch = pd.read_csv(exp_dir / "report" / "tables" / "effects_by_epoch.csv")
    plots.plot_effects_by_epoch(by_epoch, "valid", Path("e.png"))
    (fig,) = drawn
    assert [ax.get_title() for ax in fig.axes[:4]] == ["norm", "warm-up", "decay", "interactions"]
    for ax in fig.axes:
        lines = [ln for ln in ax.lines if not ln.get_label().startswith("_")]
        assert len(lines) <= 6
        assert len({(str(ln.get_color()), str(ln.get_linestyle())) for ln in lines}) == len(lines)


def test_equal_work_on_two_clocks(report):
    """Seeds of one run do the same work: the report shows how far their wall-clock and CPU time per update
    spread (cost_spread.csv and a sentence in the Wall-clock section), and compares equal cost in CPU time."""
    exp_dir, _, index, _ = report
    spread = pd.read_csv(exp_dir / "report" / "tables" / "cost_spread.csv").set_index("run")
    r = spread.loc["postln_warmup_isqrt"]  # the fixture's CPU-seconds per update: 0.09 (seed 1), 0.10 (seed 2)
    assert r["n_seeds"] == 2 and (r["cpu_s_per_update_min"], r["cpu_s_per_update_max"]) == pytest.approx((0.09, 0.10))
    assert r["cpu_spread"] == pytest.approx(0.10 / 0.09 - 1, abs=1e-5) and r["wall_spread"] == pytest.approx(0.0)
    text = html.unescape(_section(index.read_text(), "wallclock"))
    assert "in CPU-seconds per update by up to 11%" in text and "cost_spread.csv" in text
    budgets = pd.read_csv(exp_dir / "report" / "tables" / "budgets.csv").set_index("budget")
    (cpu,) = [b for b in budgets.index if b.startswith("training CPU")]
    assert "CPU-seconds of training" in budgets.loc[cpu, "how"] and budgets.loc[cpu, "cpu_s"] > 0


# A decimal number in the page's text (a run name's digits or a setting such as 2.0e-3 is part of a word); whole
# numbers are exact counts (epochs, updates, seeds) and are written whole.
DECIMAL = re.compile(r"(?<![\w.\-])[-−+]?(\d+\.\d+)(?![\w.])")


def significant_digits(number: str) -> int:
    """Significant digits of a written decimal: its digits without leading zeros ("0.0250" has 3)."""
    return len(number.replace(".", "").lstrip("0"))


def test_significant_digits_of_a_written_number():
    assert [significant_digits(x) for x in ("0.0250", "13.75", "0.5", "100.0")] == [3, 4, 1, 4]


def test_no_number_outside_the_appendix_has_more_than_four_significant_digits(report):
    """The page writes numbers as a reader does (lnrepro.analysis.numbers); the appendix holds the full tables."""
    exp_dir, _, index, _ = report
    text = index.read_text(encoding="utf-8")
    assert '<section class="appendix">' in text
    main = re.sub(r"<style>.*?</style>", "", text.split('<section class="appendix">', 1)[0], flags=re.S)
    plain = html.unescape(re.sub(r"<[^>]+>", " ", main))
    numbers = [m.group(0) for m in DECIMAL.finditer(plain)]
    assert numbers  # the check reads the page's numbers
    assert [x for x in numbers if significant_digits(x.lstrip("-−+")) > 4] == []
    # the CSVs keep full precision
    cells = pd.read_csv(exp_dir / "report" / "tables" / "cells.csv")
    assert any(significant_digits(f"{v!r}") > 4 for v in cells["mean"].dropna())


def test_tables_name_runs_and_metrics_in_words(report):
    """A run or a metric in a table is named as a reader would; the identifier stays in the tooltip."""
    _, _, index, _ = report
    text = index.read_text(encoding="utf-8")
    assert '<th title="postln_warmup_isqrt">Post-LN, warm-up, inverse-sqrt decay</th>' in text
    assert '<th title="preln_nowarmup_step8">Pre-LN, no warm-up, step decay</th>' in text
    assert '<td title="valid_bleu_tok">validation BLEU</td>' in text
    assert '<td title="valid_loss_base2">validation loss (bits)</td>' in text


def _depth(sentence: str) -> int:
    """How deep the sentence's parentheses nest."""
    deepest = depth = 0
    for c in sentence:
        depth += (c == "(") - (c == ")")
        deepest = max(deepest, depth)
    return deepest


INTERVAL = re.compile(r"interval [^,;()]*? to |\[[^\]]+, [^\]]+\]")  # "interval a to b" or "a [lo, hi]"


def test_sentences_outside_the_appendix_read_aloud(report):
    """Each question's finding and list: no parentheses inside parentheses, at most one interval a sentence."""
    _, _, index, _ = report
    main = index.read_text(encoding="utf-8").split('<section class="appendix">', 1)[0]
    texts = [html.unescape(re.sub(r"<[^>]+>", "", x)) for pair in
             re.findall(r'<li>(.*?)</li>|<p class="finding">(.*?)</p>', main, re.S) for x in pair if x]
    sentences = [s for text in texts for s in re.split(r"(?<=[.:;])\s+(?=[A-Z])", text)]
    assert len(sentences) > 10
    assert [s for s in sentences if _depth(s) > 1] == []
    assert [s for s in sentences if len(INTERVAL.findall(s)) > 1] == []


def test_figures_name_runs_in_words(report, drawn):
    """Given the experiment, a figure's legend names each run as the tables do (``views.names``); the identifier
    only without an experiment."""
    from lnrepro.analysis.render.views import names

    exp_dir, exp, _, _ = report
    run_epochs = pd.read_csv(exp_dir / "report" / "tables" / "run_epochs.csv")
    pair = cl.figure4_runs(exp)
    plots.plot_figure4(run_epochs, pair, "valid", Path("f4.png"), styles=plots.run_styles(list(exp.select), exp))
    (fig,) = drawn
    words = names(exp)
    assert words["postln_warmup_isqrt"] in _texts(fig) and "postln_warmup_isqrt" not in _texts(fig)


def test_the_answer_figure_leaves_out_a_split_it_cannot_draw(tmp_path, drawn):
    """Without a cell between Figure 4's arms, the Answer's figure is the time-to-quality row alone (no empty
    panel), and its title says in one line why the split is not drawn."""
    import dataclasses

    exp_dir, exp = make_tree(tmp_path)
    data = build(read_results(exp_dir, exp), exp)
    a = dataclasses.replace(data.answer, decomposition=data.answer.decomposition.iloc[0:0])
    plots.plot_answer(dataclasses.replace(data, answer=a), Path("a.png"))
    (fig,) = drawn
    assert len(fig.axes) == 2 and "No split of their gap" in fig._suptitle.get_text()
