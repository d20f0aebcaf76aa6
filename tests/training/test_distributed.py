"""C-STS training under ``torchrun --nproc_per_node 2`` (and once under ``accelerate launch``) on CPU (gloo DDP)
with a tiny random model.

Each run goes through the ``finesim train`` command. A small launcher script (written by the test) adds one
trainer callback that records, on every process after every optimizer step, a checksum of the model's parameters,
so the test can check that DDP kept both processes' models, trainable heads included, identical.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_runner import tiny_recipe, write_synthetic_csts

LAUNCHER = '''
"""finesim train under torchrun, with a parameter-checksum callback (test only)."""
import hashlib
import json
import sys
from pathlib import Path

from transformers import TrainerCallback

import finesim.training.runner as runner
from finesim.cli.main import main


def digest(modules):
    h = hashlib.sha256()
    for module in modules:
        for p in module.parameters():
            h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


class ParameterChecksums(TrainerCallback):
    """Per process: sha256 of all parameters and of the modules after the backbone (the trainable heads)."""

    def __init__(self, folder):
        self.folder, self.steps, self.head_at_start = Path(folder), [], None

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.head_at_start = digest(list(model)[1:])

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self.steps.append({"step": state.global_step, "all": digest(list(model)), "head": digest(list(model)[1:])})

    def on_train_end(self, args, state, control, model=None, **kwargs):
        self.folder.mkdir(parents=True, exist_ok=True)
        record = {"rank": args.process_index, "head_at_start": self.head_at_start, "steps": self.steps,
                  "head_modules": [type(m).__name__ for m in list(model)[1:]]}
        (self.folder / f"rank{args.process_index}.json").write_text(json.dumps(record))


recipe, out, checksums = sys.argv[1:4]
plain_train = runner.train
runner.train = lambda r, **kw: plain_train(r, callbacks=[ParameterChecksums(checksums)], **kw)
sys.exit(main(["train", recipe, "-o", out]))
'''

EPOCHS = 3


@pytest.mark.slow  # two processes each import torch and build a model: about 20-40 s per run
@pytest.mark.parametrize(
    ("model", "objective", "launcher"),
    [
        ({"encoder": "tri", "head": "concat"}, "quad-mse", "torchrun"),
        # CCL: the runner adds a projection head; BCL gathers its negatives from both processes
        ({"encoder": "bi"}, "ccl", "torchrun"),
        ({"encoder": "cross", "transform": True}, "mse", "torchrun"),  # CrossEncoderTrainer
        ({"encoder": "tri", "head": "hadamard"}, "mse", "accelerate"),  # the other launcher the docs name
    ],
    ids=["tri-concat-quad-mse", "bi-ccl", "cross-mse", "accelerate-tri-hadamard-mse"],
)
def test_two_cpu_processes(model: dict, objective: str, launcher: str, tiny_bert_dir: Path, tmp_path: Path) -> None:
    root = write_synthetic_csts(tmp_path / "data", train_pairs=64)
    spec = tiny_recipe(tiny_bert_dir, root, model=model, objective={"name": objective})
    spec["train"].update(epochs=EPOCHS, learning_rate=5e-3, save_total_limit=1, logging_steps=2)
    recipe = tmp_path / "recipe.json"
    recipe.write_text(json.dumps(spec), encoding="utf-8")
    script = tmp_path / "launch.py"
    script.write_text(LAUNCHER, encoding="utf-8")
    out, checksums = tmp_path / "out", tmp_path / "checksums"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    if launcher == "torchrun":
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    else:  # accelerate launch: --multi_gpu starts N processes (its --cpu runs one); the runner picks gloo on CPU
        cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2"]
        cmd += ["--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
    cmd += [str(script), str(recipe), str(out), str(checksums)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["world_size"] == 2

    # 8 rows per process per step (4 condition pairs for quad-mse / ccl), 2 processes
    pairs = objective != "mse"
    examples = metrics["data"]["train_examples"]
    assert examples == (metrics["data"]["pairing"]["pairs"] if pairs else 128)
    per_step = (4 if pairs else 8) * 2
    assert metrics["global_steps"] == EPOCHS * -(-examples // per_step)
    assert metrics["train_rows_seen"] == EPOCHS * examples * (2 if pairs else 1)

    # DDP kept the two processes' parameters identical after every step, and the heads did train
    r0, r1 = (json.loads((checksums / f"rank{r}.json").read_text()) for r in (0, 1))
    assert (r0["rank"], r1["rank"]) == (0, 1)
    assert len(r0["steps"]) == len(r1["steps"]) == metrics["global_steps"]
    assert r0["steps"] == r1["steps"]
    assert r0["head_modules"] and r0["steps"][-1]["head"] != r0["head_at_start"]
    if objective == "ccl":
        assert "ProjectionHead" in r0["head_modules"]

    # the training loss fell: mean logged loss of the last epoch below that of the first
    logged = [(e["epoch"], e["loss"]) for e in metrics["log_history"] if "loss" in e]
    first = np.mean([loss for epoch, loss in logged if epoch <= 1.0])
    last = np.mean([loss for epoch, loss in logged if epoch > EPOCHS - 1])
    assert last < first, (first, last)

    from finesim.data.csts import read_csts
    from finesim.evaluation.metrics import spearman
    from finesim.evaluation.scoring import ConditionalScorer

    val, _ = read_csts(root / "csts" / "validation.csv")
    scores = ConditionalScorer(out / "model").score(val["sentence1"], val["sentence2"], val["condition"])
    assert spearman(scores, val["label"]) == pytest.approx(metrics["validation"]["spearman"], abs=1e-4)
