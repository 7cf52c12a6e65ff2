"""Configuration: defaults + run delta resolution, selection, grids, typed slices, and errors that name the key."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml

from conftest import copy_repo, snakemake
from lnrepro import config as cfg
from lnrepro.config.settings import ScoreSettings
from lnrepro.errors import LnReproError

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture()
def paper() -> dict:
    return cfg.load_config([REPO / "config.yaml"])


def test_paper_config_is_the_papers(paper: dict) -> None:
    d = paper["defaults"]
    assert (d["model"]["encoder_layers"], d["model"]["decoder_layers"], d["model"]["d_model"]) == (6, 6, 512)
    assert (d["model"]["heads"], d["model"]["ffn_dim"], d["model"]["dropout"]) == (4, 1024, 0.1)
    assert d["optim"]["betas"] == [0.9, 0.98] and d["optim"]["lr_max"] == 5e-4
    assert d["schedule"]["warmup_updates"] == 4000 and d["schedule"]["decay_epochs"] == [8]
    assert d["train"]["epochs"] == 20 and paper["seeds"] == [1, 2, 3]
    assert all(s["beam"] == 5 and s["lenpen"] == 1.2 and s["epochs"] == "all" for s in d["eval"]["splits"].values())
    assert len(paper["select"]) == 8
    assert paper["comparisons"]["figure4"]["runs"] == ["postln_warmup_isqrt", "preln_nowarmup_step8"]
    assert len(paper["comparisons"]) == 25  # figure4, the 12 single-factor ones, the 3 of RAdam, warm-up per variant


def test_run_resolves_as_deep_merge(paper: dict) -> None:
    r = cfg.resolve_run(paper, "preln_nowarmup_step8")
    assert r.model.norm == "pre" and r.model.d_model == 512
    assert r.schedule.to_dict() == {**paper["defaults"]["schedule"], "warmup": False, "decay": "step"}
    assert r.factors == {"norm": "pre", "warmup": False, "decay": "step"}
    assert r.flat()["schedule.decay_epochs"] == [8] and r.flat()["model.norm"] == "pre"
    assert paper["defaults"]["model"]["norm"] == "post"  # the defaults are not mutated


def test_run_slice_holds_only_what_training_depends_on(paper: dict, tmp_path: Path) -> None:
    s = cfg.experiment(paper).run_config("postln_warmup_isqrt", 2)
    d = s.to_dict()
    assert set(d) == {"run", "seed", "model", "optim", "schedule", "train", "data", "bpe"}
    assert s.seed == 2 and "eval" not in d
    assert s.data.dataset == "iwslt14" and "mirror" not in s.data.options and "archive" not in s.data.options
    s.write(tmp_path / "config.json")
    assert cfg.RunConfig.read(tmp_path / "config.json") == s  # written and read through the same class


def test_every_slice_round_trips(paper: dict, tmp_path: Path) -> None:
    x = cfg.experiment(paper)
    for section in (x, x.eval, x.data, x.bpe):
        section.write(tmp_path / "slice.json")
        assert type(section).read(tmp_path / "slice.json") == section


def test_a_slice_missing_a_key_names_it(paper: dict, tmp_path: Path) -> None:
    d = cfg.experiment(paper).eval.scoring(("valid", "test")).to_dict()
    del d["splits"]["test"]["beam"]
    (tmp_path / "eval.json").write_text(__import__("json").dumps(d))
    with pytest.raises(LnReproError, match=r"eval.json.splits.test: missing key beam"):
        ScoreSettings.read(tmp_path / "eval.json")


def _with_eval(config: dict, **splits: dict) -> dict:
    """``config`` with defaults.eval.splits.{split} updated by each keyword's settings."""
    out = copy.deepcopy(config)
    for split, settings in splits.items():
        out["defaults"]["eval"]["splits"][split].update(settings)
    return out


def test_paper_scores_every_split_at_every_epoch_in_one_group(paper: dict) -> None:
    e = cfg.experiment(paper).eval
    assert e.groups(20) == {("valid", "test"): tuple(range(1, 21))}
    assert e.splits["test"].scored(20) == tuple(range(1, 21)) and e.due(7, 20) == ("valid", "test")


@pytest.mark.parametrize("epochs, scored", [("all", tuple(range(1, 21))), ("last", (20,)), ([20], (20,)),
                                            ([15, "last", 5], (5, 15, 20)), ([], None)])
def test_a_split_names_its_epochs(paper: dict, epochs, scored) -> None:
    """all, last, a list of numbers and last (sorted), or [] (never: the split is left out)."""
    e = cfg.experiment(_with_eval(paper, test={"beam": 1, "epochs": epochs})).eval
    if scored is None:
        assert list(e.splits) == ["valid"] and e.groups(20) == {("valid",): tuple(range(1, 21))}
    else:
        assert e.splits["test"].scored(20) == scored and e.splits["test"].beam == 1 and e.splits["valid"].beam == 5
        assert e.groups(20)[("valid", "test")] == scored


def test_groups_and_slices_of_per_split_settings(paper: dict) -> None:
    """valid greedy at every epoch, test with beam 5 at epochs 10 and 20: two groups, each slice holding only its
    splits' decoding (no epochs, so that changing test's epochs rewrites no slice)."""
    e = cfg.experiment(_with_eval(paper, valid={"beam": 1}, test={"epochs": [10, "last"]})).eval
    assert e.groups(20) == {("valid", "test"): (10, 20), ("valid",): (*range(1, 10), *range(11, 20))}
    assert e.due(10, 20) == ("valid", "test") and e.due(11, 20) == ("valid",)
    valid_only = e.scoring(("valid",)).to_dict()
    assert list(valid_only["splits"]) == ["valid"] and valid_only["splits"]["valid"]["beam"] == 1
    assert "epochs" not in valid_only["splits"]["valid"] and valid_only["max_tokens"] == 8000
    assert e.scoring(("valid", "test")).splits["test"].beam == 5


def test_groups_at_the_most_epochs(paper: dict) -> None:
    """The schema's maximum of train.epochs: every epoch in its group, each asked once (the DAG's bookkeeping is
    linear in the epochs)."""
    config = _with_eval(paper, test={"epochs": [500, "last"]})
    config["defaults"]["train"]["epochs"] = 1000
    e = cfg.experiment(config).eval
    assert e.groups(1000) == {("valid", "test"): (500, 1000), ("valid",): (*range(1, 500), *range(501, 1000))}
    assert [e.splits["test"].scores(ep, 1000) for ep in (0, 1, 500, 1000, 1001)] == [False, False, True, True, False]


# The Figure 4 pair trains 30 epochs, every other selected run the paper's 20 (as in the end-point preset).
LONGER_PAIR = {"runs": {run: {"train": {"epochs": 30}} for run in ("postln_warmup_isqrt", "preln_nowarmup_step8")}}


def test_runs_of_two_lengths_score_each_split_at_their_own_epochs(paper: dict) -> None:
    """all and last are each run's own; a listed epoch is scored in every run; one length per rule group."""
    test_at_15 = {"defaults": {"eval": {"splits": {"test": {"epochs": [15, "last"]}}}}}
    c = with_layer(paper, cfg.deep_merge(LONGER_PAIR, test_at_15))
    x = cfg.experiment(c)
    assert x.lengths == (20, 30) and x.runs_of_length(30) == ("postln_warmup_isqrt", "preln_nowarmup_step8")
    assert x.last_of("postln_warmup_isqrt") == 30 and x.last_of("preln_warmup_isqrt") == 20
    assert x.common_last(["postln_warmup_isqrt", "preln_nowarmup_step8"]) == 30
    assert x.common_last(["postln_warmup_isqrt", "preln_warmup_isqrt"]) == 20
    assert x.scored("postln_warmup_isqrt", "test") == (15, 30) and x.scored("preln_warmup_isqrt", "test") == (15, 20)
    assert x.scored("postln_warmup_isqrt", "valid") == tuple(range(1, 31))
    assert x.common_scored(["postln_warmup_isqrt", "preln_warmup_isqrt"], "test") == (15,)
    assert x.eval.groups(30) == {("valid", "test"): (15, 30), ("valid",): (*range(1, 15), *range(16, 30))}
    assert x.eval.groups(20)[("valid", "test")] == (15, 20)
    with pytest.raises(LnReproError, match=r"differ in train\.epochs \(20, 30\)"):
        x.epochs  # noqa: B018: no one number of epochs
    assert cfg.Experiment.from_dict(x.to_dict()) == x  # experiment.json keeps each run's length and the spec


@pytest.mark.parametrize(
    "layer, message",
    [  # a listed epoch is checked against every run's training, and each run's last epoch scores every split
        ({"defaults": {"eval": {"splits": {"test": {"epochs": [25, "last"]}}}}},
         r"splits\.test\.epochs: epoch\(s\) \[25\] outside the training \(1\.\.20, train\.epochs of "
         r"postln_warmup_step8 and 5 more run\(s\)\)"),
        ({"defaults": {"eval": {"splits": {"test": {"epochs": [30]}}}}},
         r"splits\.test\.epochs: epoch\(s\) \[30\] outside the training \(1\.\.20"),
        ({"defaults": {"eval": {"splits": {"valid": {"epochs": [20]}, "test": {"epochs": "all"}}}}},
         r"splits\.valid\.epochs: \[20\] does not hold the last epoch \(30 of postln_warmup_isqrt and 1 more"),
        ({"defaults": {"eval": {"splits": {"valid": {"epochs": [5, "last"]}, "test": {"epochs": "all"}}}},
          "runs": {"postln_warmup_isqrt": {"train": {"epochs": 20}}, "preln_nowarmup_step8": {"train": {"epochs": 20}}},
          "select": ["postln_warmup_isqrt", "preln_nowarmup_step8", "postln_nowarmup_isqrt"]},
         None),  # every run the same length again: accepted
        # the earlier budget comes before the shortest run's end, which every comparison reaches
        ({"analysis": {"report": {"budget_epoch": 20}}},
         r"budget_epoch \(20\) must be before the last epoch of the shortest selected run \(train\.epochs = 20\)"),
        ({"analysis": {"report": {"budget_epoch": 19}}}, None),
        # a step decay must come within the run's own training: the 30-epoch run may decay at 25, a 20-epoch one not
        ({"runs": {"preln_nowarmup_step8": {"schedule": {"decay_epochs": [25]}}}}, None),
        ({"defaults": {"schedule": {"decay_epochs": [25]}}},
         r"runs\.postln_warmup_step8 \(with defaults\): schedule\.decay_epochs \[25\] beyond the last epoch "
         r"\(train\.epochs = 20\)"),
    ],
)
def test_runs_of_two_lengths_are_checked_against_each_length(paper: dict, layer: dict, message: str | None) -> None:
    merged = cfg.deep_merge(LONGER_PAIR, layer)
    if message is None:
        with_layer(paper, merged)
    else:
        with pytest.raises(LnReproError, match=message):
            with_layer(paper, merged)


@pytest.mark.parametrize(
    "splits, message",
    [
        ({"test": {"epochs": [5, 21]}},
         r"defaults\.eval\.splits\.test\.epochs: epoch\(s\) \[21\] outside the training \(1\.\.20, train\.epochs"),
        ({"test": {"epochs": [5, 10]}}, r"splits\.test\.epochs: \[5, 10\] does not hold the last epoch \(20\)"),
        ({"valid": {"epochs": "last"}, "test": {"epochs": [10, "last"]}},
         r"defaults\.eval\.splits: no split is scored at epoch\(s\) \[1, 2, 3, 4, 5, 6, 7, 8, 9, 11,"),
        ({"valid": {"epochs": []}, "test": {"epochs": []}}, r"no split is scored at epoch\(s\) \[1, 2,"),
    ],
)
def test_bad_split_epochs_are_rejected_by_key(paper: dict, splits: dict, message: str) -> None:
    with pytest.raises(LnReproError, match=message):
        cfg.validate_config(_with_eval(paper, **splits))


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda e: e["splits"]["test"].update(epochs="first"), r"key defaults\.eval\.splits\.test\.epochs:"),
        (lambda e: e["splits"]["test"].update(epochs=[0, "last"]), r"key defaults\.eval\.splits\.test\.epochs:"),
        (lambda e: e["splits"]["test"].update(epochs=[2, 2, "last"]), r"key defaults\.eval\.splits\.test\.epochs:"),
        (lambda e: e["splits"]["valid"].update(beam=0), r"key defaults\.eval\.splits\.valid\.beam:"),
        (lambda e: e["splits"]["valid"].pop("precision"), r"key defaults\.eval\.splits\.valid: 'precision' is a required"),
        (lambda e: e["splits"].update(train=e["splits"]["valid"]), r"unknown key defaults\.eval\.splits\.train"),
        (lambda e: e.update(beam=5), r"unknown key defaults\.eval\.beam"),
        (lambda e: e.update(splits=["valid", "test"]), r"key defaults\.eval\.splits: \['valid', 'test'\] is not of type 'object'"),
    ],
)
def test_bad_eval_forms_are_rejected_by_key(paper: dict, mutate, message: str) -> None:
    """The schema: the old flat form (eval.beam, splits as a list) and bad per-split values name the key."""
    bad = copy.deepcopy(paper)
    mutate(bad["defaults"]["eval"])
    with pytest.raises(LnReproError, match=message):
        cfg.validate_config(bad)


def test_model_settings_are_model_config_without_the_vocabulary() -> None:
    import dataclasses

    from lnrepro.model import ModelConfig

    fields = [f.name for f in dataclasses.fields(ModelConfig)]
    assert fields[0] == "vocab_size" and fields[1:] == [f.name for f in dataclasses.fields(cfg.ModelSettings)]


def test_select_narrows_the_runs(tmp_path: Path) -> None:
    preset = tmp_path / "p.yaml"
    preset.write_text(yaml.safe_dump({"select": ["postln_warmup_isqrt", "preln_nowarmup_step8"]}))
    c = cfg.load_config([REPO / "config.yaml", preset])
    x = cfg.experiment(c)
    assert x.select == ("postln_warmup_isqrt", "preln_nowarmup_step8")
    assert set(x.runs) == {"postln_warmup_isqrt", "preln_nowarmup_step8"}


def test_demo_preset_is_valid_and_scaled() -> None:
    c = cfg.load_config([REPO / "config.yaml", REPO / "presets" / "demo.yaml"])
    assert c["name"] == "demo" and c["defaults"]["data"]["dataset"] == "synthetic"
    assert c["scaling"] and {"warmup_updates", "epochs", "grids"} <= set(c["scaling"])


@pytest.mark.parametrize(
    "mutate, key",
    [
        (lambda c: c["defaults"]["model"].update(nrom="pre"), "defaults.model.nrom"),
        (lambda c: c["runs"]["preln_warmup_isqrt"]["schedule"].update(warmpu=True), "runs.preln_warmup_isqrt.schedule.warmpu"),
        (lambda c: c.update(sedes=[1]), "sedes"),
    ],
)
def test_unknown_key_is_rejected_by_name(paper: dict, mutate, key: str) -> None:
    bad = copy.deepcopy(paper)
    mutate(bad)
    with pytest.raises(LnReproError, match=f"unknown key {key}"):
        cfg.validate_config(bad)


@pytest.mark.parametrize(
    "mutate, key",
    [
        (lambda c: c["defaults"]["model"].update(d_model="512"), "defaults.model.d_model"),
        (lambda c: c["defaults"]["schedule"].update(warmup="yes"), "defaults.schedule.warmup"),
        (lambda c: c["defaults"]["model"].update(norm="middle"), "defaults.model.norm"),
        (lambda c: c.update(seeds=["one"]), "seeds.0"),
        (lambda c: c["defaults"]["bpe"].update(vocab_size=100), "defaults.bpe.vocab_size"),
        (lambda c: c["defaults"]["data"]["synthetic"].update(train=0), "defaults.data.synthetic.train"),
    ],
)
def test_wrong_type_is_rejected_by_name(paper: dict, mutate, key: str) -> None:
    bad = copy.deepcopy(paper)
    mutate(bad)
    with pytest.raises(LnReproError, match=f"key {key}:"):
        cfg.validate_config(bad)


def test_selecting_an_undefined_run_is_rejected(paper: dict) -> None:
    bad = copy.deepcopy(paper)
    bad["select"] = ["postln_warmup_isqrt", "postln_typo"]
    with pytest.raises(LnReproError, match="postln_typo"):
        cfg.validate_config(bad)


def test_resources_fall_back_to_default(paper: dict) -> None:
    r = cfg.resources(paper, "write_run_config")
    assert r.to_dict() == paper["resources"]["default"]
    assert cfg.resources(paper, "train_run").gpus == 1


def test_resources_name_worker_rules_only(paper: dict) -> None:
    bad = copy.deepcopy(paper)
    bad["resources"]["train_runs"] = {"threads": 1}
    with pytest.raises(LnReproError, match="resources.train_runs: no such rule"):
        cfg.validate_config(bad)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda c: c["comparisons"]["figure4"].update(runs=["postln_warmup_isqrt", "nope"]), "comparisons.figure4.runs names 'nope'"),
        (lambda c: c["defaults"]["model"].update(heads=3), r"d_model \(512\) must be divisible by model.heads \(3\)"),
        (lambda c: c["defaults"]["model"].update(share_decoder_embeddings=False, share_all_embeddings=True),
         "share_all_embeddings requires"),
        (lambda c: c["defaults"]["schedule"].update(decay_epochs=[21]), r"decay_epochs \[21\] beyond the last epoch"),
        (lambda c: c["runs"]["preln_nowarmup_step8"].update(train={"epochs": 7}),
         r"runs\.preln_nowarmup_step8 .*decay_epochs \[8\] beyond the last epoch \(train\.epochs = 7\)"),
        (lambda c: c["comparisons"]["figure4"].update(factor="depth"), "comparisons.figure4.factor"),
    ],
)
def test_semantic_errors_name_the_setting(paper: dict, mutate, message: str) -> None:
    bad = copy.deepcopy(paper)
    mutate(bad)
    with pytest.raises(LnReproError, match=message):
        cfg.validate_config(bad)


def test_norm_enum_comes_from_the_registry() -> None:
    from lnrepro.norms import NORMS

    assert cfg.load_schema()["$defs"]["model"]["properties"]["norm"]["enum"] == list(NORMS)


# ---- grids --------------------------------------------------------------------------------------------------

TUNE_POSTLN = "postln_warmup_isqrt__lr_max={lr}__warmup_updates={w}"
TUNE_PRELN = "preln_nowarmup_step8__lr_max={lr}__decay_epochs={e}"


def with_layer(paper: dict, layer: dict) -> dict:
    """The paper config with ``layer`` merged in as a preset would be, validated."""
    c = cfg.deep_merge(paper, layer)
    cfg.validate_config(c)
    return c


def test_grids_expand_into_runs_named_by_key_and_value(paper: dict) -> None:
    runs = cfg.grid_runs(paper)
    lrs, warmups = ["2.5e-4", "5.0e-4", "1.0e-3"], [2000, 4000, 8000]
    assert list(runs["tune_postln"]) == [TUNE_POSTLN.format(lr=lr, w=w) for lr in lrs for w in warmups]
    assert list(runs["tune_preln"]) == [TUNE_PRELN.format(lr=lr, e=e) for lr in lrs for e in (6, 8, 10)]
    assert len(runs["warmup_study"]) == 6
    r = cfg.resolve_run(paper, TUNE_POSTLN.format(lr="1.0e-3", w=2000))
    assert r.optim.lr_max == 1e-3 and r.model.norm == "post" and r.factors == {"norm": "post", "warmup": True, "decay": "isqrt"}
    p = cfg.resolve_run(paper, TUNE_PRELN.format(lr="2.5e-4", e=10))
    assert p.schedule.decay_epochs == (10,) and p.optim.lr_max == 2.5e-4 and p.model.norm == "pre"


def test_the_default_selection_is_the_eight_cells(paper: dict) -> None:
    x = cfg.experiment(paper)
    assert x.select == tuple(paper["select"]) and len(x.select) == 8 and x.grids == {}
    assert all(x.seeds_of(run) == (1, 2, 3) for run in x.select)


@pytest.mark.parametrize(
    "key, value, text",
    [
        ("optim.lr_max", 1.0e-3, "lr_max=1.0e-3"),
        ("optim.lr_max", 2.5e-4, "lr_max=2.5e-4"),
        ("optim.betas", [0.9, 0.98], "betas=9.0e-1-9.8e-1"),
        ("schedule.decay_factor", 1.0, "decay_factor=1.0"),
        ("schedule.decay_epochs", [6, 8], "decay_epochs=6-8"),
        ("model.share_all_embeddings", False, "share_all_embeddings=false"),
        ("model.norm", "pre", "norm=pre"),
        ("train.max_tokens", 2048, "max_tokens=2048"),
    ],
)
def test_a_run_name_writes_the_value_as_the_config_does(paper: dict, key: str, value, text: str) -> None:
    c = with_layer(paper, {"grids": {"g": {"base": "postln_warmup_isqrt", "values": {key: [value]}}}})
    assert list(cfg.grid_runs(c)["g"]) == [f"postln_warmup_isqrt__{text}"]


def test_grid_run_names_determine_their_settings() -> None:
    """The premise of a name two grids generate being one run: no two run settings end in the same name."""
    keys = [key for section in cfg.RunSettings.__dataclass_fields__ for key in cfg.load_schema()["$defs"][section]["properties"]]
    assert len(keys) == len(set(keys))


def test_varying_warmup_sets_the_anchor_only_inside_the_grid(paper: dict) -> None:
    for w in (2000, 8000):
        s = cfg.resolve_run(paper, TUNE_POSTLN.format(lr="5.0e-4", w=w)).schedule
        assert (s.warmup, s.warmup_updates, s.anchor_updates) == (True, w, w)
    # a grid not varying T_warmup, and the cells, keep the configured anchor
    assert cfg.resolve_run(paper, TUNE_PRELN.format(lr="5.0e-4", e=6)).schedule.anchor_updates == 4000
    assert cfg.resolve_run(paper, "postln_warmup_isqrt").schedule.anchor_updates == 4000


def test_warmup_zero_means_no_warmup(paper: dict) -> None:
    s = cfg.resolve_run(paper, "postln_warmup_isqrt__lr_max=1.0e-3__warmup_updates=0").schedule
    assert s.warmup is False and (s.warmup_updates, s.anchor_updates) == (4000, 4000)  # the rest as configured
    s = cfg.resolve_run(paper, "postln_warmup_isqrt__lr_max=1.0e-3__warmup_updates=500").schedule
    assert s.warmup is True and (s.warmup_updates, s.anchor_updates) == (500, 500)


def test_selecting_a_grid_selects_its_runs_with_its_seeds(paper: dict, tmp_path: Path) -> None:
    c = with_layer(paper, {"select": ["postln_warmup_isqrt", "tune_preln"], "grids": {"tune_preln": {"seeds": [7]}}})
    x = cfg.experiment(c)
    grid = list(cfg.grid_runs(c)["tune_preln"])
    assert x.select == ("postln_warmup_isqrt", *grid) and set(x.runs) == set(x.select)
    assert list(x.grids) == ["tune_preln"] and x.grids["tune_preln"].runs == tuple(grid)
    assert x.grids["tune_preln"].base == "preln_nowarmup_step8" and x.grids["tune_preln"].values["schedule.decay_epochs"] == ([6], [8], [10])
    assert x.seeds_of(grid[0]) == (7,) and x.seeds_of("postln_warmup_isqrt") == (1, 2, 3)
    assert x.run_config(grid[4], 7).schedule.decay_epochs == (8,)
    x.write(tmp_path / "experiment.json")
    assert cfg.Experiment.read(tmp_path / "experiment.json") == x


def test_a_grid_run_is_selected_like_any_run(paper: dict) -> None:
    name = TUNE_POSTLN.format(lr="1.0e-3", w=8000)
    x = cfg.experiment(with_layer(paper, {"select": [name, "preln_nowarmup_step8"]}))
    assert x.select == (name, "preln_nowarmup_step8")
    assert x.grids["tune_postln"].runs == (name,) and x.seeds_of(name) == (1, 2, 3)  # a grid's seeds default to the experiment's


def test_a_run_two_grids_generate_is_one_run_with_their_seeds(paper: dict) -> None:
    c = with_layer(paper, {"select": ["tune_postln", "warmup_study"], "grids": {"tune_postln": {"seeds": [1]},
                                                                               "warmup_study": {"seeds": [2, 1]}}})
    x = cfg.experiment(c)
    shared = TUNE_POSTLN.format(lr="5.0e-4", w=4000)
    assert len(x.select) == 9 + 6 - 2 and x.select.count(shared) == 1
    assert x.seeds_of(shared) == (1, 2) and x.seeds_of(TUNE_POSTLN.format(lr="5.0e-4", w=8000)) == (1,)


def test_a_run_an_unselected_grid_shares_trains_the_selected_grids_seeds_only(paper: dict) -> None:
    """warmup_study (not selected) generates one of tune_postln's runs: its seeds must not reach that run."""
    c = with_layer(paper, {"select": ["tune_postln"], "grids": {"tune_postln": {"seeds": [6]}}})
    x = cfg.experiment(c)
    shared = TUNE_POSTLN.format(lr="5.0e-4", w=4000)  # warmup_study has it too
    assert shared in x.select and x.seeds_of(shared) == (6,)
    assert set(x.grids) == {"tune_postln"}
    named = cfg.experiment(with_layer(c, {"select": ["tune_postln", shared]}))  # naming the run: every grid's
    assert named.seeds_of(shared) == (6, 1, 2, 3)


def test_the_demo_selects_the_cells_and_two_trials_per_arm() -> None:
    x = cfg.experiment(cfg.load_config([REPO / "config.yaml", REPO / "presets" / "demo.yaml"]))
    assert x.select[:8] == tuple(cfg.load_config([REPO / "config.yaml"])["select"]) and x.epochs >= 3
    assert all(x.seeds_of(run) == (1, 2) for run in x.select[:8])
    assert {g: len(s.runs) for g, s in x.grids.items()} == {"tune_postln": 2, "tune_preln": 2}
    assert all(s.seeds == (1,) for s in x.grids.values()) and len(x.select) == 16
    # then each further variant once without warm-up, one seed (run_seeds)
    variants = x.select[12:]
    assert {x.runs[r].model.norm for r in variants} == {"pre_nofinal", "deepnorm", "admin", "rezero"}
    assert all(x.seeds_of(r) == (1,) and not x.runs[r].schedule.warmup for r in variants)


LR_GRID = {"base": "postln_warmup_isqrt", "values": {"optim.lr_max": [1.0e-3, 2.0e-3]}}


@pytest.mark.parametrize(
    "grids, message",
    [
        ({"g": {"base": "postln_typo", "values": {"optim.lr_max": [1.0e-3]}}}, r"grids.g.base names run 'postln_typo'"),
        ({"g": {"base": "postln_warmup_isqrt", "values": {"optim.lr_mx": [1.0e-3]}}}, r"unknown key grids.g.values.optim.lr_mx"),
        ({"g": {"base": "postln_warmup_isqrt", "values": {"optim.lr_max": ["1e-3"]}}},
         r"key grids.g.values.optim.lr_max.0: '1e-3' is not of type 'number'"),
        ({"g": {"base": "postln_warmup_isqrt", "values": {"optim.lr_max": []}}}, r"key grids.g.values.optim.lr_max:"),
        ({"g": {"base": "postln_warmup_isqrt", "values": {"schedule.anchor_updates": [0]}}},
         r"key grids.g.values.schedule.anchor_updates.0:"),  # only T_warmup takes 0 (no warm-up)
        ({"g": {"base": "postln_warmup_isqrt", "values": {"schedule.warmup_updates": [500], "schedule.anchor_updates": [500]}}},
         r"grids.g.values: schedule.anchor_updates with schedule.warmup_updates, which sets them"),
        ({"g": {"base": "postln_warmup_isqrt", "values": {"train.diverge_loss": [1.0e+20]}}},
         r"run name 'postln_warmup_isqrt__diverge_loss=1e\+20' holds characters outside"),
        ({"postln_warmup_step8": {"base": "postln_warmup_isqrt", "values": {"optim.lr_max": [1.0e-3]}}},
         r"grids.postln_warmup_step8: a grid may not have the name of a run"),
        ({"g": {"base": "postln_warmup_isqrt", "values": {"optim.lr_max": [1.0e-3]}, "seeds": []}}, r"key grids.g.seeds:"),
        ({"g": {**LR_GRID, "extended": {"optim.lr_mx": [1.0e-3]}}}, r"unknown key grids.g.extended.optim.lr_mx"),
        ({"g": {**LR_GRID, "extended": {"optim.eps": [1.0e-8]}}},
         r"grids.g.extended.optim.eps: not a key of grids.g.values \(optim.lr_max\)"),
        ({"g": {**LR_GRID, "extended": {"optim.lr_max": [1.0e-3, 4.0e-3]}}},
         r"grids.g.extended.optim.lr_max: 4.0e-3 not in grids.g.values.optim.lr_max \(1.0e-3, 2.0e-3\)"),
        ({"g": {"base": "preln_nowarmup_step8", "values": {"schedule.decay_epochs": [[6], [8]]},
                "extended": {"schedule.decay_epochs": [[8], [10]]}}},
         r"grids.g.extended.schedule.decay_epochs: 10 not in grids.g.values.schedule.decay_epochs \(6, 8\)"),
        ({"g": {**LR_GRID, "extended": {"optim.lr_max": [2.0e-3, 1.0e-3]}}},
         r"grids.g.extended.optim.lr_max: every value of grids.g.values.optim.lr_max is listed as added later"),
        ({"g": {**LR_GRID, "extended": {"optim.lr_max": ["1e-3"]}}},  # its items validate as values' do
         r"key grids.g.extended.optim.lr_max.0: '1e-3' is not of type 'number'"),
    ],
)
def test_invalid_grids_are_rejected_by_name(paper: dict, grids: dict, message: str) -> None:
    with pytest.raises(LnReproError, match=message):
        with_layer(paper, {"grids": grids})


def test_a_grid_records_its_extensions_and_experiment_json_keeps_them(paper: dict, tmp_path: Path) -> None:
    """extended: the values added after the grid's first run, in order, each one of values however the YAML
    writes the number (8.0e-3 is 0.008) or the list (decay epochs [[12]])."""
    layer = yaml.safe_load("""
select: [tune_preln, tune_postln]
grids:
  tune_preln:
    values: {optim.lr_max: [2.5e-4, 5.0e-4, 1.0e-3, 2.0e-3, 0.008], schedule.decay_epochs: [[6], [8], [10], [12]]}
    extended: {optim.lr_max: [2.0e-3, 8.0e-3], schedule.decay_epochs: [[12]]}
""")
    x = cfg.experiment(with_layer(paper, layer))
    assert x.grids["tune_preln"].extended == {"optim.lr_max": (2.0e-3, 8.0e-3), "schedule.decay_epochs": ([12],)}
    assert x.grids["tune_postln"].extended == {}  # the grid as first planned
    assert cfg.Experiment.from_dict(x.to_dict()) == x
    x.write(tmp_path / "experiment.json")
    assert cfg.Experiment.read(tmp_path / "experiment.json").grids["tune_preln"] == x.grids["tune_preln"]


def test_a_grid_run_may_not_shadow_a_run(paper: dict) -> None:
    layer = {"runs": {"postln_warmup_isqrt__lr_max=1.0e-3": {"optim": {"lr_max": 1.0e-3}}},
             "grids": {"g": {"base": "postln_warmup_isqrt", "values": {"optim.lr_max": [1.0e-3]}}}}
    with pytest.raises(LnReproError, match=r"grids.g generates run 'postln_warmup_isqrt__lr_max=1.0e-3', which is also under runs:"):
        with_layer(paper, layer)


def test_select_names_a_run_or_a_grid(paper: dict) -> None:
    with pytest.raises(LnReproError, match=r"select names 'tune_typo', which is neither a run .* nor a grid \(tune_postln"):
        with_layer(paper, {"select": ["tune_typo"]})
    with pytest.raises(LnReproError, match=r"decay_epochs \[10\] beyond the last epoch"):  # a selected grid's runs are checked
        with_layer(paper, {"select": ["tune_preln"], "defaults": {"train": {"epochs": 9}}})


def test_a_selected_grid_trains_in_the_dag_with_its_seeds(tmp_path: Path) -> None:
    """Through the Snakefile: grid run names (with "." and "=") match the run wildcard, each with its seeds."""
    work = copy_repo(tmp_path / "repo")
    warmup0 = "postln_warmup_isqrt__lr_max=1.0e-3__warmup_updates=0"
    (work / "grid.yaml").write_text(yaml.safe_dump({"select": ["tune_preln", warmup0], "grids": {"tune_preln": {"seeds": [5]}}}))
    proc = snakemake(work, "train", "-n", "--configfile", "grid.yaml")
    jobs = set(re.findall(r"wildcards: run=([^,\s]+), seed=(\d+)", proc.stdout + proc.stderr))
    grid = cfg.grid_runs(cfg.load_config([REPO / "config.yaml"]))["tune_preln"]
    assert jobs == {(run, "5") for run in grid} | {(warmup0, seed) for seed in "123"}


def test_run_seeds_give_a_run_its_own_seeds(paper: dict) -> None:
    """run_seeds: a single run's seeds (the demo trains each extra variant once); a grid's seeds still win."""
    c = {**paper, "select": [*paper["select"], "deepnorm_warmup_isqrt"], "run_seeds": {"deepnorm_warmup_isqrt": [1]}}
    cfg.validate_config(c)
    x = cfg.experiment(c)
    assert x.seeds_of("deepnorm_warmup_isqrt") == (1,) and x.seeds_of("postln_warmup_isqrt") == (1, 2, 3)
    with pytest.raises(LnReproError, match="run_seeds names 'nope', which is not a run"):
        cfg.validate_config({**c, "run_seeds": {"nope": [1]}})
