"""What two DAG runs of one config must share, as lists of differences (empty: equal): scores, training
losses and weights digests, the report's BLEU and loss tables. Never timings, hosts or job ids.

Used by the tests that rerun the pipeline (tests/test_faults_dag.py) or run it elsewhere (tests/test_slurm.py)
and compare with a clean local run.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path

import pandas as pd

METRICS = ("loss", "nll", "bleu_tok", "sacrebleu")
# An epoch manifest's facts that identify the checkpoint (its wall_s and where_ran are the execution's).
MANIFEST_KEYS = ("epoch", "status", "partial", "updates", "weights", "sha256", "reason")
# A training step's logged values (its times and throughput are the execution's).
STEP_KEYS = ("update", "epoch", "loss", "nll", "lr", "grad_norm")
_METRIC_COLUMN = re.compile(r"bleu|loss", re.I)
_TIMING_COLUMN = re.compile(r"wall|time|sec|hour|per_s|_s$|_s_|speed|throughput", re.I)


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def eval_jsons(exp_dir: Path) -> list[Path]:
    return sorted(exp_dir.glob("runs/*/seed*/eval/epoch[0-9][0-9][0-9].json"))


def score_diffs(a_dir: Path, b_dir: Path) -> list[str]:
    """Every checkpoint's status and, per split, its validation loss and BLEU, bit for bit."""
    a_files, b_files = eval_jsons(a_dir), eval_jsons(b_dir)
    diffs = [] if a_files else [f"{a_dir}: no scores"]
    if [p.relative_to(a_dir) for p in a_files] != [p.relative_to(b_dir) for p in b_files]:
        return diffs + ["not the same score files"]
    for path in a_files:
        rel = path.relative_to(a_dir)
        a, b = json.loads(path.read_text()), json.loads((b_dir / rel).read_text())
        if a["status"] != b["status"]:
            diffs.append(f"{rel}: status {a['status']} != {b['status']}")
        for split in sorted(set(a.get("splits") or {}) | set(b.get("splits") or {})):
            sa, sb = (a.get("splits") or {}).get(split), (b.get("splits") or {}).get(split)
            if sa is None or sb is None:
                if sa != sb:
                    diffs.append(f"{rel} {split}: scored in one run only")
                continue
            diffs += [f"{rel} {split} {key}: {sa[key]!r} != {sb[key]!r}" for key in METRICS
                      if not _same(sa[key], sb[key])]
    return diffs


def training_facts(exp_dir: Path) -> dict[str, dict]:
    """Per run folder: its status, its manifests' identifying facts, the SHA-256 of every weights file they
    name, and its logged steps."""
    facts = {}
    for summary in sorted(exp_dir.glob("runs/*/seed*/summary.json")):
        run_dir = summary.parent
        manifests = [json.loads(p.read_text()) for p in sorted(run_dir.glob("epochs/epoch*.json"))]
        records = [json.loads(line) for line in (run_dir / "train.jsonl").read_text().splitlines()]
        facts[str(run_dir.relative_to(exp_dir))] = {
            "status": json.loads(summary.read_text())["status"],
            "manifests": [{k: m.get(k) for k in MANIFEST_KEYS} for m in manifests],
            "weights_sha256": [hashlib.sha256((run_dir / m["weights"]).read_bytes()).hexdigest()
                               for m in manifests if m.get("weights")],
            "steps": [{k: r.get(k) for k in STEP_KEYS} for r in records if r.get("kind") == "step"],
        }
    return facts


def training_diffs(a_dir: Path, b_dir: Path) -> list[str]:
    """Where two runs' training facts differ (``training_facts``): status, manifests, weights, losses."""
    a, b = training_facts(a_dir), training_facts(b_dir)
    if not a:
        return [f"{a_dir}: no trained runs"]
    if sorted(a) != sorted(b):
        return [f"trained runs differ: {sorted(a)} != {sorted(b)}"]
    return [f"{run} {key}: differs" for run in a for key in a[run] if a[run][key] != b[run][key]]


def table_diffs(a_dir: Path, b_dir: Path) -> list[str]:
    """The report tables' BLEU and loss columns (timings excluded), exactly; at least one must exist."""
    tables = sorted((a_dir / "report" / "tables").glob("*.csv"))
    diffs, compared = [], 0
    for path in tables:
        rel = path.relative_to(a_dir)
        a, b = pd.read_csv(path), pd.read_csv(b_dir / rel)
        if list(a.columns) != list(b.columns):
            diffs.append(f"{rel}: columns differ")
            continue
        cols = [c for c in a.columns if _METRIC_COLUMN.search(str(c)) and not _TIMING_COLUMN.search(str(c))]
        if not cols:
            continue
        compared += 1
        try:
            pd.testing.assert_frame_equal(a[cols], b[cols], check_exact=True, obj=str(rel))
        except AssertionError as e:
            diffs.append(str(e).splitlines()[0])
    return diffs if compared else diffs + [f"no BLEU/loss columns in {[t.name for t in tables]}"]
