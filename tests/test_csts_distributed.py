"""C-STS training under ``torchrun --nproc_per_node 2`` on CPU (gloo DDP) with a tiny random model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from test_csts_training import tiny_recipe, write_synthetic_csts


@pytest.mark.parametrize(("model", "objective"), [({"encoder": "tri", "head": "concat"}, "quad-mse")])
def test_torchrun_two_cpu_processes(model: dict, objective: str, tiny_bert_dir: Path, tmp_path: Path) -> None:
    root = write_synthetic_csts(tmp_path / "data")
    spec = tiny_recipe(tiny_bert_dir, root, model=model, objective={"name": objective})
    spec["train"].update(epochs=1, num_threads=1)
    recipe = tmp_path / "recipe.json"
    recipe.write_text(json.dumps(spec), encoding="utf-8")
    out = tmp_path / "out"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    cmd += ["-m", "finesim.cli.main", "train", str(recipe), "-o", str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["world_size"] == 2
    # 32 sentence pairs, 4 pairs per process per step, 2 processes -> 4 steps
    assert metrics["global_steps"] == 4
    assert metrics["train_rows_seen"] == 4 * 2 * 4 * 2

    from finesim.data.csts import read_csts
    from finesim.evaluation.metrics import spearman
    from finesim.models.conditional import ConditionalScorer

    val, _ = read_csts(root / "csts" / "validation.csv")
    scores = ConditionalScorer(out / "model").score(val["sentence1"], val["sentence2"], val["condition"])
    assert spearman(scores, val["label"]) == pytest.approx(metrics["validation"]["spearman"], abs=1e-4)
