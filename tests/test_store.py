"""A study's store (lnrepro.store, lnrepro.store_status): the demo pair with two seeds published in two parts, each
from its own fresh working directory, against one run of both seeds; every refusal; the report from the store."""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import shutil
from pathlib import Path

import pandas as pd
import pytest

from conftest import DEMO_PAIR, copy_repo, snakemake
from lnrepro import cli, store
from lnrepro.io import json_text
from lnrepro.paths import Paths

# Two seeds of the demo pair, whose postln_warmup_isqrt is measured after warm-up: each part, split by seed,
# measures its own seed of it (an output of that unit).
TWO_SEEDS = "seeds: [1, 2]\n"
LAYERS = (*DEMO_PAIR, "two_seeds.yaml")
P = Paths("demo")
# What the report derives from time or from where a unit ran, which differs between any two runs of the same units:
# the columns of wall-clock, CPU seconds, tokens per second, the host and its measured matmul peak, and the rows
# of quality at equal training CPU time (a budget labelled "training CPU N s", the CPU time to a target); and
# git_dirty, which this test sets false in the parts' records (hosts.csv).
TIME_COLUMNS = re.compile(r"wall|cpu|tokens_per_s|s_per_update|spread|host|gflops|git_dirty")
TIME_ROWS = re.compile(r"training CPU|cpu_s|wall_s")


def _workdir(tmp: Path) -> Path:
    """A fresh working directory: a copy of the repository with the two-seed layer, no results/, no .snakemake/."""
    work = copy_repo(tmp / "repo")
    (work / "two_seeds.yaml").write_text(TWO_SEEDS)
    return work


def _clean(results: Path, dirty: bool = False) -> None:
    """Each run.json's and score file's git_dirty set to ``dirty`` (the tests train from a worktree that may have
    changes: false stands for a clean clone)."""
    for path in [*results.glob("runs/*/seed*/run.json"), *results.glob("runs/*/seed*/eval/epoch*.json")]:
        record = json.loads(path.read_text())
        record["git_dirty"] = dirty
        path.write_text(json_text(record))


def _publish(work: Path, store_dir: Path, *extra: str, results: Path | None = None, capsys=None) -> tuple[int, str]:
    """``lnrepro publish`` in ``work`` (its config.yaml), through the command line's main; (exit status, output)."""
    import os

    cwd = os.getcwd()
    os.chdir(work)
    try:
        rc = cli.main(["publish", str(results or work / P.root), str(store_dir), *extra])
    finally:
        os.chdir(cwd)
    out = capsys.readouterr() if capsys else None
    return rc, (out.out + out.err) if out else ""


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _jobs(log: str) -> dict[str, int]:
    """Snakemake's job counts by rule, from its "Job stats" table."""
    table = log.split("Job stats:", 1)[1].split("\n\n", 1)[0]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M)}


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Part one (seed 1, published into a new store) and part two, run in a fresh working directory from the
    command ``--status`` proposes and published; the store after each part (``store1``, ``store``); and one run of
    both seeds (``whole``): part one's working directory run on to the whole study, seed 2 trained there too, as a
    study grown in one place. Slow by nature: three workflow runs (data, BPE, trainings, scoring), the parts each
    from a fresh copy of the repository, as parts on two machines would run."""
    import subprocess
    import sys

    base = tmp_path_factory.mktemp("store")
    one = _workdir(base / "one")
    seed1 = [P.score(run, 1, "002") for run in ("postln_warmup_isqrt", "preln_nowarmup_step8")]
    log1 = snakemake(one, P.experiment_json, P.gradinit_csv, P.gradinit_fit_csv, *seed1,
                     P.gradinit_after_warmup_csv("postln_warmup_isqrt", 1), "--cores", "2", "--configfile",
                     *LAYERS).stderr
    assert _jobs(log1)["train_run"] == 2 and _jobs(log1)["gradinit_after_warmup"] == 1
    whole = Path(shutil.copytree(one, base / "whole" / "repo", symlinks=True))  # modification times kept
    log_whole = snakemake(whole, "--cores", "2", "--configfile", *LAYERS).stderr
    assert _jobs(log_whole)["train_run"] == 2 and "prepare_corpus" not in _jobs(log_whole)  # seed 2 only
    _clean(one / P.root)
    store_dir = base / "published" / "demo"
    lnrepro = [sys.executable, "-m", "lnrepro"]
    first = subprocess.run([*lnrepro, "publish", P.root, str(store_dir), "--configfile", *LAYERS], cwd=one,
                           capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    assert "added postln_warmup_isqrt seed 1" in first.stdout and "added 2," in first.stdout
    store1 = base / "store1"
    shutil.copytree(store_dir, store1)
    status = subprocess.run([*lnrepro, "publish", "--status", str(store_dir), "--minutes", "60", "--cores", "2"],
                            cwd=one, capture_output=True, text=True, check=True).stdout
    assert "2 of 4 units stored" in status and "missing: postln_warmup_isqrt seed 2" in status
    assert "estimated" in status or "measured" in status
    assert "of scoring" in status  # the stored units' score files record their CPU time
    command = shlex.split(status.strip().splitlines()[-1])
    assert command[0] == "snakemake" and not any("seed1" in c for c in command)
    assert P.gradinit_after_warmup_csv("postln_warmup_isqrt", 2) in command
    assert command[-2:] == ["--configfile", str(store_dir / "study.yaml")]
    two = base / "two" / "repo"
    two.parent.mkdir()
    shutil.copytree(one, two, ignore=shutil.ignore_patterns("results", ".snakemake"))
    log2 = snakemake(two, *command[1:]).stderr
    jobs = _jobs(log2)
    assert jobs["train_run"] == 2 and jobs["score_checkpoint"] == 2  # only the missing units: seed 2 of each run
    assert jobs["gradinit_after_warmup"] == 1 and "gradinit" not in jobs  # seed 2's, in the part that trains it
    assert not (two / P.root / "runs" / "postln_warmup_isqrt" / "seed1").exists()
    _clean(two / P.root)
    second = subprocess.run([*lnrepro, "publish", P.root, str(store_dir)], cwd=two, capture_output=True, text=True)
    assert second.returncode == 0, second.stderr
    assert "added 2, kept 0" in second.stdout
    print(f"\n{first.stdout}{status}{second.stdout}jobs part one {_jobs(log1)}, part two {jobs}")
    return {"whole": whole, "one": one, "two": two, "store1": store1, "store": store_dir}


def _untimed(df: pd.DataFrame) -> tuple[pd.DataFrame, list[str], int]:
    """``df`` without its time-derived columns and rows; the columns and the number of rows left out."""
    columns = [c for c in df.columns if TIME_COLUMNS.search(str(c))]
    df = df.drop(columns=columns)
    timed = df.astype(str).apply(lambda col: col.str.contains(TIME_ROWS)).any(axis=1)
    return df[~timed].reset_index(drop=True), columns, int(timed.sum())


def _tables(report: Path) -> dict[str, pd.DataFrame]:
    return {p.stem: pd.read_csv(p) for p in sorted((report / "tables").glob("*.csv"))}


def test_store_report_equals_one_run_of_both_seeds(parts: dict[str, Path], tmp_path: Path) -> None:
    """The report of the store published in two parts equals the report of one run of both seeds, table by table,
    except the columns derived from time or host; rebuilt twice, in two places, with no weights anywhere, it has the
    same bytes."""
    store_dir = parts["store"]
    assert not list(store_dir.rglob("*.pt")) and not list(store_dir.rglob("state"))
    size = sum(p.stat().st_size for p in store_dir.rglob("*") if p.is_file())
    print(f"\nstore: {len(list(store_dir.rglob('*')))} entries, {size} bytes")
    assert cli.main(["report", "--store", str(store_dir)]) == 0
    other = tmp_path / "elsewhere" / "demo"
    shutil.copytree(store_dir, other, ignore=shutil.ignore_patterns("report"))
    assert cli.main(["report", "--store", str(other)]) == 0
    assert _snapshot(store_dir / "report") == _snapshot(other / "report")

    whole, parted = _tables(parts["whole"] / P.report), _tables(store_dir / "report")
    assert set(whole) == set(parted)
    exempt = {}
    for name in sorted(whole):
        (a, columns, rows), (b, _, _) = _untimed(whole[name]), _untimed(parted[name])
        exempt[name] = (columns, rows)
        pd.testing.assert_frame_equal(a, b, check_exact=False, rtol=1e-9, obj=name)
    print("exempt (columns, rows):", {k: v for k, v in exempt.items() if v != ([], 0)})
    html = (store_dir / "report" / "index.html").read_text()
    assert "Incomplete" not in html
    # measured after warm-up (the first epoch that reaches T_warmup), each seed in its part
    assert re.search(r"seed 1: epoch \d", html) and re.search(r"seed 2: epoch \d", html)


def test_incomplete_store_says_so_first(parts: dict[str, Path]) -> None:
    """The store after part one renders, and says first which units it lacks."""
    assert cli.main(["report", "--store", str(parts["store1"])]) == 0
    html = (parts["store1"] / "report" / "index.html").read_text()
    assert "Incomplete: 2 of 4 units." in html
    assert "Missing: postln_warmup_isqrt seed 2, preln_nowarmup_step8 seed 2" in html
    assert html.index("Incomplete") < html.index('id="answer"')


# ---- refusals: each through the command line, with its message, the store's bytes unchanged --------------------


def _store_copy(parts: dict[str, Path], tmp_path: Path) -> Path:
    """A copy of the store after part one (seed 1 of both runs)."""
    return Path(shutil.copytree(parts["store1"], tmp_path / "published" / "demo",
                                ignore=shutil.ignore_patterns("report")))


def _results_copy(work: Path, tmp_path: Path, name: str = "part") -> Path:
    """A copy of a part's results tree without weights, run.json's git_dirty false."""
    results = Path(shutil.copytree(work / P.root, tmp_path / name / P.root, ignore=shutil.ignore_patterns("state")))
    _clean(results)
    return results


def _refused(parts: dict[str, Path], store_dir: Path, results: Path, capsys, *extra: str) -> str:
    before = _snapshot(store_dir)
    rc, out = _publish(parts["one"], store_dir, *extra, results=results, capsys=capsys)
    assert rc == 1 and "refused: " in out and f"{store_dir} is unchanged" in out, out
    assert _snapshot(store_dir) == before
    print(f"\n{out}")
    return out


def test_same_part_twice_and_same_units_again_change_nothing(parts: dict[str, Path], tmp_path: Path,
                                                             capsys) -> None:
    """Publishing part one again keeps its units and writes nothing; the one run of both seeds keeps seed 1 and
    adds seed 2, which, trained apart from part two's on the same host, has part two's identity (kept)."""
    store_dir = _store_copy(parts, tmp_path)
    before = _snapshot(store_dir)
    rc, out = _publish(parts["one"], store_dir, results=_results_copy(parts["one"], tmp_path), capsys=capsys)
    assert rc == 0 and "added 0, kept 2" in out and "kept postln_warmup_isqrt seed 1" in out
    assert _snapshot(store_dir) == before
    whole = _results_copy(parts["whole"], tmp_path, "whole")
    rc, out = _publish(parts["one"], store_dir, results=whole, capsys=capsys)
    assert rc == 0 and "added 2, kept 2" in out, out
    full = Path(shutil.copytree(parts["store"], tmp_path / "full" / "demo", ignore=shutil.ignore_patterns("report")))
    rc, out = _publish(parts["one"], full, results=whole, capsys=capsys)
    assert rc == 0 and "added 0, kept 4" in out and "kept postln_warmup_isqrt seed 2" in out, out


def test_refuses_other_run_settings(parts: dict[str, Path], tmp_path: Path, capsys) -> None:
    """A part trained with another learning rate for one run (a real training) is refused."""
    work = Path(shutil.copytree(parts["one"], tmp_path / "lr" / "repo"))
    (work / "lr.yaml").write_text("runs: {preln_nowarmup_step8: {optim: {lr_max: 1.0e-3}}}\n")
    log = snakemake(work, P.experiment_json, P.score("preln_nowarmup_step8", 1, "002"),
                    "--cores", "2", "--configfile", *LAYERS, "lr.yaml").stderr
    assert _jobs(log)["train_run"] == 1
    out = _refused(parts, _store_copy(parts, tmp_path), _results_copy(work, tmp_path), capsys)
    assert "resolved settings (experiment.json) differ from the study's" in out
    assert "runs.preln_nowarmup_step8.optim.lr_max" in out


def test_refuses_other_data(parts: dict[str, Path], tmp_path: Path, capsys) -> None:
    """A part whose corpus was generated from another seed (its data and BPE rebuilt for real) is refused."""
    work = Path(shutil.copytree(parts["one"], tmp_path / "data" / "repo"))
    (work / "data.yaml").write_text("defaults: {data: {synthetic: {seed: 99}}}\n")
    snakemake(work, P.experiment_json, *P.bpe_ids, "--cores", "2", "--configfile", *LAYERS, "data.yaml")
    out = _refused(parts, _store_copy(parts, tmp_path), _results_copy(work, tmp_path), capsys)
    assert "the part's data or BPE differ from the study's (data/bpe/spm.model" in out
    assert "another corpus or vocabulary" in out


def test_refuses_a_dirty_checkout(parts: dict[str, Path], tmp_path: Path, capsys) -> None:
    results = _results_copy(parts["two"], tmp_path)
    _clean(results, dirty=True)
    out = _refused(parts, _store_copy(parts, tmp_path), results, capsys)
    assert "git_dirty is true (trained from a checkout with uncommitted changes" in out


def test_refuses_a_record_failing_its_digest(parts: dict[str, Path], tmp_path: Path, capsys) -> None:
    """A score file whose weights digest is not its manifest's."""
    results = _results_copy(parts["two"], tmp_path)
    score = results / "runs" / "preln_nowarmup_step8" / "seed2" / "eval" / "epoch001.json"
    record = json.loads(score.read_text())
    record["weights_sha256"] = "0" * 64
    score.write_text(json_text(record))
    out = _refused(parts, _store_copy(parts, tmp_path), results, capsys)
    assert "preln_nowarmup_step8 seed 2's records do not belong to the study" in out and str(score) in out


def test_refuses_a_stored_unit_with_another_identity(parts: dict[str, Path], tmp_path: Path, capsys) -> None:
    """Seed 1 again with one hypothesis changed (and its score file recording the change, as a rescoring that
    decoded otherwise would): the message names the file that differs."""
    results = _results_copy(parts["one"], tmp_path)
    hyp = results / "runs" / "postln_warmup_isqrt" / "seed1" / "eval" / "epoch002.test.hyp"
    hyp.write_text("another hypothesis\n" + hyp.read_text().split("\n", 1)[1])
    score = hyp.parent / "epoch002.json"
    record = json.loads(score.read_text())
    record["hypotheses_sha256"]["test"] = hashlib.sha256(hyp.read_bytes()).hexdigest()
    score.write_text(json_text(record))
    out = _refused(parts, _store_copy(parts, tmp_path), results, capsys)
    assert "postln_warmup_isqrt seed 1 is already stored with another identity; these records differ: " in out
    assert str(hyp) in out


def test_a_publish_failing_between_units_leaves_the_store_as_it_was(parts: dict[str, Path], tmp_path: Path,
                                                                    capsys, monkeypatch) -> None:
    """A failure after the first unit is written leaves the store's bytes as they were and nothing beside it;
    the same publish then completes."""
    store_dir = _store_copy(parts, tmp_path)
    before = _snapshot(store_dir)
    results = _results_copy(parts["two"], tmp_path)
    add = store._add_unit
    calls = []

    def failing(*args, **kwargs):
        if calls:
            raise OSError(28, "No space left on device", str(args[0]))
        calls.append(args)
        return add(*args, **kwargs)

    monkeypatch.setattr(store, "_add_unit", failing)
    rc, out = _publish(parts["one"], store_dir, results=results, capsys=capsys)
    assert rc == 1 and "no space left" in out and calls
    assert _snapshot(store_dir) == before
    assert sorted(p.name for p in store_dir.parent.iterdir()) == [".demo.lock", "demo"]  # the lock stays
    monkeypatch.setattr(store, "_add_unit", add)
    rc, out = _publish(parts["one"], store_dir, results=results, capsys=capsys)
    assert rc == 0 and "added 2, kept 0" in out


def test_a_grid_extension_grows_the_study_and_nothing_else_does(tmp_path: Path) -> None:
    """The study's settings may grow by a value recorded under a grid's extended: (its run added); another value
    of a setting, or a grid value added without being recorded as an extension, is another study."""
    import yaml

    from conftest import REPO
    from lnrepro.config import experiment, load_config

    def resolved(layer: dict) -> dict:
        path = tmp_path / "layer.yaml"
        path.write_text(yaml.safe_dump(layer))
        exp = experiment(load_config([REPO / "config.yaml", REPO / "presets" / "demo.yaml", path]))
        return json.loads(json_text(exp.to_dict()))

    study = resolved({})
    values = {"optim.lr_max": [1.5e-3, 6.0e-3, 1.2e-2], "schedule.warmup_updates": [140]}
    grown = resolved({"grids": {"tune_postln": {"values": values, "extended": {"optim.lr_max": [1.2e-2]}}}})
    assert set(grown["runs"]) - set(study["runs"]) == {"postln_warmup_isqrt__lr_max=1.2e-2__warmup_updates=140"}
    assert store._grown_by_extension(study, grown)
    assert not store._grown_by_extension(grown, study)
    unrecorded = json.loads(json.dumps(grown))
    unrecorded["grids"]["tune_postln"]["extended"] = {}
    assert not store._grown_by_extension(study, unrecorded)
    assert not store._grown_by_extension(study, resolved({"defaults": {"optim": {"lr_max": 1.0e-3}}}))


def test_bleu_recomputed_from_the_stored_hypotheses(parts: dict[str, Path]) -> None:
    """docs/running.md's command: sacrebleu over a stored hypothesis file against the reference the data stages
    rebuild (its digest the store's) gives the score file's tokenized BLEU."""
    import subprocess
    import sys

    from lnrepro.io import file_sha256

    store_dir, reference = parts["store"], parts["two"] / P.root / "data" / "prepared" / "test.en"
    assert file_sha256(reference) == json.loads((store_dir / "store.json").read_text())["study"][
        "data/prepared/test.en"]
    run_dir = store_dir / "runs" / "postln_warmup_isqrt" / "seed2" / "eval"
    sacrebleu = Path(sys.executable).parent / "sacrebleu"
    command = (f"zcat {run_dir / 'epoch002.test.hyp.gz'} | {sacrebleu} {reference} --tokenize none --force -b "
               "-w 6")
    score = float(subprocess.run(command, shell=True, check=True, capture_output=True, text=True).stdout)
    recorded = json.loads((run_dir / "epoch002.json").read_text())["splits"]["test"]["bleu_tok"]
    assert score == pytest.approx(recorded, abs=1e-6)


def test_a_partly_scored_unit_is_named_and_left_out(parts: dict[str, Path], tmp_path: Path, capsys) -> None:
    """Part two with one score file missing: the other unit is added, this one named and left out."""
    results = _results_copy(parts["two"], tmp_path)
    (results / "runs" / "preln_nowarmup_step8" / "seed2" / "eval" / "epoch002.json").unlink()
    rc, out = _publish(parts["one"], _store_copy(parts, tmp_path), results=results, capsys=capsys)
    assert rc == 0 and "added 1, kept 0 (already stored, same identity), left out 1" in out
    assert "left out preln_nowarmup_step8 seed 2: unfinished or partly done: no eval/epoch002.json" in out


def test_a_unit_without_its_gradient_after_warmup_is_left_out(parts: dict[str, Path], tmp_path: Path,
                                                                capsys) -> None:
    """Part two without seed 2's gradinit_after_warmup.csv: that unit of the after-warm-up run is partly done."""
    results = _results_copy(parts["two"], tmp_path)
    (results / "runs" / "postln_warmup_isqrt" / "seed2" / "gradinit_after_warmup.csv").unlink()
    rc, out = _publish(parts["one"], _store_copy(parts, tmp_path), results=results, capsys=capsys)
    assert rc == 0 and "added 1, kept 0 (already stored, same identity), left out 1" in out
    assert "left out postln_warmup_isqrt seed 2: unfinished or partly done: no gradinit_after_warmup.csv" in out


def test_refuses_a_gradient_after_warmup_of_another_seed(parts: dict[str, Path], tmp_path: Path, capsys) -> None:
    """Seed 1's table copied into seed 2's run folder is not seed 2's."""
    results = _results_copy(parts["two"], tmp_path)
    table = results / "runs" / "postln_warmup_isqrt" / "seed2" / "gradinit_after_warmup.csv"
    shutil.copyfile(parts["one"] / P.gradinit_after_warmup_csv("postln_warmup_isqrt", 1), table)
    out = _refused(parts, _store_copy(parts, tmp_path), results, capsys)
    assert "postln_warmup_isqrt seed 2's records do not belong to the study" in out
    assert f"{table}: not the table its settings give" in out


# ---- the store as a database: one writer at a time, every read checked against its index, recovery ------------


def _lnrepro(cwd: Path, *args: str) -> "subprocess.CompletedProcess":
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "lnrepro", *args], cwd=cwd, capture_output=True, text=True)


def test_two_publishes_at_once_keep_every_unit(parts: dict[str, Path], tmp_path: Path) -> None:
    """Part one and part two published into one new store at the same moment, ten times: the second waits for the
    first's lock (and says so) and adds its units to the store the first made; every trial ends with all 4."""
    import subprocess
    import sys

    one, two = _results_copy(parts["one"], tmp_path, "one"), _results_copy(parts["two"], tmp_path, "two")
    counts, waited = [], 0
    for trial in range(10):
        store_dir = tmp_path / f"trial{trial}" / "demo"
        procs = [subprocess.Popen([sys.executable, "-m", "lnrepro", "publish", str(results), str(store_dir),
                                   "--configfile", *LAYERS], cwd=parts["one"], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for results in (one, two)]
        outs = [proc.communicate() for proc in procs]
        assert [proc.returncode for proc in procs] == [0, 0], outs
        waited += sum("waiting until it ends" in err for _, err in outs)
        counts.append(len(json.loads((store_dir / "store.json").read_text())["units"]))
    print(f"\nunits after each of ten pairs of concurrent publishes: {counts}; a publish waited {waited} times")
    assert counts == [4] * 10


DAMAGE = {
    "an edited score file": lambda d: _edit_json(d / "runs/preln_nowarmup_step8/seed2/eval/epoch001.json"),
    "a cut hypothesis file": lambda d: _cut(d / "runs/preln_nowarmup_step8/seed2/eval/epoch002.test.hyp.gz"),
    "a deleted unit folder": lambda d: shutil.rmtree(d / "runs/preln_nowarmup_step8/seed2"),
    "a zeroed digest in store.json": lambda d: _zero_digest(d / "store.json"),
}


def _edit_json(path: Path) -> None:
    record = json.loads(path.read_text())
    record["splits"]["valid"]["bleu_tok"] += 10.0
    path.write_text(json_text(record))


def _cut(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])


def _zero_digest(index: Path) -> None:
    data = json.loads(index.read_text())
    data["units"]["preln_nowarmup_step8/seed2"]["files"]["summary.json"] = "0" * 64
    index.write_text(json_text(data))


@pytest.mark.parametrize("fault", DAMAGE)
def test_a_damaged_store_is_named_by_every_read_and_repaired_by_its_part(parts: dict[str, Path], tmp_path: Path,
                                                                        fault: str) -> None:
    """A store changed behind its index: report --store and publish --status refuse, naming what differs and the
    command that repairs it; publishing the part that holds the unit again repairs it (not "kept")."""
    store_dir = Path(shutil.copytree(parts["store"], tmp_path / "published" / "demo",
                                     ignore=shutil.ignore_patterns("report")))
    DAMAGE[fault](store_dir)
    for command in (["report", "--store", str(store_dir)], ["publish", "--status", str(store_dir)]):
        proc = _lnrepro(parts["two"], *command)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
        line = proc.stderr.strip()
        assert "\n" not in line and f"{store_dir}: stored files differ from its index store.json: " in line
        assert ("runs/preln_nowarmup_step8/seed2/" in line and "the part that holds preln_nowarmup_step8/seed2"
                in line and f"lnrepro publish results/demo {store_dir}" in line), line
    assert not (store_dir / "report").exists()
    proc = _lnrepro(parts["two"], "publish", P.root, str(store_dir))
    assert proc.returncode == 0, proc.stderr
    assert "added 0, kept 1 (already stored, same identity), left out 0, repaired " in proc.stdout, proc.stdout
    assert "kept preln_nowarmup_step8 seed 2" not in proc.stdout
    assert store.damage(store_dir, store.Index.read(store_dir)) == {}
    assert _snapshot(store_dir) == {k: v for k, v in _snapshot(parts["store"]).items() if not k.startswith("report")}


def test_damage_a_part_cannot_repair_is_named_after_publishing(parts: dict[str, Path], tmp_path: Path,
                                                               capsys) -> None:
    """Part one cannot repair a unit of part two: it publishes and ends with exit 1, naming what still differs."""
    store_dir = Path(shutil.copytree(parts["store"], tmp_path / "published" / "demo",
                                     ignore=shutil.ignore_patterns("report")))
    DAMAGE["an edited score file"](store_dir)
    rc, out = _publish(parts["one"], store_dir, results=_results_copy(parts["one"], tmp_path), capsys=capsys)
    assert rc == 1 and "kept postln_warmup_isqrt seed 1" in out
    assert (f"lnrepro publish: error: {store_dir}: stored files differ from its index store.json: "
            "runs/preln_nowarmup_step8/seed2/eval/epoch001.json (sha256 ") in out, out


def test_a_publish_killed_while_replacing_the_store_is_recovered_by_the_next_command(parts: dict[str, Path],
                                                                                      tmp_path: Path) -> None:
    """A SIGKILL between io.atomic_directory's two renames leaves the store renamed aside (``.demo.XXXXXXXX.old``)
    and the new one staged (``.tmp``), and no store: the next command (here --status) takes the lock, puts the
    store back as it was and removes the staging; one killed after both renames leaves only the ``.old``, which
    the next command removes."""
    store_dir = _store_copy(parts, tmp_path)
    before = _snapshot(store_dir)
    old, staged = store_dir.parent / ".demo.k1ll3d_a.old", store_dir.parent / ".demo.k1ll3d_a.tmp"
    shutil.copytree(store_dir, staged)
    store_dir.rename(old)
    proc = _lnrepro(parts["one"], "publish", "--status", str(store_dir))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == (f"lnrepro publish: {store_dir}: restored as it was before a publish that was killed while "
                           "it replaced the store\n")
    assert _snapshot(store_dir) == before and sorted(p.name for p in store_dir.parent.iterdir()) == [".demo.lock",
                                                                                                    "demo"]
    shutil.copytree(store_dir, old)
    proc = _lnrepro(parts["one"], "report", "--store", str(store_dir))
    assert proc.returncode == 0 and f"removed {old.name}" in proc.stderr and not old.exists(), proc.stderr


def test_a_store_named_by_a_symbolic_link_is_published_through_it(parts: dict[str, Path], tmp_path: Path,
                                                                  capsys) -> None:
    store_dir = _store_copy(parts, tmp_path)
    link = tmp_path / "link"
    link.symlink_to(store_dir)
    rc, out = _publish(parts["two"], link, results=_results_copy(parts["two"], tmp_path), capsys=capsys)
    assert rc == 0 and "added 2, kept 0" in out, out
    assert link.is_symlink() and len(json.loads((store_dir / "store.json").read_text())["units"]) == 4


def test_a_full_disk_while_copying_the_store_names_the_file(parts: dict[str, Path], tmp_path: Path, capsys,
                                                            monkeypatch) -> None:
    store_dir = _store_copy(parts, tmp_path)
    before, results = _snapshot(store_dir), _results_copy(parts["two"], tmp_path)
    real = shutil.copy2

    def full(src, dst, *args, **kwargs):
        real(src, dst, *args, **kwargs)
        raise OSError(28, "No space left on device", str(dst))

    monkeypatch.setattr(shutil, "copy2", full)
    rc, out = _publish(parts["two"], store_dir, results=results, capsys=capsys)
    assert rc == 1 and "None" not in out
    assert f"{store_dir}: no space left on device (ENOSPC) while writing it" in out, out
    assert _snapshot(store_dir) == before


def test_refuses_hypotheses_cut_after_scoring(parts: dict[str, Path], tmp_path: Path, capsys) -> None:
    """A part whose test hypotheses were cut to a tenth of their lines."""
    results = _results_copy(parts["two"], tmp_path)
    hyp = results / "runs" / "preln_nowarmup_step8" / "seed2" / "eval" / "epoch002.test.hyp"
    lines = hyp.read_text().splitlines(keepends=True)
    hyp.write_text("".join(lines[: len(lines) // 10]))
    out = _refused(parts, _store_copy(parts, tmp_path), results, capsys)
    assert (f"{hyp}: {len(lines) // 10} lines, but {hyp.parent / 'epoch002.json'} scored {len(lines)} sentences of "
            "test: the hypotheses were cut or replaced after scoring") in out


def test_refuses_hypotheses_replaced_after_scoring(parts: dict[str, Path], tmp_path: Path, capsys) -> None:
    """A part whose test hypotheses were replaced line for line: the line count agrees, the digest the score file
    recorded does not."""
    results = _results_copy(parts["two"], tmp_path)
    hyp = results / "runs" / "preln_nowarmup_step8" / "seed2" / "eval" / "epoch002.test.hyp"
    lines = hyp.read_text().splitlines(keepends=True)
    hyp.write_text("".join(reversed(lines)) if len(set(lines)) > 1 else "x\n" * len(lines))
    out = _refused(parts, _store_copy(parts, tmp_path), results, capsys)
    assert (f"{hyp}: not the hypotheses {hyp.parent / 'epoch002.json'} recorded (sha256 ") in out
    assert "they were changed after scoring; score it again" in out


def test_refuses_records_with_no_commit(parts: dict[str, Path], tmp_path: Path, capsys) -> None:
    """Code outside a git checkout records no commit: refused like a dirty checkout."""
    results = _results_copy(parts["two"], tmp_path)
    run_json = results / "runs" / "postln_warmup_isqrt" / "seed2" / "run.json"
    record = json.loads(run_json.read_text())
    record.update(git_commit=None, git_dirty=None)
    run_json.write_text(json_text(record))
    out = _refused(parts, _store_copy(parts, tmp_path), results, capsys)
    assert f"{run_json}: git_commit is null (trained from code outside a git checkout" in out


def test_a_stray_json_at_the_results_root_is_no_slice(parts: dict[str, Path], tmp_path: Path, capsys) -> None:
    store_dir = _store_copy(parts, tmp_path)
    results = _results_copy(parts["two"], tmp_path)
    (results / "notes.json").write_text("{}\n")
    rc, out = _publish(parts["one"], store_dir, results=results, capsys=capsys)
    assert rc == 0 and "added 2" in out and not (store_dir / "notes.json").exists(), out
    (results / "notes.json").write_text('{"other": 1}\n')
    rc, out = _publish(parts["one"], store_dir, results=results, capsys=capsys)
    assert rc == 0 and "kept 2" in out, out


def test_a_publish_rebuilds_the_stores_report(parts: dict[str, Path], tmp_path: Path, capsys) -> None:
    """The store's report after part one says it lacks two units; publishing part two rebuilds it whole."""
    store_dir = _store_copy(parts, tmp_path)
    assert cli.main(["report", "--store", str(store_dir)]) == 0
    assert "Incomplete: 2 of 4 units." in (store_dir / "report" / "index.html").read_text()
    rc, out = _publish(parts["two"], store_dir, results=_results_copy(parts["two"], tmp_path), capsys=capsys)
    assert rc == 0 and "added 2" in out, out
    assert "Incomplete" not in (store_dir / "report" / "index.html").read_text()
