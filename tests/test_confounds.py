"""Confound detection on a fabricated experiment (no results tree needed)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from lnrepro import config
from lnrepro.analysis.confounds import (
    analyze_confounds,
    confounds_markdown,
    differing_keys,
    flatten,
    write_confounds,
)
from lnrepro.errors import LnReproError

REPO = Path(__file__).resolve().parents[1]

DEFAULTS = {
    "data": {"dataset": "synthetic", "synthetic": {"seed": 1234, "train": 200}},
    "bpe": {"vocab_size": 64, "character_coverage": 1.0, "seed": 1},
    "model": {"encoder_layers": 2, "decoder_layers": 2, "d_model": 16, "heads": 2, "ffn_dim": 32,
              "dropout": 0.1, "norm": "post"},
    "optim": {"lr_max": 5e-4, "betas": [0.9, 0.98], "label_smoothing": 0.1},
    "schedule": {"warmup": True, "decay": "isqrt", "warmup_updates": 40, "anchor_updates": 40,
                 "decay_epochs": [3], "decay_factor": 0.1},
    "train": {"epochs": 3, "max_tokens": 256},
}
CELLS = {
    f"{n}ln_{'warmup' if w else 'nowarmup'}_{'isqrt' if d == 'isqrt' else 'step8'}": (n, w, d)
    for n in ("post", "pre") for w in (True, False) for d in ("isqrt", "step")
}


def resolved(run: str) -> dict:
    norm, warm, decay = CELLS[run]
    cfg = copy.deepcopy(DEFAULTS)
    cfg["model"]["norm"], cfg["schedule"]["warmup"], cfg["schedule"]["decay"] = norm, warm, decay
    return cfg


def experiment(select: list[str]) -> dict:
    return {
        "name": "fake", "select": select, "seeds": [1],
        "runs": {r: resolved(r) for r in select},
        "comparisons": {
            "figure4": {"runs": ["postln_warmup_isqrt", "preln_nowarmup_step8"], "factor": "norm", "claim": "fig 4"},
            "norm_warmup_isqrt": {"runs": ["postln_warmup_isqrt", "preln_warmup_isqrt"], "factor": "norm", "claim": "n"},
            "warmup_postln_isqrt": {"runs": ["postln_nowarmup_isqrt", "postln_warmup_isqrt"], "factor": "warmup",
                                    "claim": "w"},
            "decay_preln_warmup": {"runs": ["preln_warmup_isqrt", "preln_warmup_step8"], "factor": "decay", "claim": "d"},
        },
    }


DEMO = ["postln_warmup_isqrt", "preln_nowarmup_step8", "postln_nowarmup_isqrt", "preln_warmup_isqrt",
        "preln_nowarmup_isqrt"]


def by_name(result: dict) -> dict:
    return {c["name"]: c for c in result["comparisons"]}


def test_flatten_and_differing_keys():
    a = {"model": {"norm": "post"}, "schedule": {"decay_epochs": [8]}, "run": "a"}
    b = {"model": {"norm": "pre"}, "schedule": {"decay_epochs": [8]}, "run": "b"}
    assert flatten(a) == {"model.norm": "post", "schedule.decay_epochs": [8], "run": "a"}
    assert differing_keys([a, b]) == ["model.norm"]  # identity key "run" ignored, equal lists equal
    c = {"model": {"norm": "post", "heads": 4}}
    assert differing_keys([a, c]) == ["model.heads", "schedule.decay_epochs"]  # absent counts as different


def test_figure4_is_confounded_by_schedule():
    res = by_name(analyze_confounds(experiment(DEMO)))
    f4 = res["figure4"]
    assert f4["factor_key"] == "model.norm"
    assert f4["verdict"] == "confounded"
    assert f4["confounds"] == ["schedule.decay", "schedule.warmup"]
    assert f4["factor_values"] == {"postln_warmup_isqrt": "post", "preln_nowarmup_step8": "pre"}


def test_single_factor_pairs_flag_nothing():
    res = by_name(analyze_confounds(experiment(DEMO)))
    for name, key in (("norm_warmup_isqrt", "model.norm"), ("warmup_postln_isqrt", "schedule.warmup")):
        assert res[name]["verdict"] == "single-factor", name
        assert res[name]["confounds"] == []
        assert res[name]["factor_key"] == key


def test_comparison_with_unselected_run_is_skipped():
    result = analyze_confounds(experiment(DEMO))
    res = by_name(result)
    assert res["decay_preln_warmup"]["verdict"] == "skipped"
    assert "preln_warmup_step8" in res["decay_preln_warmup"]["reason"]
    assert result["skipped"] == ["decay_preln_warmup"]


def test_factor_that_does_not_vary_is_reported():
    exp = experiment(DEMO)
    exp["comparisons"]["bad"] = {"runs": ["postln_warmup_isqrt", "preln_warmup_isqrt"], "factor": "warmup", "claim": ""}
    c = by_name(analyze_confounds(exp))["bad"]
    assert c["verdict"] == "factor does not vary"
    assert c["confounds"] == ["model.norm"]


def test_markdown_states_keys_and_time(tmp_path):
    out = tmp_path / "report" / "confounds.md"
    result = write_confounds(experiment(DEMO), out)
    md = out.read_text()
    assert md == confounds_markdown(result)
    assert "figure4: factor model.norm; also differs: schedule.decay, schedule.warmup -> confounded." in md
    assert "norm_warmup_isqrt: factor model.norm; also differs: nothing else -> single-factor." in md
    assert "decay_preln_warmup: skipped" in md
    assert "not comparing time" in md


def test_hardware_note_when_devices_differ():
    res = analyze_confounds(experiment(DEMO), devices={"postln_warmup_isqrt": {"cpu A"}, "preln_nowarmup_step8": {"gpu B"}})
    assert any(h.startswith("figure4:") for h in res["hardware_notes"])


def test_bad_comparison_raises():
    exp = experiment(DEMO)
    exp["comparisons"]["x"] = {"runs": ["postln_warmup_isqrt", "preln_warmup_isqrt"], "factor": "colour"}
    with pytest.raises(LnReproError, match="colour"):
        analyze_confounds(exp)


def test_typed_experiment_reads_as_its_json():
    """The report passes ``Experiment.to_dict()`` (tuples); it must give what experiment.json (lists) gives."""
    exp = config.experiment(config.load_config([REPO / "config.yaml", REPO / "presets" / "demo.yaml"])).to_dict()
    exp["runs"]["preln_nowarmup_step8"]["schedule"]["decay_epochs"] = (3,)
    result = analyze_confounds(exp)
    assert result == analyze_confounds(json.loads(json.dumps(exp)))
    f4 = by_name(result)["figure4"]
    assert f4["confounds"] == ["schedule.decay", "schedule.decay_epochs", "schedule.warmup"]
    assert f4["confound_values"]["schedule.decay_epochs"] == {"postln_warmup_isqrt": [4], "preln_nowarmup_step8": [3]}
