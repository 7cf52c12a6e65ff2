"""Confound detection on hand-made run sets whose verdicts are known (no results tree needed, except for
``execution_facts``)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from lnrepro import config
from lnrepro.analysis.aggregate import execution_facts
from lnrepro.analysis.results import read_results
from lnrepro.analysis.sections.confounds import (
    analyze_confounds,
    confounds_markdown,
    confounds_rows,
    differing_keys,
    flatten,
    variant_differences,
    variant_sentence,
    write_confounds,
)
from lnrepro.errors import LnReproError
from lnrepro.norms import NORMS, Difference, NormVariant, register_norm
from lnrepro.records import EpochManifest, RunSummary

REPO = Path(__file__).resolve().parents[1]

BASE = {
    "model": {"encoder_layers": 2, "decoder_layers": 2, "d_model": 16, "heads": 2, "ffn_dim": 32,
              "dropout": 0.1, "norm": "post"},
    "optim": {"lr_max": 5e-4, "betas": [0.9, 0.98], "label_smoothing": 0.1},
    "schedule": {"warmup": True, "decay": "isqrt", "warmup_updates": 4000, "anchor_updates": 4000,
                 "decay_epochs": [8], "decay_factor": 0.1},
    "train": {"epochs": 20, "max_tokens": 4096, "precision": "fp32", "max_updates": 0},
}
# The factorial's cells, named as in config.yaml.
CELLS = {f"{n}ln_{'warmup' if w else 'nowarmup'}_{'isqrt' if d == 'isqrt' else 'step8'}": (n, w, d)
         for n in ("post", "pre") for w in (True, False) for d in ("isqrt", "step")}
# config.yaml's comparisons: figure4 and the 12 single-factor ones (their runs and factors), and those of RAdam.
COMPARISONS = yaml.safe_load((REPO / "config.yaml").read_text())["comparisons"]
RADAM_COMPARISONS = {k: v for k, v in COMPARISONS.items() if any("radam" in r for r in v["runs"])}
# the variants' warm-up comparisons (config.yaml's {variant}_{warmup}_isqrt runs, not selected by default)
VARIANT_COMPARISONS = {k: v for k, v in COMPARISONS.items()
                       if k not in RADAM_COMPARISONS and any(not r.startswith(("postln_", "preln_")) for r in v["runs"])}
FACTORIAL = {k: v for k, v in COMPARISONS.items() if k not in RADAM_COMPARISONS and k not in VARIANT_COMPARISONS}
FACTS = {"seeds": [1, 2, 3], "device": "NVIDIA H200", "precision": "fp32", "torch": "2.4.0", "threads": "4"}


def cell(name: str, *, inert_differ: bool = True) -> dict:
    """A resolved config of one cell. With ``inert_differ``, every setting the cell's schedule does not read
    takes another value than in the cells that read it (as a config.json that drops unused settings would
    differ): such differences must never count."""
    norm, warmup, decay = CELLS[name]
    cfg = copy.deepcopy(BASE)
    cfg["model"]["norm"] = norm
    cfg["schedule"].update(warmup=warmup, decay=decay)
    if inert_differ:
        if not warmup:
            cfg["schedule"]["warmup_updates"] = 1
        if decay != "step":
            cfg["schedule"].update(decay_epochs=[], decay_factor=1.0)
        if decay != "isqrt":
            cfg["schedule"]["anchor_updates"] = 1
    return cfg


# The demo's typed experiment: the sections a hand-made run leaves out come from its first run.
DEMO = config.experiment(config.load_config([REPO / "config.yaml", REPO / "presets" / "demo.yaml"]))


def experiment(comparisons: dict | None = None, runs: dict | None = None, select: list[str] | None = None,
               seeds: list[int] | None = None) -> config.Experiment:
    """The typed experiment of the eight cells (plus ``runs``), all selected unless ``select`` says; each run's
    settings not named here are the demo's (equal in every run)."""
    all_runs = {**{r: cell(r) for r in CELLS}, **(runs or {})}
    base = DEMO.runs[DEMO.select[0]].to_dict()
    return config.Experiment.from_dict({
        **DEMO.to_dict(), "name": "fake", "select": list(all_runs) if select is None else select,
        "seeds": seeds or [1, 2, 3], "runs": {r: config.deep_merge(base, c) for r, c in all_runs.items()},
        "comparisons": FACTORIAL if comparisons is None else comparisons, "grids": {}})


def execution(exp: config.Experiment, **changes: dict) -> dict:
    """Every run ran alike (FACTS), except the facts ``changes`` gives per run."""
    return {r: {**FACTS, **changes.get(r, {})} for r in exp.runs}


def verdicts(result: dict) -> dict[str, tuple]:
    """name -> (verdict, confounds, execution_confounds, notes)."""
    return {c["name"]: (c["verdict"], c["confounds"], c["execution_confounds"], c["notes"])
            for c in result["comparisons"]}


CONTROLLED = ("controlled", [], [], [])
# The factorial as config.yaml compares it, every run alike: written out by hand.
FACTORIAL_EXPECTED = {
    "figure4": ("confounded", ["schedule.decay", "schedule.warmup"], [], []),
    "norm_warmup_isqrt": CONTROLLED, "norm_warmup_step8": CONTROLLED,
    "norm_nowarmup_isqrt": CONTROLLED, "norm_nowarmup_step8": CONTROLLED,
    "warmup_postln_isqrt": CONTROLLED, "warmup_postln_step8": CONTROLLED,
    "warmup_preln_isqrt": CONTROLLED, "warmup_preln_step8": CONTROLLED,
    "decay_postln_warmup": CONTROLLED, "decay_postln_nowarmup": CONTROLLED,
    "decay_preln_warmup": CONTROLLED, "decay_preln_nowarmup": CONTROLLED,
}


def test_factorial_of_config_yaml():
    """12 single-factor comparisons controlled; figure4 confounded by warm-up and decay only: the decay epochs,
    factor, anchor and warm-up length differ too, but each is inert in one of the two runs."""
    exp = experiment()
    assert verdicts(analyze_confounds(exp, execution(exp))) == FACTORIAL_EXPECTED
    f4 = (flatten(exp.runs["postln_warmup_isqrt"].to_dict()), flatten(exp.runs["preln_nowarmup_step8"].to_dict()))
    assert {k for k in f4[0] if f4[0][k] != f4[1][k]} == {  # what differs before the inert keys are left out
        "model.norm", "schedule.warmup", "schedule.decay", "schedule.warmup_updates", "schedule.anchor_updates",
        "schedule.decay_epochs", "schedule.decay_factor"}


def test_figure4_sentence_names_the_separating_comparisons():
    exp = experiment()
    c = {c["name"]: c for c in analyze_confounds(exp, execution(exp))["comparisons"]}
    assert c["figure4"]["sentence"] == (
        "figure4 is confounded by schedule.decay and schedule.warmup, which differ between postln_warmup_isqrt and "
        "preln_nowarmup_step8 as well as model.norm; the controlled comparisons that separate them vary model.norm "
        "alone (norm_warmup_isqrt, norm_warmup_step8, norm_nowarmup_isqrt, norm_nowarmup_step8), schedule.decay "
        "alone (decay_postln_warmup, decay_postln_nowarmup, decay_preln_warmup, decay_preln_nowarmup) and "
        "schedule.warmup alone (warmup_postln_isqrt, warmup_postln_step8, warmup_preln_isqrt, warmup_preln_step8).")
    assert c["norm_warmup_isqrt"]["sentence"] == (
        "norm_warmup_isqrt is controlled: only model.norm differs between postln_warmup_isqrt and preln_warmup_isqrt.")
    assert c["figure4"]["factor_values"] == {"postln_warmup_isqrt": "post", "preln_nowarmup_step8": "pre"}
    assert c["figure4"]["confound_values"]["schedule.warmup"] == {"postln_warmup_isqrt": True,
                                                                  "preln_nowarmup_step8": False}


def test_sentence_when_a_separating_comparison_is_not_selected():
    exp = experiment(comparisons={k: FACTORIAL[k] for k in ("figure4", "norm_warmup_isqrt")})
    s = analyze_confounds(exp, execution(exp))["comparisons"][0]["sentence"]
    assert s.endswith("vary model.norm alone (norm_warmup_isqrt), schedule.decay alone (none selected) and "
                      "schedule.warmup alone (none selected).")


# Each case: execution changes (run -> facts), extra runs, comparisons, and the verdicts written by hand.
PAIR = {"runs": ["postln_warmup_isqrt", "preln_warmup_isqrt"], "factor": "norm", "claim": ""}
BF16 = cell("preln_warmup_isqrt")
BF16["train"]["precision"] = "bf16"
LR_SMALL = copy.deepcopy(BASE)
LR_SMALL["optim"]["lr_max"] = 1e-4
LR_SMALL_NOWARM = copy.deepcopy(LR_SMALL)
LR_SMALL_NOWARM["schedule"].update(warmup=False, warmup_updates=1)
ISQRT_EPOCHS = copy.deepcopy(BASE)  # isqrt: decay_epochs inert
ISQRT_EPOCHS["schedule"]["decay_epochs"] = [3]
STEP = cell("postln_warmup_step8")
STEP_EPOCHS = copy.deepcopy(STEP)
STEP_EPOCHS["schedule"]["decay_epochs"] = [3]
NOWARM_LONG = cell("preln_nowarmup_isqrt")  # warm-up off: warmup_updates inert
NOWARM_LONG["schedule"]["warmup_updates"] = 8000
CASES = {
    "unequal seed sets": (
        {"preln_warmup_isqrt": {"seeds": [1, 2]}}, {}, {"pair": PAIR},
        {"pair": ("confounded", [], ["seeds"], [])}),
    "different devices": (
        {"preln_warmup_isqrt": {"device": "Intel Xeon"}}, {}, {"pair": PAIR},
        {"pair": ("confounded", [], ["device"], [])}),
    "different torch versions": (
        {"preln_warmup_isqrt": {"torch": "2.5.1"}}, {}, {"pair": PAIR},
        {"pair": ("confounded", [], ["torch"], [])}),
    "different thread counts": (
        {"preln_warmup_isqrt": {"threads": "8"}}, {}, {"pair": PAIR},
        {"pair": ("confounded", [], ["threads"], [])}),
    "unknown fact is no difference": (
        {"preln_warmup_isqrt": {"torch": ""}}, {}, {"pair": PAIR},
        {"pair": CONTROLLED}),
    "device and seeds at once": (
        {"preln_warmup_isqrt": {"device": "Intel Xeon", "seeds": [1]}}, {}, {"pair": PAIR},
        {"pair": ("confounded", [], ["seeds", "device"], ["no spread: one seed"])}),
    "precision as config key and fact (listed once)": (
        {"bf16": {"precision": "bf16"}}, {"bf16": BF16},
        {"p": {"runs": ["postln_warmup_isqrt", "bf16"], "factor": "norm", "claim": ""},
         "p_factor": {"runs": ["preln_warmup_isqrt", "bf16"], "factor": "train.precision", "claim": ""}},
        {"p": ("confounded", ["train.precision"], [], []), "p_factor": CONTROLLED}),
    "precision as fact only": (
        {"preln_warmup_isqrt": {"precision": "bf16"}}, {}, {"pair": PAIR},
        {"pair": ("confounded", [], ["precision"], [])}),
    "one seed (a note)": (
        {r: {"seeds": [1]} for r in CELLS}, {}, {"pair": PAIR},
        {"pair": ("controlled", [], [], ["no spread: one seed"])}),
    "no seed trained yet": (
        {r: {"seeds": []} for r in CELLS}, {}, {"pair": PAIR},
        {"pair": ("controlled", [], [], ["no seed trained yet"])}),
    "factor does not vary": (
        {}, {}, {"bad": {**PAIR, "factor": "warmup"}},
        {"bad": ("factor does not vary", ["model.norm"], [], [])}),
    "unselected run (skipped)": (
        {}, {"extra": BASE}, {"s": {"runs": ["postln_warmup_isqrt", "extra"], "factor": "norm", "claim": ""}},
        {"s": ("skipped", [], [], [])}),
    "dotted-key factor": (
        {}, {"lr_small": LR_SMALL, "lr_small_nowarm": LR_SMALL_NOWARM},
        {"lr": {"runs": ["postln_warmup_isqrt", "lr_small"], "factor": "optim.lr_max", "claim": ""},
         "lr_warm": {"runs": ["postln_warmup_isqrt", "lr_small_nowarm"], "factor": "optim.lr_max", "claim": ""}},
        {"lr": CONTROLLED, "lr_warm": ("confounded", ["schedule.warmup"], [], [])}),
    "isqrt runs differing only in decay_epochs": (
        {}, {"isqrt_epochs": ISQRT_EPOCHS},
        {"decay": {"runs": ["postln_warmup_isqrt", "isqrt_epochs"], "factor": "decay", "claim": ""},
         "epochs": {"runs": ["postln_warmup_isqrt", "isqrt_epochs"], "factor": "schedule.decay_epochs", "claim": ""},
         "norm": {"runs": ["preln_warmup_isqrt", "isqrt_epochs"], "factor": "norm", "claim": ""}},
        {"decay": ("factor does not vary", [], [], []), "epochs": ("factor does not vary", [], [], []),
         "norm": CONTROLLED}),
    "step runs differing in decay_epochs": (
        {}, {"step": STEP, "step_epochs": STEP_EPOCHS},
        {"epochs": {"runs": ["step", "step_epochs"], "factor": "schedule.decay_epochs", "claim": ""}},
        {"epochs": CONTROLLED}),
    "warm-up off in both, warmup_updates differ": (
        {}, {"nowarm_long": NOWARM_LONG},
        {"norm": {"runs": ["postln_nowarmup_isqrt", "nowarm_long"], "factor": "norm", "claim": ""}},
        {"norm": CONTROLLED}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_known_verdicts(case):
    facts, runs, comparisons, expected = CASES[case]
    exp = experiment(comparisons, runs, select=[*CELLS, *(r for r in runs if r != "extra")])
    assert verdicts(analyze_confounds(exp, execution(exp, **facts))) == expected


def test_reasons_and_sentences_of_the_other_verdicts():
    exp = experiment({"bad": {**PAIR, "factor": "warmup"},
                      "s": {"runs": ["postln_warmup_isqrt", "extra"], "factor": "norm", "claim": ""},
                      "dev": FACTORIAL["norm_warmup_step8"]}, {"extra": BASE}, select=list(CELLS))
    result = analyze_confounds(exp, execution(exp, preln_warmup_step8={"device": "Intel Xeon"}))
    c = {c["name"]: c for c in result["comparisons"]}
    assert c["s"]["reason"] == "runs not selected: extra" and result["skipped"] == ["s"]
    assert c["s"]["sentence"] == "s is skipped: runs not selected: extra."
    assert c["bad"]["sentence"] == ("bad cannot test its claim: schedule.warmup has the same value, True, in "
                                    "postln_warmup_isqrt and preln_warmup_isqrt, while model.norm differs.")
    assert c["dev"]["sentence"] == ("dev is confounded by the device, which differs between postln_warmup_step8 and "
                                    "preln_warmup_step8 as well as model.norm.")
    assert c["dev"]["execution_values"] == {"device": {"postln_warmup_step8": "NVIDIA H200",
                                                       "preln_warmup_step8": "Intel Xeon"}}


def test_without_execution_facts():
    """Nothing known of where runs ran: no execution confounds; the experiment's seeds give the notes."""
    assert verdicts(analyze_confounds(experiment())) == FACTORIAL_EXPECTED
    one = verdicts(analyze_confounds(experiment({"pair": PAIR}, seeds=[1])))
    assert one == {"pair": ("controlled", [], [], ["no spread: one seed"])}


def test_flatten_and_differing_keys():
    a = {"model": {"norm": "post"}, "schedule": {"decay_epochs": [8]}, "run": "a"}
    b = {"model": {"norm": "pre"}, "schedule": {"decay_epochs": [8]}, "run": "b"}
    assert flatten(a) == {"model.norm": "post", "schedule.decay_epochs": [8], "run": "a"}
    assert differing_keys([a, b]) == ["model.norm"]  # identity key "run" ignored, equal lists equal
    c = {"model": {"norm": "post", "heads": 4}}
    assert differing_keys([a, c]) == ["model.heads", "schedule.decay_epochs"]  # absent counts as different


def test_bad_comparison_raises():
    exp = experiment({"x": {**PAIR, "factor": "colour"}})
    with pytest.raises(LnReproError, match="colour"):
        analyze_confounds(exp)


def test_markdown_states_keys_facts_and_time(tmp_path):
    exp = experiment({"figure4": FACTORIAL["figure4"], "pair": PAIR})
    facts = execution(exp, preln_warmup_isqrt={"torch": "2.5.1"})
    out = tmp_path / "report" / "confounds.md"
    result = analyze_confounds(exp, facts)
    write_confounds(result, out)
    md = out.read_text()
    assert md == confounds_markdown(result)
    assert md.splitlines()[4].split(" | ")[4:10] == [
        "variant differences", "verdict", "also differs (confounds)", "execution confounds", "values", "notes"]
    row = next(line for line in md.splitlines() if line.startswith("| pair |"))
    assert "| confounded |  | torch | torch (postln_warmup_isqrt='2.4.0'; preln_warmup_isqrt='2.5.1') |" in row
    assert f"- {result['comparisons'][0]['sentence']}" in md
    assert "not comparing time" in md


def test_execution_facts_from_the_results_tree(tmp_path):
    """Seeds with a summary.json count as trained (diverged too); run.json gives the rest."""
    exp = config.Experiment.from_dict({
        **config.experiment(config.load_config([REPO / "config.yaml", REPO / "presets" / "demo.yaml"])).to_dict(),
        "seeds": [1, 2, 3]})
    a, b = exp.select[:2]
    ran = {(a, 1): {"device_name": "NVIDIA H200", "device": "cuda", "torch_version": "2.4.0", "threads": 4,
                    "precision": "fp32"},
           (a, 2): {"device_name": "NVIDIA A100", "device": "cuda", "torch_version": "2.4.0", "threads": 4,
                    "precision": "fp32"},
           (b, 1): {"device": "cpu", "threads": 2, "precision": "bf16"}}  # an older run.json: no name, no torch
    for (run, seed), rj in ran.items():
        rd = tmp_path / "runs" / run / f"seed{seed}"
        (rd / "epochs").mkdir(parents=True)
        digest = exp.run_config(run, seed).sha256()
        (rd / "run.json").write_text(json.dumps({"run": run, "seed": seed, "config_sha256": digest, **rj}))
        for ep in range(1, 4):  # three updates: epoch 1's are the last (diverged at update 4, or stopped there)
            EpochManifest.from_dict({
                "epoch": ep, "status": "diverged" if seed == 2 else "stopped", "weights": None, "sha256": None,
                "updates": 3, "wall_s": 1.0, "partial": False, "run": run, "seed": seed, "config_sha256": digest,
                "where_ran": {}}).write(rd / "epochs" / f"epoch{ep:03d}.json")
        (rd / "train.jsonl").write_text(json.dumps({"kind": "finished", "update": 3}) + "\n")
        RunSummary.from_dict({
            "run": run, "seed": seed, "status": "diverged" if seed == 2 else "completed", "final_loss": None,
            "final_nll": None, "final_loss_update": None, "updates": 3, "epochs_completed": 0, "epochs": 3,
            "diverged": {"update": 3, "epoch": 1, "detail": "non-finite loss", "loss": None, "lr": 0.1}
            if seed == 2 else None, "train_s": 1.0, "wall_s_all_attempts": 1.0, "attempts": 1,
            "target_tokens_per_epoch": 10, "target_tokens_trained": 3, "tokens_per_s": None,
            "where_ran": {"host": "h", "device": "cpu", "slurm_job_id": None}}).write(rd / "summary.json")
    (tmp_path / "runs" / b / "seed3").mkdir(parents=True)  # started, not finished: not trained
    facts = execution_facts(read_results(tmp_path, exp), exp)
    no_hosts = {"train_hosts": [], "score_hosts": []}  # run.json without a host (an older lnrepro's)
    assert facts[a] == {"seeds": [1, 2], "device": "NVIDIA A100, NVIDIA H200", "precision": "fp32",
                        "torch": "2.4.0", "threads": "4", **no_hosts}
    assert facts[b] == {"seeds": [1], "device": "cpu", "precision": "bf16", "torch": "", "threads": "2", **no_hosts}
    assert all(facts[r] == {"seeds": [], "device": "", "precision": "", "torch": "", "threads": "", **no_hosts}
               for r in exp.select[2:])


def test_experiment_read_back_from_its_json(tmp_path):
    """The report reads the typed experiment from experiment.json: it gives the verdicts the loaded config gives
    (the file lists the comparisons sorted by name)."""
    exp = config.experiment(config.load_config([REPO / "config.yaml", REPO / "presets" / "demo.yaml"]))
    exp.write(tmp_path / "experiment.json")
    result = analyze_confounds(exp)
    assert verdicts(result) == verdicts(analyze_confounds(config.Experiment.read(tmp_path / "experiment.json")))
    f4 = next(c for c in result["comparisons"] if c["name"] == "figure4")
    # decay_epochs differs too, but the isqrt run does not read it
    assert f4["confounds"] == ["schedule.decay", "schedule.warmup"]


def test_config_yamls_radam_comparisons_are_skipped_until_their_runs_are_selected():
    exp = experiment(COMPARISONS)
    v = verdicts(analyze_confounds(exp, execution(exp)))
    assert v == {**FACTORIAL_EXPECTED, **{k: ("skipped", [], [], []) for k in {**RADAM_COMPARISONS, **VARIANT_COMPARISONS}}}
    assert set(VARIANT_COMPARISONS) == {f"warmup_{v}_isqrt" for v in ("prenofinal", "deepnorm", "admin", "rezero",
                                                                       "tfixup", "resi_dual", "b2t", "sandwich", "dyt")}
    assert set(RADAM_COMPARISONS) == {"optimizer_postln_nowarmup_isqrt", "optimizer_preln_nowarmup_step8",
                                      "radam_replaces_warmup_postln"}


def radam(name: str) -> dict:
    """A cell of the factorial with RAdam in place of Adam (config.yaml's {norm}ln_radam_{warmup}_{decay})."""
    c = cell(name)
    c["optim"]["name"] = "radam"
    return c


RADAM_RUNS = {"postln_radam_nowarmup_isqrt": radam("postln_nowarmup_isqrt"),
              "preln_radam_nowarmup_step8": radam("preln_nowarmup_step8")}


def test_the_optimizer_is_a_setting_that_differs():
    """RAdam against Adam at equal schedule is controlled by optim.name; RAdam without warm-up against Adam with
    it is confounded by the warm-up, and the sentence names the comparisons that vary each alone; a norm
    comparison whose runs use different optimizers names optim.name as a confound."""
    comparisons = {**FACTORIAL, **RADAM_COMPARISONS,
                   "mixed": {"runs": ["postln_radam_nowarmup_isqrt", "preln_nowarmup_isqrt"], "factor": "norm",
                             "claim": ""}}
    exp = experiment(comparisons, RADAM_RUNS, select=[*CELLS, *RADAM_RUNS])
    result = analyze_confounds(exp, execution(exp))
    v = verdicts(result)
    assert v["optimizer_postln_nowarmup_isqrt"] == v["optimizer_preln_nowarmup_step8"] == CONTROLLED
    assert v["radam_replaces_warmup_postln"] == ("confounded", ["schedule.warmup"], [], [])
    assert v["mixed"] == ("confounded", ["optim.name"], [], [])
    c = {c["name"]: c for c in result["comparisons"]}
    assert c["optimizer_postln_nowarmup_isqrt"]["factor_values"] == {"postln_nowarmup_isqrt": "adamw",
                                                                     "postln_radam_nowarmup_isqrt": "radam"}
    assert c["radam_replaces_warmup_postln"]["sentence"] == (
        "radam_replaces_warmup_postln is confounded by schedule.warmup, which differs between postln_warmup_isqrt "
        "and postln_radam_nowarmup_isqrt as well as optim.name; the controlled comparisons that separate them vary "
        "optim.name alone (optimizer_postln_nowarmup_isqrt, optimizer_preln_nowarmup_step8) and schedule.warmup "
        "alone (warmup_postln_isqrt, warmup_postln_step8, warmup_preln_isqrt, warmup_preln_step8).")
    assert c["mixed"]["confound_values"]["optim.name"] == {"postln_radam_nowarmup_isqrt": "radam",
                                                           "preln_nowarmup_isqrt": "adamw"}
    assert all(not x["variant_differences"] for x in result["comparisons"])  # post and pre change nothing else


def test_radam_comparisons_through_the_loaded_config():
    """config.yaml with the RAdam runs selected: the schema takes factor optim.name, the verdicts are as above."""
    paper = config.load_config([REPO / "config.yaml"])
    paper["select"] = [*paper["select"], "postln_radam_nowarmup_isqrt", "preln_radam_nowarmup_step8"]
    config.validate_config(paper)
    v = verdicts(analyze_confounds(config.experiment(paper)))
    assert v["optimizer_postln_nowarmup_isqrt"] == v["optimizer_preln_nowarmup_step8"] == CONTROLLED
    assert v["radam_replaces_warmup_postln"] == ("confounded", ["schedule.warmup"], [], [])
    assert v["figure4"] == FACTORIAL_EXPECTED["figure4"]


# A variant registered by this test only: residual scaling and its own initialization (as DeepNorm's would be).
SCALED = NormVariant("scaled_test", "Scaled Post-LN (test)", final_norm=False, differences=(
    Difference("initialization", "xavier gains beta on the value, output and FFN projections"),
    Difference("residual scaling", "x <- LN(alpha * x + G(x))")))


@pytest.fixture()
def scaled_variant():
    register_norm(SCALED)
    yield SCALED
    del NORMS[SCALED.name]


def variant_run(name: str, norm: str) -> dict:
    c = cell(name)
    c["model"]["norm"] = norm
    return c


def test_variant_differences_come_from_the_registry(scaled_variant):
    assert variant_differences(["post", "pre"]) == [] and variant_differences(["scaled_test", "scaled_test"]) == []
    assert variant_differences(["post", "scaled_test"]) == [("scaled_test", d) for d in reversed(SCALED.differences)]
    both = variant_differences(["pre_nofinal", "scaled_test"])  # the union, by kind
    assert [(n, d.kind) for n, d in both] == [("scaled_test", "residual scaling"), ("scaled_test", "initialization"),
                                              ("pre_nofinal", "layernorms removed")]
    assert variant_sentence(["post", "scaled_test"], variant_differences(["post", "scaled_test"])) == (
        "scaled_test differs from post in the residual scale and the initialization")
    assert variant_sentence(["pre_nofinal", "scaled_test"], both) == (
        "pre_nofinal and scaled_test differ in the residual scale, the initialization and the LayerNorms removed")
    assert variant_differences(["post", "unregistered"]) == []


def test_a_comparison_of_variants_names_what_they_change_beside_the_norm_position(scaled_variant):
    runs = {"scaled_warmup_isqrt": variant_run("postln_warmup_isqrt", "scaled_test"),
            "scaled_nowarmup_isqrt": variant_run("postln_nowarmup_isqrt", "scaled_test"),
            "prenofinal_warmup_isqrt": variant_run("preln_warmup_isqrt", "pre_nofinal")}
    comparisons = {
        "scaled_vs_post": {"runs": ["postln_warmup_isqrt", "scaled_warmup_isqrt"], "factor": "norm", "claim": ""},
        "nofinal_vs_pre": {"runs": ["preln_warmup_isqrt", "prenofinal_warmup_isqrt"], "factor": "norm", "claim": ""},
        "warmup_across": {"runs": ["postln_warmup_isqrt", "scaled_nowarmup_isqrt"], "factor": "warmup", "claim": ""},
        "norm_paper": FACTORIAL["norm_warmup_isqrt"]}
    exp = experiment(comparisons, runs, select=[*CELLS, *runs])
    c = {c["name"]: c for c in analyze_confounds(exp, execution(exp))["comparisons"]}
    assert c["scaled_vs_post"]["verdict"] == "controlled"
    assert c["scaled_vs_post"]["variant_differences"] == [
        {"variant": "scaled_test", "kind": "residual scaling", "what": "x <- LN(alpha * x + G(x))"},
        {"variant": "scaled_test", "kind": "initialization",
         "what": "xavier gains beta on the value, output and FFN projections"}]
    assert c["scaled_vs_post"]["sentence"] == (
        "scaled_vs_post is controlled: only model.norm differs between postln_warmup_isqrt and scaled_warmup_isqrt. "
        "model.norm is not the norm position alone: scaled_test differs from post in the residual scale and the "
        "initialization.")
    assert c["nofinal_vs_pre"]["sentence"].endswith(
        "model.norm is not the norm position alone: pre_nofinal differs from pre in the LayerNorms removed.")
    assert c["nofinal_vs_pre"]["variant_differences"] == [
        {"variant": "pre_nofinal", "kind": "layernorms removed",
         "what": "no LayerNorm after the last layer of each stack"}]
    # model.norm as a confound: the variant's differences are named too
    assert (c["warmup_across"]["verdict"], c["warmup_across"]["confounds"]) == ("confounded", ["model.norm"])
    assert c["warmup_across"]["sentence"].endswith(
        "model.norm is not the norm position alone: scaled_test differs from post in the residual scale and the "
        "initialization.")
    assert not c["norm_paper"]["variant_differences"] and "not the norm position" not in c["norm_paper"]["sentence"]
    row = {r["comparison"]: r for r in confounds_rows({"comparisons": list(c.values())})}
    assert row["nofinal_vs_pre"]["variant differences"] == (
        "pre_nofinal: layernorms removed (no LayerNorm after the last layer of each stack)")
    assert row["norm_paper"]["variant differences"] == ""


AVX2 = {"train_hosts": ["avx2, 4 threads"], "score_hosts": ["avx2, 4 threads"]}
AVX512 = {"train_hosts": ["avx2+avx512f, 4 threads"], "score_hosts": ["avx2, 4 threads"]}


def test_hosts_confound_cost_not_quality():
    """Units trained on hosts of other CPU flags: the comparison's cost is flagged as confounded by the host (and
    the unit it compares in named), while its verdict, the comparison of quality per epoch, stays controlled."""
    exp = experiment({"pair": PAIR})
    on = {r: AVX2 for r in CELLS}
    alike = analyze_confounds(exp, execution(exp, **on))["comparisons"][0]
    assert (alike["verdict"], alike["cost_confounds"]) == ("controlled", [])
    assert "host" not in alike["sentence"]
    c = analyze_confounds(exp, execution(exp, **{**on, "preln_warmup_isqrt": AVX512}))["comparisons"][0]
    assert verdicts({"comparisons": [c]}) == {"pair": CONTROLLED}
    assert c["cost_confounds"] == ["train_hosts"]  # scored alike: the scoring hosts are no confound
    assert c["cost_values"] == {"train_hosts": {"postln_warmup_isqrt": ["avx2, 4 threads"],
                                                "preln_warmup_isqrt": ["avx2+avx512f, 4 threads"]}}
    assert c["sentence"] == (
        "pair is controlled: only model.norm differs between postln_warmup_isqrt and preln_warmup_isqrt. Its cost "
        "(CPU time, wall-clock, time to quality in seconds, quality at equal CPU time and tokens per second) is "
        "confounded by the host: the training hosts differ (postln_warmup_isqrt: avx2, 4 threads; "
        "preln_warmup_isqrt: avx2+avx512f, 4 threads); compare its cost within a host or in updates and epochs (its "
        "quality per epoch and per update is compared as above).")
    row = confounds_rows({"comparisons": [c]})[0]
    assert row["cost confounds"] == ("the training hosts (postln_warmup_isqrt='avx2, 4 threads'; "
                                     "preln_warmup_isqrt='avx2+avx512f, 4 threads')")
    assert row["execution confounds"] == "" and row["verdict"] == "controlled"


def test_hosts_mixed_within_a_run_and_unknown_hosts():
    """Seeds of one run on two hosts mix hosts in its cost: flagged; a run whose records name no host (an older
    lnrepro's) is no evidence of a difference."""
    exp, on = experiment({"pair": PAIR}), {r: AVX2 for r in CELLS}
    mixed = {"train_hosts": ["avx2, 4 threads", "avx2+avx512f, 4 threads"], "score_hosts": []}
    c = analyze_confounds(exp, execution(exp, **{**on, "preln_warmup_isqrt": mixed}))["comparisons"][0]
    assert c["cost_confounds"] == ["train_hosts"] and c["verdict"] == "controlled"
    unknown = {"train_hosts": [], "score_hosts": []}
    c = analyze_confounds(exp, execution(exp, **{**on, "preln_warmup_isqrt": unknown}))["comparisons"][0]
    assert c["cost_confounds"] == [] and c["verdict"] == "controlled"
