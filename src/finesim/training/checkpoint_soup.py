"""``train.keep: soup``: the uniform weight average of a run's last checkpoints, kept only when it beats the best one.

A checkpoint soup costs no extra training: the checkpoints are the ones the trainer saves at each evaluation anyway.
After training (the best checkpoint restored, as ``keep: best`` does), the last ``train.soup_checkpoints`` checkpoints
(by step) are read back through the trainer's own checkpoint loader, their weights averaged
(:func:`finesim.models.soup.average_state`: floats averaged in float32, every other tensor equal in each), and the
average scored on the selection split (dev when the recipe carves one, else validation). The soup is kept when its
Spearman is strictly above the best checkpoint's; otherwise the best checkpoint is restored again. Both scores, the
members and the choice go into ``metrics.json`` (``soup``) and the model card, so the choice is made on the split
that chooses everything else and never on the reported one.

Choices where the model-soup literature leaves it open, exposed as options: the *last* N checkpoints rather than the N
best (the last ones lie late on one trajectory, where a uniform average is known to stay in one basin),
``train.soup_checkpoints`` = 3 by default, and a strict improvement on the selection split to keep the soup (a tie
keeps the single checkpoint).
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

logger = logging.getLogger("finesim")

CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def checkpoint_folders(folder: str | Path) -> list[Path]:
    """The trainer's ``checkpoint-<step>`` folders in ``folder``, by step (oldest first); none when it is missing."""
    root = Path(folder)
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := CHECKPOINT.match(p.name))]
    return [p for _, p in sorted(found)]


def _state(model: Any) -> dict[str, Any]:
    return {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}


def keep_soup_or_best(trainer: Any, evaluator: Any, count: int) -> dict[str, Any]:
    """Average the last ``count`` checkpoints of ``trainer`` into its model and keep the average when it scores above
    the best checkpoint on ``evaluator`` (the selection split); else restore the best checkpoint.

    Returns the record for ``metrics.json``: ``members`` (checkpoint folder names), ``soup`` (the average's scores,
    None when fewer than two checkpoints remain to average), ``best`` (the best checkpoint's Spearman and folder) and
    ``chosen`` (``"soup"`` or ``"best"``) with ``why``.
    """
    from finesim.models.soup import average_state

    model = trainer.model
    state = trainer.state
    best_path, best_metric = state.best_model_checkpoint, state.best_metric
    members = checkpoint_folders(trainer.args.output_dir)[-count:]
    record: dict[str, Any] = {
        "checkpoints_asked": count,
        "members": [p.name for p in members],
        "best": {"spearman": best_metric, "checkpoint": Path(best_path).name if best_path else None},
        "soup": None,
    }
    if len(members) < 2 or best_metric is None:
        why = "fewer than two checkpoints to average" if len(members) < 2 else "no selection score for the best one"
        logger.warning("train.keep soup: %s; the best checkpoint is kept", why)
        return {**record, "chosen": "best", "why": why}
    states = []
    for folder in members:
        trainer._load_from_checkpoint(str(folder))  # the loader the trainer restores its best checkpoint with
        states.append(_state(model))
    model.load_state_dict(average_state(states, [p.name for p in members]))
    del states
    scores = evaluator.compute(model)
    record["soup"] = scores
    if scores["spearman"] > best_metric:
        why = f"the soup's {scores['spearman']:.4f} is above the best checkpoint's {best_metric:.4f}"
        logger.info("train.keep soup: kept the average of %s (%s)", ", ".join(record["members"]), why)
        return {**record, "chosen": "soup", "why": why}
    why = f"the soup's {scores['spearman']:.4f} is not above the best checkpoint's {best_metric:.4f}"
    logger.info("train.keep soup: %s; the best checkpoint is restored", why)
    trainer._load_from_checkpoint(str(best_path))
    return {**record, "chosen": "best", "why": why}
