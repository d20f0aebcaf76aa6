"""``train.keep: soup``: the uniform weight average of a run's last checkpoints, kept only when it beats the best one.

A checkpoint soup costs no extra training: the checkpoints are the ones the trainer saves at each evaluation anyway.
After training (the best checkpoint restored, as ``keep: best`` does), the last ``train.soup_checkpoints`` checkpoints
(by step) are read back through the trainer's own checkpoint loader, their weights averaged
(:func:`finesim.models.soup.average_state`: floats averaged in float32, every other tensor equal in each), and the
average scored on the selection split (dev when the recipe carves one, else validation). The best checkpoint is
scored again by the same call first, so the two figures come from one measurement path. The soup is kept when its
Spearman is strictly above the best checkpoint's; otherwise the best checkpoint's weights, held in memory, are put
back. Both scores, the members and the choice go into ``metrics.json`` (``soup``) and the model card, so the choice
is made on the split that chooses everything else and never on the reported one. A checkpoint whose save was cut
short is not a member. With ``train.eval_strategy: steps`` the trainer also saves at the last step, so the last two
members can lie only a few steps apart.

Choices where the model-soup literature leaves it open, exposed as options: the *last* N checkpoints rather than the N
best (the last ones lie late on one trajectory, where a uniform average is known to stay in one basin),
``train.soup_checkpoints`` = 3 by default, and a strict improvement on the selection split to keep the soup (a tie
keeps the single checkpoint).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

logger = logging.getLogger("finesim")


def checkpoint_folders(folder: str | Path) -> list[Path]:
    """The trainer's complete ``checkpoint-<step>`` folders in ``folder``, by step (oldest first); none when it is
    missing. A folder whose save was cut short (no readable ``trainer_state.json``, which transformers writes last)
    is left out."""
    from finesim.training.preflight import checkpoint_complete, step_checkpoints

    return [p for p in step_checkpoints(Path(folder)) if checkpoint_complete(p)]


def _state(model: Any) -> dict[str, Any]:
    return {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}


def keep_soup_or_best(trainer: Any, evaluator: Any, count: int, *, split: str = "dev") -> dict[str, Any]:
    """Average the last ``count`` checkpoints of ``trainer`` into its model and keep the average when it scores above
    the best checkpoint on ``evaluator`` (the selection split, named ``split``); else put the best one back.

    The trainer's model must hold the best checkpoint (``load_best_model_at_end``). Both are scored here by the same
    call (``evaluator.compute``), so the comparison does not mix the trainer's in-training figure
    (``best.trainer_spearman``, recorded beside it) with this one. Returns the record for ``metrics.json``:
    ``split``, ``members`` (checkpoint folder names), ``average`` (the soup's scores; None when fewer than two
    checkpoints remain), ``best`` (the best checkpoint's scores and folder), ``chosen`` (``"soup"`` or ``"best"``)
    and ``why``; ``kept``, the kept model's scores, when they were measured here.
    """
    from finesim.models.soup import average_state

    model = trainer.model
    state = trainer.state
    best_path = state.best_model_checkpoint
    members = checkpoint_folders(trainer.args.output_dir)[-count:]
    record: dict[str, Any] = {
        "split": split,
        "checkpoints_asked": count,
        "members": [p.name for p in members],
        "best": {"checkpoint": Path(best_path).name if best_path else None, "trainer_spearman": state.best_metric},
        "average": None,
    }
    if len(members) < 2 or best_path is None:
        why = "fewer than two complete checkpoints to average" if best_path else "no best checkpoint was recorded"
        logger.warning("train.keep soup: %s; the best checkpoint is kept", why)
        return {**record, "chosen": "best", "why": why}
    if len(members) < count:
        logger.warning(
            "train.keep soup: only %d of the %d checkpoints asked for exist; averaging those", len(members), count
        )
    best_state = _state(model)  # the best checkpoint, restored by the trainer: put back from memory if it wins
    best = evaluator.compute(model)
    record["best"].update(best)
    states = []
    for folder in members:
        trainer._load_from_checkpoint(str(folder))  # the loader the trainer restores its best checkpoint with
        states.append(_state(model))
    model.load_state_dict(average_state(states, [p.name for p in members]))
    del states
    scores = evaluator.compute(model)
    record["average"] = scores
    soup_score = f"the soup's {split} Spearman {scores['spearman']:.4f}"
    if scores["spearman"] > best["spearman"]:
        why = f"{soup_score} is above the best checkpoint's {best['spearman']:.4f}"
        logger.info("train.keep soup: kept the average of %s (%s)", ", ".join(record["members"]), why)
        card = getattr(model, "model_card_data", None)
        if card is not None and hasattr(card, "best_model_step"):
            card.best_model_step = None  # the card's log table must not mark one checkpoint as the saved model
        return {**record, "chosen": "soup", "why": why, "kept": scores}
    why = f"{soup_score} is not above the best checkpoint's {best['spearman']:.4f}"
    logger.info("train.keep soup: %s; the best checkpoint is put back", why)
    model.load_state_dict(best_state)
    return {**record, "chosen": "best", "why": why, "kept": best}
