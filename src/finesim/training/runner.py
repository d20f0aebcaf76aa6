"""The recipe runner: recipe → model + datasets + loss → sentence-transformers trainer → output folder.

Output folder layout::

    OUT/
      model/            the kept model (train.keep: the best checkpoint by the selection split's Spearman, the
                        last step's, or a checkpoint soup), with finesim_model.json
      checkpoints/      trainer checkpoints
      config.json       the recipe actually used (defaults filled in, overrides applied, resolved data paths)
      metrics.json      validation metrics, best checkpoint, throughput, log history, environment
      run.json          the run's fingerprint (result-changing recipe keys, SHA-256 of each data file), written
                        once the model, data and loss are built

A rerun into an OUT that holds an earlier run resumes from the last checkpoint only when its fingerprint equals
``run.json``; with anything changed (or no ``run.json``) it is refused before any work, naming what changed.
``resume=False`` (``--no-resume``) deletes the earlier run's five entries and starts over
(:mod:`finesim.training.preflight`).

Runs unchanged under ``torchrun --nproc_per_node N`` / ``accelerate launch`` (the trainer handles DDP; on CPU
the backend is gloo); only process 0 writes ``model/``, ``config.json``, ``metrics.json`` and ``run.json``.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from datasets import Dataset

from finesim.paths import RUN_CONFIG_FILE, RUN_FILE, RUN_METRICS_FILE
from finesim.results import code_record, environment_record, path_roots, portable, write_json_atomic
from finesim.training.arguments import selection_name, training_arguments
from finesim.training.encoders import TRIPLET_COLUMNS, EncoderType, get_encoder
from finesim.training.evaluator import ConditionalSimilarityEvaluator
from finesim.training.objectives import Objective, build_loss, get_objective
from finesim.training.preflight import (
    Preflight,
    check_layout,
    load_data,
    preflight,
    read_training_data,
    start_over,
)
from finesim.training.recipe import Recipe, RecipeError, recipe_source

logger = logging.getLogger("finesim.training")


@dataclass
class TrainResult:
    """What :func:`train` produced."""

    output_dir: Path
    model_dir: Path
    metrics: dict[str, Any] = field(default_factory=dict)
    model: Any = None  # the trained model; None when the run had finished already (nothing trained: see model_dir)


@dataclass
class PreparedData:
    """The training examples in the objective's layout, the validation evaluator, and what was read."""

    train: Dataset
    evaluator: ConditionalSimilarityEvaluator | None  # the selection split: dev when carved, else validation
    train_path: Path
    train_report: dict[str, Any]
    train_rows: int
    train_examples: int
    train_rows_used: int
    rows_per_example: int = 1
    pairing: dict[str, Any] | None = None
    validation_path: Path | None = None
    validation_report: dict[str, Any] | None = None
    validation_rows: int | None = None
    dev_rows: int | None = None
    report_evaluator: ConditionalSimilarityEvaluator | None = None  # validation, reported only (with a dev split)

    def auxiliary(self) -> list[dict[str, Any]]:
        """The auxiliary pair sets appended to the training rows (``data.auxiliary``), as the training report lists
        them: path, format, rows, condition, label mapping, the reader's report."""
        listed = self.train_report.get("auxiliary") if isinstance(self.train_report, dict) else None
        return list(listed or [])

    def info(self) -> dict[str, Any]:
        """The ``data`` block of ``metrics.json``."""
        out: dict[str, Any] = {
            "train_path": str(self.train_path),
            "train_report": self.train_report,
            "train_rows": self.train_rows,
        }
        if self.pairing is not None:
            out["pairing"] = self.pairing
        out["train_examples"] = self.train_examples
        out["train_rows_used"] = self.train_rows_used
        if self.dev_rows is not None:
            out["dev_rows"] = self.dev_rows
            out["selection_split"] = "dev (carved from the training data)"
        if self.validation_path is not None:
            out.update(
                validation_path=str(self.validation_path),
                validation_report=self.validation_report,
                validation_rows=self.validation_rows,
            )
        return out


def _layout(
    encoder: EncoderType, objective: Objective, model: Any, rows: Dataset, pairs: Any
) -> tuple[Dataset, int, dict[str, Any] | None]:
    """The trainer's dataset in the objective's layout, its rows per example, the pairing report; ``pairs``: the
    condition pairs :func:`~finesim.training.preflight.check_layout` made (pairs layout)."""
    if objective.layout == "pairs":
        assert encoder.pairs is not None  # check_layout refused an encoder without condition pairs
        paired, pairing = pairs
        return encoder.pairs(model, paired), 2, pairing.as_dict()
    if objective.layout == "triplets":  # the format's own columns, as they are
        return rows.select_columns(list(TRIPLET_COLUMNS)), 1, None
    return encoder.rows(model, rows), 1, None


def _evaluator(recipe: Recipe, encoder: EncoderType, data: Any, name: str) -> ConditionalSimilarityEvaluator:
    raw = data.dataset
    return ConditionalSimilarityEvaluator(
        raw["sentence1"],
        raw["sentence2"],
        raw["condition"] if "condition" in raw.column_names else None,
        raw["label"],
        encoder=encoder.encoder,
        name=name,
        batch_size=recipe.train.eval_batch_size,
    )


def prepare_data(
    recipe: Recipe, model: Any, *, data_root: str | None = None, checked: Preflight | None = None
) -> PreparedData:
    """Lay out the data for the recipe's encoder and objective and build the evaluators: the selection one (on the
    dev split carved from train when ``data.dev_fraction`` is set, else on validation) and, with a dev split, the
    report on validation. The data is read and checked as :func:`~finesim.training.preflight.preflight` does,
    unless ``checked`` gives its outcome."""
    if checked is not None:
        train, dev, val, pairs = checked.train, checked.dev, checked.validation, checked.pairs
    else:
        root = data_root if data_root is not None else recipe.data.root
        train, dev, _ = read_training_data(recipe, root)
        val = load_data(recipe, "validation", root) if recipe.data.validation else None
        pairs = check_layout(recipe, train.dataset, train.path)
    encoder = get_encoder(recipe.model.encoder)
    objective = get_objective(recipe.objective.name)
    laid_out, per_example, pairing = _layout(encoder, objective, model, train.dataset, pairs)
    selection = dev if dev is not None else val
    return PreparedData(
        train=laid_out,
        evaluator=None if selection is None else _evaluator(recipe, encoder, selection, selection_name(recipe)),
        report_evaluator=None if dev is None or val is None else _evaluator(recipe, encoder, val, "report"),
        train_path=train.path,
        train_report=train.report,
        train_rows=len(train.dataset),
        train_examples=len(laid_out),
        train_rows_used=per_example * len(laid_out),
        rows_per_example=per_example,
        pairing=pairing,
        validation_path=None if val is None else val.path,
        validation_report=None if val is None else val.report,
        validation_rows=None if val is None else len(val.dataset),
        dev_rows=None if dev is None else len(dev.dataset),
    )


def rows_seen(steps: int, *, examples: int, per_step: int, rows_per_example: int = 1) -> int:
    """Training rows covered by ``steps`` optimizer steps over ``examples`` training examples, ``per_step``
    examples per step (batch x gradient accumulation x processes).

    An epoch takes ``ceil(examples / per_step)`` steps and covers every example once: its last, partial batch
    counts only the rows it holds (``steps * per_step`` would overcount them), and examples repeated by DDP to
    even out the processes' batches are not counted. A final epoch cut short by ``max_steps`` counts
    ``steps * per_step`` rows (exact with random batches, whose partial batch comes last; within one batch with
    length-grouped batches). ``rows_per_example`` is 2 for condition-pair examples (two C-STS rows each).
    """
    if steps <= 0 or examples <= 0:
        return 0
    steps_per_epoch = -(-examples // per_step)
    full, rest = divmod(steps, steps_per_epoch)
    return rows_per_example * (full * examples + min(rest * per_step, examples))


def resumed_step(checkpoint: str | None) -> int:
    """The step a run resumes from: the ``global_step`` of the checkpoint's ``trainer_state.json`` (0 without one),
    read before training (``save_total_limit`` may delete that checkpoint while the run goes on)."""
    if not checkpoint:
        return 0
    state = json.loads((Path(checkpoint) / "trainer_state.json").read_text(encoding="utf-8"))
    return int(state.get("global_step") or 0)


def whole_run_train_loss(
    log_history: list[dict[str, Any]], *, sitting_loss: float | None, start_step: int, end_step: int
) -> float | None:
    """The mean training loss over every step of a run, ``metrics.json``'s ``train_loss``.

    The trainer's own ``train_loss`` (in ``trainer_metrics``) averages the steps of the last sitting only
    (``start_step`` to ``end_step``): after a resume it is not the run's loss. The earlier steps' losses are in the
    log history the checkpoint carried (each logged ``loss`` is the mean over the steps since the previous log), so
    the run's mean is the step-weighted mean of the logs up to ``start_step`` and the sitting's mean. None when the
    logs do not cover the steps before the resume exactly (the last log before it is not at ``start_step``) or the
    sitting's loss is unknown.
    """
    if sitting_loss is None or end_step <= 0:
        return None
    if start_step <= 0:
        return float(sitting_loss)
    total, last = 0.0, 0
    for entry in log_history:
        step = entry.get("step")
        if "loss" not in entry or not isinstance(step, int) or step <= last or step > start_step:
            continue
        total += float(entry["loss"]) * (step - last)
        last = step
    if last != start_step:
        return None
    return (total + float(sitting_loss) * (end_step - start_step)) / end_step


def train(
    recipe: Recipe,
    *,
    output_dir: str | Path | None = None,
    data_root: str | None = None,
    resume: bool = True,
    callbacks: list[Any] | None = None,
    checked: Preflight | None = None,
) -> TrainResult:
    """Train a model as the recipe says; see the module docstring for the output folder.

    Every check that needs no training runs first (:func:`~finesim.training.preflight.preflight`); a rerun into a
    folder holding another run's checkpoints is refused there, before the model is built.

    Args:
        recipe: a validated :class:`Recipe` (from :func:`finesim.training.recipe.load_recipe`).
        output_dir: overrides ``recipe.output_dir`` (one of them is required).
        data_root: overrides ``recipe.data.root``.
        resume: continue from the last checkpoint of the same run (same fingerprint) in ``OUT/checkpoints``; False
            deletes an earlier run in the folder and starts over.
        callbacks: extra ``transformers.TrainerCallback`` objects.
        checked: the outcome of :func:`preflight` for these arguments, when the caller already ran it.
    """
    code_record()  # the code as the run starts (results files record it; commits made meanwhile do not count)
    pre = checked or preflight(recipe, output_dir=output_dir, data_root=data_root, resume=resume)
    out = pre.output_dir
    first = int(os.environ.get("RANK", "0")) == 0  # process 0 of a torchrun / accelerate launch (no process group yet)
    if pre.action == "done":  # rerun of a finished run: its files stay as they are (a 0-step "resume" rewrote them)
        return _finished(out)
    if first and pre.action == "restart":
        logger.warning("starting over in %s: deleted %s", out, ", ".join(start_over(out)))
    import torch
    from transformers import set_seed

    if recipe.train.num_threads:
        torch.set_num_threads(recipe.train.num_threads)
    set_seed(recipe.seed)
    encoder = get_encoder(recipe.model.encoder)
    objective = get_objective(recipe.objective.name)
    model = encoder.build(recipe.model)
    truncated = count_truncated(encoder.encoder, model, pre) if first else None
    data = prepare_data(recipe, model, checked=pre)
    options = objective.resolve_options(recipe.objective.options)
    loss = build_loss(objective.name, model, options)  # adds the objective's heads to the model first
    extra = objective.training_args(model, loss, options) if objective.training_args else {}
    frozen = freeze_parameters(loss, recipe.train.freeze, source=recipe_source(recipe)) if recipe.train.freeze else None
    if recipe.train.layer_lr_decay is not None:
        layers = layer_decay_mapping(loss, recipe.train.learning_rate, recipe.train.layer_lr_decay)
        extra = {**extra, "learning_rate_mapping": {**layers, **extra.get("learning_rate_mapping", {})}}
    cross = encoder.trainer == "cross"
    args = training_arguments(recipe, out, has_eval=data.evaluator is not None, cross=cross, extra=extra)
    # the fingerprint claims the folder once the model, data and loss are built, just before the trainer (which makes
    # OUT/checkpoints): a recipe that fails before (a backbone or head it cannot build) leaves no run.json that would
    # refuse its corrected rerun as another run's folder
    if first:
        write_json_atomic(out / RUN_FILE, pre.run_record())
    trainer = _trainer(cross)(
        model=model, args=args, train_dataset=data.train, loss=loss, evaluator=data.evaluator, callbacks=callbacks
    )
    if not logger.isEnabledFor(logging.WARNING):  # -q: only errors; the trainer printed its log dicts on stdout
        from transformers.trainer_callback import PrinterCallback, ProgressCallback

        for quiet in (PrinterCallback, ProgressCallback):
            trainer.remove_callback(quiet)
    checkpoint = pre.checkpoint
    if checkpoint:
        logger.warning("resuming from %s (same recipe and data)", checkpoint)
    # read now: the trainer's save_total_limit may delete the checkpoint it resumed from before training ends
    start_step = resumed_step(checkpoint)
    started = time.perf_counter()
    output = trainer.train(resume_from_checkpoint=checkpoint)
    wall = time.perf_counter() - started
    soup = None
    if recipe.train.keep == "soup" and data.evaluator is not None:
        from finesim.training.checkpoint_soup import keep_soup_or_best

        soup = keep_soup_or_best(trainer, data.evaluator, recipe.train.soup_checkpoints, split=selection_name(recipe))
    kept_scores = soup.pop("kept", None) if soup is not None else None  # the kept model, already scored
    if kept_scores is not None:
        final = kept_scores
    else:
        final = data.evaluator.compute(model) if data.evaluator is not None else {}
    report = data.report_evaluator.compute(model) if data.report_evaluator is not None else None
    metrics: dict[str, Any] = {}
    if trainer.is_world_process_zero():
        from finesim.models.io import save_model

        metrics = _metrics(
            recipe, encoder, objective, options, data, trainer, args, output, final, checkpoint, wall, start_step
        )
        if truncated is not None:
            metrics["data"].update(truncated)
        if frozen is not None:
            metrics["frozen"] = frozen
        if soup is not None:
            metrics["soup"] = soup
            if soup["chosen"] == "soup":  # the saved model is the average, not the best checkpoint
                metrics["best_model_restored"] = None  # not applicable: metrics["soup"] says what was kept
        metrics = portable(metrics, path_roots(data_root=pre.data_root))  # paths relative to checkout or data root
        if data.dev_rows is not None:  # chosen on dev, reported on validation (none: data.validation null)
            metrics["dev"], metrics["validation"] = metrics["validation"], report or {}
        metrics["fingerprint_sha256"] = pre.digest
        conditional = "condition" in pre.train.dataset.column_names  # the training data pairs with conditions
        card = card_info(
            recipe, encoder, options, data, metrics, conditional=conditional, files_sha256=pre.fingerprint["data"]
        )
        save_model(model, out / "model", encoder=encoder.encoder, card=card)
        write_json_atomic(out / RUN_CONFIG_FILE, _resolved_config(recipe, out, options, data))
        write_json_atomic(out / RUN_METRICS_FILE, metrics)
        logger.info("%s %s; model saved to %s", selection_name(recipe), final, out / "model")
    return TrainResult(output_dir=out, model_dir=out / "model", metrics=metrics, model=model)


LAYER_NAME = re.compile(r"^(.*\.layer\.)(\d+)\.")


def layer_decay_mapping(module: Any, learning_rate: float, decay: float) -> dict[str, float]:
    """``learning_rate_mapping`` of layer-wise learning-rate decay: each transformer layer ``i`` of ``L`` (parameters
    named ``....layer.<i>....``, as in BERT, RoBERTa, MPNet, MiniLM) gets ``learning_rate * decay ** (L - 1 - i)``;
    parameters outside the layers (embeddings, pooler, heads) keep ``learning_rate`` (the STS-regression
    reference's scheme). The patterns name the parameters as the trainer sees them, through the loss."""
    layers: dict[int, str] = {}
    for name, _ in module.named_parameters():
        match = LAYER_NAME.match(name)
        if match:
            layers.setdefault(int(match.group(2)), match.group(1))
    if not layers:
        raise ValueError("train.layer_lr_decay: the model has no parameters named like '<...>.layer.<i>.<...>'")
    top = max(layers)
    return {
        "^" + re.escape(prefix) + str(i) + r"\.": learning_rate * decay ** (top - i)
        for i, prefix in sorted(layers.items())
    }


def freeze_parameters(module: Any, patterns: list[str], *, source: str = "recipe") -> dict[str, Any]:
    """Leave untrained (``requires_grad = False``) every parameter of ``module`` whose name (as the trainer sees it,
    through the loss) a pattern of ``train.freeze`` finds (``re.search``): it gets no gradient, so no update and no
    weight decay (a ``learning_rate_mapping`` group may still list it). A pattern that finds nothing, or patterns
    that leave nothing to train, are a :class:`RecipeError` naming ``source`` and the key. Returns what was frozen,
    for ``metrics.json``: per pattern the tensors it found, the frozen, trainable and total parameter counts."""
    named = list(module.named_parameters())
    found: dict[str, list[str]] = {}
    for i, pattern in enumerate(patterns):
        found[pattern] = [name for name, _ in named if re.search(pattern, name)]
        if not found[pattern]:
            step = max(1, len(named) // 3)
            examples = ", ".join(name for name, _ in named[::step][:4])  # from the start, middle and end
            raise RecipeError(
                f"{source}: train.freeze[{i}] {pattern!r} matches no parameter; their names look like {examples}"
            )
    chosen = {name for names in found.values() for name in names}
    trainable = sum(p.numel() for name, p in named if p.requires_grad and name not in chosen)
    if trainable == 0:
        raise RecipeError(f"{source}: train.freeze {patterns!r} leaves no parameter to train")
    frozen = 0
    for name, parameter in named:
        if name in chosen:
            parameter.requires_grad_(False)
            frozen += parameter.numel()
    total = sum(p.numel() for _, p in named)
    logger.info("train.freeze: %s of %s parameters frozen (%d tensors)", f"{frozen:,}", f"{total:,}", len(chosen))
    return {
        "patterns": {k: len(v) for k, v in found.items()},
        "parameters_frozen": frozen,
        "parameters_trainable": trainable,
        "parameters": total,
    }


def _trainer(cross: bool) -> Any:
    if cross:
        from sentence_transformers.cross_encoder import CrossEncoderTrainer

        return CrossEncoderTrainer
    from sentence_transformers import SentenceTransformerTrainer

    return SentenceTransformerTrainer


def _finished(out: Path) -> TrainResult:
    """The result of a run that finished in ``out`` already: its ``metrics.json`` and model folder, untouched; the
    model is not loaded (``model`` None: load ``model_dir`` when needed; a 7B backbone took a while for nothing)."""
    logger.warning(
        "%s holds this run finished already (same recipe and data): nothing trained, its model and metrics.json kept "
        "(--no-resume, resume=False in Python, trains it again)",
        out,
    )
    metrics = json.loads((out / RUN_METRICS_FILE).read_text(encoding="utf-8"))
    return TrainResult(output_dir=out, model_dir=out / "model", metrics=metrics)


def card_info(
    recipe: Recipe,
    encoder: EncoderType,
    options: dict[str, Any],
    data: PreparedData,
    metrics: dict[str, Any],
    *,
    conditional: bool = True,
    files_sha256: dict[str, Any] | None = None,
) -> Any:
    """The model card's facts for a trained model (:class:`finesim.models.card.CardInfo`): the backbone as the
    recipe gives it, the recipe with the objective options resolved, the data files with row counts (and SHA-256,
    from ``files_sha256``: the run fingerprint's ``train``, ``validation``, ``auxiliary``), validation, the papers to
    cite (:func:`~finesim.training.objectives.card_citations`). The recipe leaves out ``output_dir``: where the run
    was written is no part of the model, and an absolute ``-o`` named a folder of the training machine in every copy
    of the model folder (``finesim_model.json``, the README)."""
    from finesim.models.card import CardInfo
    from finesim.training.objectives import card_citations

    resolved = recipe.to_dict()
    resolved.pop("output_dir", None)
    resolved["objective"]["options"] = options
    d = recipe.data
    auxiliary = data.auxiliary()
    main_used = data.train_rows_used - sum(int(a["rows"]) for a in auxiliary)  # every auxiliary row trains (rows)
    hashes = files_sha256 or {}
    rows = [_data_row("train", d.train, d.format, data.train_report, data.train_rows, main_used, hashes.get("train"))]
    for i, (spec, aux) in enumerate(zip(d.auxiliary, auxiliary)):
        digest = (hashes.get("auxiliary") or [None] * (i + 1))[i]
        rows.append(
            _data_row("auxiliary", spec.train, spec.format, aux.get("report"), aux["rows"], aux["rows"], digest)
        )
    if data.validation_path is not None:
        fmt, count = d.validation_format or d.format, data.validation_rows
        digest = hashes.get("validation")
        rows.append(_data_row("validation", d.validation, fmt, data.validation_report, count, count, digest))
    details = {
        "Training": f"{metrics.get('global_steps')} steps, {metrics.get('epochs', 0):.2f} epochs, "
        f"{metrics.get('train_rows_seen', 0):,} training rows seen (seed {recipe.seed})"
    }
    soup = metrics.get("soup")
    if soup:
        members = ", ".join(soup["members"])
        details["Checkpoint soup"] = (
            f"the uniform weight average of {members} (train.keep: soup)"
            if soup["chosen"] == "soup"
            else f"not kept ({soup['why']}); the best checkpoint is the model"
        )
    return CardInfo(
        encoder=encoder.encoder,
        base_model=recipe.model.backbone,
        objective=recipe.objective.name,
        recipe_name=recipe.name,
        recipe=resolved,
        data=rows,
        # the selection split's scores (dev, when carved) beside validation's; an empty split is left out
        metrics={split: dict(metrics[split]) for split in ("dev", "validation") if metrics.get(split)},
        conditional=conditional,
        citations=card_citations(recipe.objective.name, conditional=conditional),
        details=details,
    )


def _data_row(
    split: str, file: Any, fmt: str, report: Any, rows: int | None, rows_used: int | None, sha256: str | None = None
) -> dict[str, Any]:
    """One data file of the model card: rows read (the report's, else ``rows``), used and skipped, and the file's
    SHA-256 (what ``finesim distill-data --teacher`` compares the triples' training file with)."""
    report = report if isinstance(report, dict) else {}
    read, skipped = report.get("rows_read"), report.get("skipped")
    row = {
        "split": split,
        "file": file,
        "format": fmt,
        "rows": int(read) if isinstance(read, int) else rows,
        "rows_used": rows_used,
        "skipped": sum(int(v) for v in skipped.values()) if isinstance(skipped, dict) else None,
    }
    if sha256:
        row["sha256"] = sha256
    return row


def _resolved_config(recipe: Recipe, out: Path, options: dict[str, Any], data: PreparedData) -> dict[str, Any]:
    """``config.json``: the recipe with defaults, overrides, objective options and data paths resolved."""
    resolved = recipe.to_dict()
    resolved["output_dir"] = str(out)
    resolved["objective"]["options"] = options
    resolved["data"]["resolved_train"] = str(data.train_path)
    resolved["data"]["resolved_validation"] = None if data.validation_path is None else str(data.validation_path)
    if recipe.data.auxiliary:
        resolved["data"]["resolved_auxiliary"] = [a["path"] for a in data.auxiliary()]
    return resolved


def count_truncated(encoder: str, model: Any, pre: Preflight) -> dict[str, Any] | None:
    """The rows of each split with an input longer than the model's token limit (``model.max_length``, else the
    backbone's), which the model reads only in part, warned about per split and kept in ``metrics.json`` →
    ``data.rows_truncated`` (split -> rows) and ``data.token_limit``; None when it cannot be told (triplet data
    only, a limit the model does not state, a prompt-LM model)."""
    from finesim.evaluation.truncation import Truncation

    counts: dict[str, Any] = {}
    limit = None
    for loaded in (pre.train, pre.dev, pre.validation):
        if loaded is None:
            continue
        truncation = Truncation.of_model(encoder, model)
        if truncation is None:
            return None
        ds = loaded.dataset
        if not {"sentence1", "sentence2"} <= set(ds.column_names):
            continue  # triplets (anchor, positive, negative): not counted
        rows = list(ds["row"]) if "row" in ds.column_names else []
        unit = "row"
        if len(rows) != len(ds) or None in rows:  # no file rows (auxiliary pairs appended): positions
            rows, unit = list(range(1, len(ds) + 1)), "training pair"
        conditions = ds["condition"] if "condition" in ds.column_names else None
        truncation.check(rows, [1] * len(ds), ds["sentence1"], ds["sentence2"], conditions)
        counts[loaded.role], limit = truncation.rows, truncation.limit
        if truncation.rows:
            logger.warning("%s data %s: %s", loaded.role, loaded.path, truncation.message(unit=unit))
    return {"rows_truncated": counts, "token_limit": limit} if counts else None


def chosen_on(recipe: Recipe, *, has_eval: bool) -> str | None:
    """The split whose Spearman chose the kept model (``metrics.json``'s ``chosen_on``): ``dev`` (carved from train),
    ``validation`` (no dev split: the reported validation score then chose it too, so it is optimistic), or None
    (``train.keep: last``, or nothing to evaluate on)."""
    if not has_eval or recipe.train.keep == "last":
        return None
    return selection_name(recipe)


def _metrics(
    recipe: Recipe,
    encoder: EncoderType,
    objective: Objective,
    options: dict[str, Any],
    data: PreparedData,
    trainer: Any,
    args: Any,
    output: Any,
    final: dict[str, float],
    checkpoint: str | None,
    wall: float,
    start_step: int = 0,
) -> dict[str, Any]:
    """``metrics.json``: validation, best checkpoint, throughput, log history, data and environment."""
    state = trainer.state
    steps = int(state.global_step)
    seen = rows_seen(
        steps,
        examples=data.train_examples,
        per_step=args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size,
        rows_per_example=data.rows_per_example,
    )
    runtime = output.metrics.get("train_runtime")
    return {
        "kind": "finesim-train",
        "recipe": recipe.name,
        "encoder": encoder.name,
        "objective": objective.name,
        "objective_options": options,
        "label_scaling": {"scale": recipe.labels.scale, "low": recipe.labels.low, "high": recipe.labels.high},
        "validation": final,
        "best_checkpoint": state.best_model_checkpoint,
        "best_metric": state.best_metric,
        # the saved model scores what the best checkpoint scored (sentence-transformers only logs a failed reload)
        "best_model_restored": bool(final and state.best_metric is not None)
        and abs(final["spearman"] - state.best_metric) < 1e-3,
        "metric_for_best_model": args.metric_for_best_model,
        "kept": recipe.train.keep,
        "chosen_on": chosen_on(recipe, has_eval=data.evaluator is not None),
        "bf16": bool(args.bf16),  # the autocast the trainer used (train.bf16 "auto" resolved on this machine)
        "resumed_from": checkpoint,
        "global_steps": steps,
        "epochs": float(state.epoch or 0.0),
        "world_size": args.world_size,
        "train_rows_available": data.train_rows_used,
        "train_rows_seen": seen,
        "wall_seconds": wall,
        "train_runtime_seconds": runtime,
        # throughput of this invocation only (None after a resume: earlier steps ran in another process)
        "train_rows_per_second": seen / runtime if runtime and not checkpoint else None,
        # the mean over every step, across sittings (trainer_metrics' train_loss covers the last sitting only)
        "train_loss": whole_run_train_loss(
            state.log_history, sitting_loss=output.metrics.get("train_loss"), start_step=start_step, end_step=steps
        ),
        "trainer_metrics": output.metrics,
        "data": data.info(),
        "log_history": state.log_history,
        "environment": environment_record(),
    }
