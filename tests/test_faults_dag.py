"""Faults and reruns at the level of the DAG, on a two-run, two-epoch selection of the demo
(conftest.DEMO_PAIR, run once per session by the ``demo_pair_run`` fixture; a test that changes it works on a
copy): what a second ``snakemake``, a changed setting or a forced rerun does, a divergence, and a SIGKILL of
``snakemake`` itself. Reruns are read from ``snakemake -n``'s job list; results are compared with the clean
run (tests/run_results.py), never timings.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import DEMO_PAIR, REPO, DemoRun, copy_run, snakemake
from lnrepro.config import RunConfig, experiment, load_config
from lnrepro.errors import LnReproError
from lnrepro.io import file_sha256, json_text
from lnrepro.config.settings import used_settings
from run_results import score_diffs, table_diffs, training_diffs

WARMUP_ISQRT, NOWARMUP_STEP = "postln_warmup_isqrt", "preln_nowarmup_step8"  # the pair, in DEMO_PAIR
# One job of `snakemake -n`'s listing: "rule NAME:" or "localrule NAME:", then its indented fields.
_JOB = re.compile(r"^(?:local)?rule (\w+):\n((?:    .*\n)*)", re.M)
_WILDCARDS = re.compile(r"^    wildcards: (.*)$", re.M)
_STATS_ROW = re.compile(r"^(\w+)\s+(\d+)$", re.M)


def _jobs(text: str) -> list[str]:
    """The jobs a snakemake log lists, as ``rule`` or ``rule[wildcards]``, sorted; checked against its job stats."""
    jobs = []
    for m in _JOB.finditer(text):
        w = _WILDCARDS.search(m.group(2))
        jobs.append(f"{m.group(1)}[{w.group(1)}]" if w else m.group(1))
    stats = Counter(dict((name, int(n)) for name, n in _STATS_ROW.findall(text) if name != "total"))
    assert Counter(j.split("[")[0] for j in jobs) == stats, f"job list and job stats disagree:\n{text[-3000:]}"
    return sorted(jobs)


def _layer(path: Path, layer: dict) -> str:
    path.write_text(yaml.safe_dump(layer))
    return str(path)


def planned(run: DemoRun, *args: str, layer: dict | None = None, tmp: Path | None = None) -> list[str]:
    """The jobs ``snakemake -n`` would run in ``run``'s folder with DEMO_PAIR (and ``layer`` on top)."""
    configs = [*DEMO_PAIR] + ([_layer(tmp / "layer.yaml", layer)] if layer else [])
    proc = snakemake(run.workdir, "-n", "--configfile", *configs, *args)
    text = proc.stdout + proc.stderr
    return [] if "Nothing to be done" in text else _jobs(text)


@pytest.fixture(scope="module")
def every_job(demo_pair_run) -> list[str]:
    """Every job of the DAG (``-n --forceall``)."""
    jobs = planned(demo_pair_run, "--forceall")
    assert len([j for j in jobs if j.startswith("train_run[")]) == 2
    return jobs


def _of_run(jobs: list[str], run: str) -> list[str]:
    return [j for j in jobs if f"run={run}," in j]


def _slices(jobs: list[str], *names: str) -> list[str]:
    return [j for j in jobs if any(j.startswith(f"write_slice[slice={n}") for n in names)]


REPORT = ["all", "make_report"]


def _beams(section: dict, beam: int) -> dict:
    """The layer that sets every ``beam`` under the eval ``section`` (one, or one per split) to ``beam``."""
    return {k: beam if k == "beam" else _beams(v, beam) for k, v in section.items()
            if k == "beam" or isinstance(v, dict)}


def _demo(*layers: dict, tmp: Path):
    files = [REPO / "config.yaml", *(REPO / f for f in DEMO_PAIR)]
    return experiment(load_config(files + [_layer(tmp / f"l{i}.yaml", la) for i, la in enumerate(layers)]))


# ---- the slices: only what their readers read ----------------------------------------------------------------


def test_run_config_holds_only_the_schedule_settings_its_switches_use(tmp_path):
    x = _demo(tmp=tmp_path)
    for run in x.select:
        d = x.run_config(run, 1).to_dict()
        assert {f"schedule.{k}" for k in d["schedule"]} == used_settings(x.runs[run].schedule), run
        assert RunConfig.from_dict(d) == x.run_config(run, 1)  # read back as written
    isqrt = x.run_config(WARMUP_ISQRT, 1).to_dict()
    assert "decay_epochs" not in isqrt["schedule"] and "anchor_updates" in isqrt["schedule"]
    # a used setting absent or null is refused, naming it; only unused ones may be missing
    for broken in ({k: v for k, v in isqrt["schedule"].items() if k != "anchor_updates"},
                   {**isqrt["schedule"], "anchor_updates": None}):
        with pytest.raises(LnReproError, match="anchor_updates"):
            RunConfig.from_dict({**isqrt, "schedule": broken}, "config.json")


def test_gradinit_slices_ignore_the_beam_notes_mirror_and_the_runs_other_settings(tmp_path):
    base = _demo(tmp=tmp_path)
    eval_section = load_config([REPO / "config.yaml", *(REPO / f for f in DEMO_PAIR)])["defaults"]["eval"]
    changes = [{"defaults": {"eval": _beams(eval_section, 3)}}, {"notes": "another note"},
               {"defaults": {"schedule": {"decay_epochs": [1]}}},
               {"runs": {NOWARMUP_STEP: {"optim": {"lr_max": 1.0e-3}}}}]
    for change in changes:
        x = _demo(change, tmp=tmp_path)
        assert x.to_dict() != base.to_dict(), change  # the report's slice sees it ...
        assert x.gradinit_config() == base.gradinit_config(), change  # ... the gradinit ones do not
        assert x.gradinit_config(after_warmup=True) == base.gradinit_config(after_warmup=True), change
    # the demo's dataset has no download location; config.yaml's has a mirror
    paper = experiment(load_config([REPO / "config.yaml"]))
    mirror = _layer(tmp_path / "m.yaml", {"defaults": {"data": {"iwslt14": {"mirror": "/x"}}}})
    moved = experiment(load_config([REPO / "config.yaml", mirror]))
    assert moved.gradinit_config() == paper.gradinit_config() and moved.to_dict() == paper.to_dict()
    # the init job's slice does not carry the run measured after warm-up; that job's does, with its T_warmup
    assert base.gradinit_config().gradinit.after_warmup_run is None
    assert base.gradinit_config(after_warmup=True).warmup_updates == base.runs[WARMUP_ISQRT].schedule.warmup_updates


# ---- reruns: exactly the jobs a change reaches ---------------------------------------------------------------


def test_second_snakemake_has_nothing_to_do(demo_pair_run, every_job):
    assert {"gradinit", "make_report"} <= set(every_job)
    after = [j for j in every_job if j.startswith("gradinit_after_warmup[")]  # one per seed: the pair has one
    assert len(after) == 1 and f"run={WARMUP_ISQRT}," in after[0]
    assert planned(demo_pair_run) == []


def test_one_runs_setting_reruns_that_runs_jobs_and_the_report(demo_pair_run, every_job, tmp_path):
    jobs = planned(demo_pair_run, layer={"runs": {NOWARMUP_STEP: {"optim": {"lr_max": 1.0e-3}}}}, tmp=tmp_path)
    assert jobs == sorted(_of_run(every_job, NOWARMUP_STEP) + _slices(every_job, "experiment") + REPORT)


def test_beam_reruns_scoring_and_the_report_only(demo_pair_run, every_job, tmp_path):
    section = load_config([REPO / "config.yaml", *(REPO / f for f in DEMO_PAIR)])["defaults"]["eval"]
    jobs = planned(demo_pair_run, layer={"defaults": {"eval": _beams(section, 2)}}, tmp=tmp_path)
    scoring = [j for j in every_job if j.startswith("score_checkpoint")]
    assert len(scoring) == 2  # one per training: both of its checkpoints in one process
    assert jobs == sorted(scoring + _slices(every_job, "eval", "experiment") + REPORT)


def test_notes_rerun_the_report_only(demo_pair_run, every_job, tmp_path):
    jobs = planned(demo_pair_run, layer={"notes": "another note"}, tmp=tmp_path)
    assert jobs == sorted(_slices(every_job, "experiment") + REPORT)


def test_a_slice_too_long_for_a_shell_command_is_written_by_a_run_job(demo_pair_run, tmp_path):
    """Slices are written by shell jobs, their text on the command line (the bytes json_text writes); one longer
    than a shell argument may be (Linux: 128 KiB) by write_large_slice, with the same bytes."""
    x = _demo(tmp=tmp_path)
    assert (demo_pair_run.exp_dir / "experiment.json").read_text() == json_text(x.to_dict())
    every_split = x.eval.scoring(tuple(x.eval.splits))
    assert (demo_pair_run.exp_dir / "eval.json").read_text() == json_text(every_split.to_dict())
    run = copy_run(demo_pair_run, tmp_path)
    layer = {"notes": "a long note " * 11_000}  # 132,000 characters
    assert planned(run, layer=layer, tmp=tmp_path) == ["all", "make_report", "write_large_slice[slice=experiment]"]
    snakemake(run.workdir, "results/demo/experiment.json", "--cores", "1", "--configfile", *DEMO_PAIR,
              str(tmp_path / "layer.yaml"))
    assert (run.exp_dir / "experiment.json").read_text() == json_text(_demo(layer, tmp=tmp_path).to_dict())


def test_published_numbers_rerun_the_report_only(demo_pair_run, tmp_path):
    """published.yaml is an input of make_report (and of nothing else: experiment.json holds none of it)."""
    run = copy_run(demo_pair_run, tmp_path)
    published = run.workdir / "src" / "lnrepro" / "analysis" / "published.yaml"
    published.write_text(published.read_text(encoding="utf-8") + "# edited\n", encoding="utf-8")
    assert planned(run) == REPORT


def test_decay_epochs_retrain_only_the_step_decay_run(demo_pair_run, every_job, tmp_path):
    jobs = planned(demo_pair_run, layer={"defaults": {"schedule": {"decay_epochs": [1]}}}, tmp=tmp_path)
    assert jobs == sorted(_of_run(every_job, NOWARMUP_STEP) + _slices(every_job, "experiment") + REPORT)
    assert not _of_run(jobs, WARMUP_ISQRT) and "gradinit" not in jobs


# ---- forced reruns give the same numbers ---------------------------------------------------------------------


def _ran(proc: subprocess.CompletedProcess) -> Counter:
    """Jobs run, by rule, from a snakemake log."""
    return Counter(j.split("[")[0] for j in _jobs(proc.stdout + proc.stderr))


def test_forcerun_score_checkpoint_gives_the_same_numbers(demo_pair_run, tmp_path):
    run = copy_run(demo_pair_run, tmp_path)
    proc = snakemake(run.workdir, "--cores", "2", "--configfile", *DEMO_PAIR, "--forcerun", "score_checkpoint")
    assert _ran(proc)["score_checkpoint"] == 2 and "train_run" not in _ran(proc)
    assert score_diffs(demo_pair_run.exp_dir, run.exp_dir) == []
    assert table_diffs(demo_pair_run.exp_dir, run.exp_dir) == []


def test_forcerun_train_run_trains_afresh_to_the_same_weights_and_digests(demo_pair_run, tmp_path):
    """Without its state/ (a finished state would only write its outputs again), a forced training starts
    from update 0 and ends with byte-identical weights, the same manifest digests, losses and scores."""
    run = copy_run(demo_pair_run, tmp_path)
    for state in run.exp_dir.glob("runs/*/seed*/state"):
        shutil.rmtree(state)
    proc = snakemake(run.workdir, "--cores", "2", "--configfile", *DEMO_PAIR, "--forcerun", "train_run")
    assert _ran(proc)["train_run"] == 2
    for log in run.exp_dir.glob("runs/*/seed*/train.jsonl"):
        attempts = [r for r in map(json.loads, log.read_text().splitlines()) if r["kind"] == "attempt"]
        assert [(a["attempt"], a["resumed_update"]) for a in attempts] == [(1, 0)], log
    assert training_diffs(demo_pair_run.exp_dir, run.exp_dir) == []
    assert score_diffs(demo_pair_run.exp_dir, run.exp_dir) == []
    assert table_diffs(demo_pair_run.exp_dir, run.exp_dir) == []


def test_divergence_is_recorded_the_dag_completes_and_the_report_shows_it(demo_pair_run, tmp_path):
    run = copy_run(demo_pair_run, tmp_path)
    huge = _layer(tmp_path / "huge.yaml", {"runs": {NOWARMUP_STEP: {"optim": {"lr_max": 1.0e6}}}})
    proc = snakemake(run.workdir, "--cores", "2", "--configfile", *DEMO_PAIR, huge)
    assert _ran(proc)["train_run"] == 1  # the other run is not retrained
    run_dir = run.exp_dir / "runs" / NOWARMUP_STEP / "seed1"
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "diverged"
    for ep in (1, 2):
        assert json.loads((run_dir / "epochs" / f"epoch{ep:03d}.json").read_text())["status"] == "diverged"
        assert json.loads((run_dir / "eval" / f"epoch{ep:03d}.json").read_text())["status"] == "diverged"
    tables = run.exp_dir / "report" / "tables"
    divergence = pd.read_csv(tables / "divergence.csv").set_index("run")
    assert divergence.loc[NOWARMUP_STEP, "n_diverged"] == 1 and divergence.loc[WARMUP_ISQRT, "n_diverged"] == 0
    assert pd.read_csv(tables / "failures.csv").set_index("run").loc[NOWARMUP_STEP, "n_diverged"] == 1
    assert "diverged" in (run.exp_dir / "report" / "index.html").read_text()


# ---- a run's config.json edited by hand ----------------------------------------------------------------------


def test_a_hand_edited_run_config_is_refused_and_forcerun_write_run_config_restores_the_run(demo_pair_run, tmp_path):
    """config.json is not the one the experiment resolves the run to (lr_max 3e-3 to 1e-4 by hand): the trainer
    stops with one message before touching the finished state; ``--forcerun write_run_config`` writes it again,
    and the finished training's outputs come back without training: every result the clean run's."""
    run = copy_run(demo_pair_run, tmp_path)
    run_dir = run.exp_dir / "runs" / WARMUP_ISQRT / "seed1"
    config = run_dir / "config.json"
    state = {p.relative_to(run_dir): file_sha256(p) for p in sorted((run_dir / "state").rglob("*.pt"))}
    settings = json.loads(config.read_text())
    settings["optim"]["lr_max"] = 1.0e-4
    config.write_text(json.dumps(settings, indent=2, sort_keys=True) + "\n")
    proc = snakemake(run.workdir, "--cores", "2", "--configfile", *DEMO_PAIR, check=False)
    assert proc.returncode != 0, "a hand-edited config.json was trained"
    log = (run.exp_dir / "logs" / "train_run" / f"{WARMUP_ISQRT}.seed1.log").read_text()
    assert (f"results/demo/runs/{WARMUP_ISQRT}/seed1/config.json: not the config.json the experiment resolves this "
            "run to") in log and "snakemake --forcerun write_run_config" in log, log[-3000:]
    assert {p.relative_to(run_dir): file_sha256(p) for p in sorted((run_dir / "state").rglob("*.pt"))} == state
    snakemake(run.workdir, "--cores", "2", "--configfile", *DEMO_PAIR, "--forcerun", "write_run_config")
    assert config.read_bytes() == (demo_pair_run.exp_dir / config.relative_to(run.exp_dir)).read_bytes()
    for train_log in run.exp_dir.glob("runs/*/seed*/train.jsonl"):  # nothing trained again
        attempts = [r for r in map(json.loads, train_log.read_text().splitlines()) if r["kind"] == "attempt"]
        assert [a["attempt"] for a in attempts] == [1], train_log
    assert training_diffs(demo_pair_run.exp_dir, run.exp_dir) == []
    assert score_diffs(demo_pair_run.exp_dir, run.exp_dir) == []
    assert table_diffs(demo_pair_run.exp_dir, run.exp_dir) == []


def test_max_tokens_shorter_than_a_pair_keeps_the_finished_runs_and_reverting_it_retrains_nothing(demo_pair_run,
                                                                                                   tmp_path):
    """train.max_tokens 16 (shorter than the demo's longest pair): every training stops with the message before
    its finished state is touched; reverting the setting writes the finished trainings' outputs again, without training."""
    run = copy_run(demo_pair_run, tmp_path)
    states = {p.relative_to(run.exp_dir): file_sha256(p) for p in sorted(run.exp_dir.glob("runs/*/seed*/state/**/*"))
              if p.is_file() and p.name != "lock"}
    short = _layer(tmp_path / "short.yaml", {"defaults": {"train": {"max_tokens": 16}}})
    proc = snakemake(run.workdir, "--cores", "2", "--keep-going", "--configfile", *DEMO_PAIR, short, check=False)
    assert proc.returncode != 0
    for name in (WARMUP_ISQRT, NOWARMUP_STEP):
        log = (run.exp_dir / "logs" / "train_run" / f"{name}.seed1.log").read_text()
        assert "train.max_tokens: sentence pair" in log and "more than max_tokens=16" in log, log[-3000:]
    assert {p.relative_to(run.exp_dir): file_sha256(p) for p in sorted(run.exp_dir.glob("runs/*/seed*/state/**/*"))
            if p.is_file() and p.name != "lock"} == states  # every finished weights and state file as it was
    snakemake(run.workdir, "--cores", "2", "--configfile", *DEMO_PAIR)
    for train_log in run.exp_dir.glob("runs/*/seed*/train.jsonl"):
        attempts = [r for r in map(json.loads, train_log.read_text().splitlines()) if r["kind"] == "attempt"]
        assert [a["attempt"] for a in attempts] == [1], train_log
    assert training_diffs(demo_pair_run.exp_dir, run.exp_dir) == []
    assert score_diffs(demo_pair_run.exp_dir, run.exp_dir) == []
    assert table_diffs(demo_pair_run.exp_dir, run.exp_dir) == []


# ---- SIGKILL of snakemake itself ------------------------------------------------------------------------------


def _processes_in(workdir: Path) -> dict[int, str]:
    """pid -> command line of every process working in ``workdir`` (the jobs a snakemake there started)."""
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if Path(os.readlink(proc / "cwd")) == workdir:
                found[int(proc.name)] = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:  # ended meanwhile, or not ours to read
            continue
    return found


def _kill(pids) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_sigkill_of_snakemake_then_unlock_and_rerun_incomplete_equals_a_clean_run(demo_pair_run, tmp_path):
    """Kill snakemake (only it) while its trainers run; they live on. ``--unlock`` and ``--rerun-incomplete``
    at once, the orphans still running: each rerun trainer waits for its state's lock, then writes the finished
    training's outputs again; nothing is trained twice and every result equals the clean run's. Slow by nature:
    the pair trains from nothing, killed mid-way, and its whole DAG runs again."""
    run = copy_run(demo_pair_run, tmp_path)
    workdir, exp = run.workdir.resolve(), run.exp_dir
    for d in [*exp.glob("runs/*"), exp / "report"]:  # untrained: every training, scoring, after warm-up, the report
        shutil.rmtree(d)
    with open(tmp_path / "killed.log", "w") as log:
        first = subprocess.Popen([sys.executable, "-m", "snakemake", "--cores", "2", "--configfile", *DEMO_PAIR],
                                 cwd=workdir, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while not list(exp.glob("runs/*/seed*/state/last.pt")):  # a training is mid-epoch 1
            assert first.poll() is None, (tmp_path / "killed.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "no training checkpointed in 300 s"
            time.sleep(0.05)
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
        orphans = {pid for pid, cmd in _processes_in(workdir).items() if "lnrepro train" in cmd}
        assert orphans, "no trainer outlived snakemake"
        snakemake(workdir, "--unlock", "--configfile", *DEMO_PAIR)
        rerun = snakemake(workdir, "--cores", "2", "--rerun-incomplete", "--configfile", *DEMO_PAIR)
    finally:
        _kill(_processes_in(workdir))
    assert _ran(rerun)["train_run"] == 2  # both rerun: their outputs were incomplete or missing
    for state_log in exp.glob("runs/*/seed*/state/log.jsonl"):  # one training, from update 0: none twice
        attempts = [r for r in map(json.loads, state_log.read_text().splitlines()) if r.get("kind") == "attempt"]
        assert [(a["attempt"], a["resumed_update"]) for a in attempts] == [(1, 0)], state_log
    waited = [p.name for p in exp.glob("logs/train_run/*.log") if "waiting until it ends" in p.read_text()]
    print(f"\n{len(orphans)} orphaned trainer(s); rerun trainers that waited for a lock: {waited}")
    assert training_diffs(demo_pair_run.exp_dir, exp) == []
    assert score_diffs(demo_pair_run.exp_dir, exp) == []
    assert table_diffs(demo_pair_run.exp_dir, exp) == []
