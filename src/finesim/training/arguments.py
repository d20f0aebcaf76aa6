"""The trainer's arguments for a recipe: finesim's ``train`` keys, then ``train.trainer_args`` passed through, then
what the objective adds (:func:`training_arguments`)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from finesim.training.objectives import get_objective
from finesim.training.recipe import Recipe, RecipeError, trainer_arguments_class

# train keys passed as they are to the trainer's argument of the same name
SAME_NAME = (
    "max_steps gradient_accumulation_steps learning_rate weight_decay max_grad_norm logging_steps save_total_limit "
    "dataloader_num_workers bf16"
).split()

logger = logging.getLogger("finesim")


def resolve_bf16(setting: bool | str, *, use_cpu: bool) -> tuple[bool, str]:
    """``train.bf16`` as the trainer gets it, and why: ``True``/``False`` as given; ``"auto"`` turns bf16 autocast on
    where it is known to pay: on a GPU that supports bf16, and on a CPU that lists AMX (``amx_bf16``). Measured on
    2-core CPUs (docs/results.md, the main job): ×0.65 fp32's training rows/s on one that lists avx512_bf16 without
    AMX, ×2.26 on another; emulated bf16 (no bf16 instructions) is slower still."""
    if setting is not True and setting is not False and setting != "auto":
        raise RecipeError(f"train.bf16 must be true, false or 'auto', got {setting!r}")
    if setting != "auto":
        return bool(setting), "as the recipe sets it"
    if not use_cpu:
        import torch

        if not torch.cuda.is_available():
            return False, "auto: no CUDA device is visible, so fp32"
        # native bf16 only: pre-Ampere GPUs emulate it, slowly (torch < 2.3 has no including_emulation: ask for
        # compute capability 8.0, Ampere, or newer)
        try:
            supported = bool(torch.cuda.is_bf16_supported(including_emulation=False))
        except TypeError:
            supported = torch.cuda.get_device_capability() >= (8, 0)
        return supported, f"auto: the GPU {'supports' if supported else 'has no native'} bf16"
    from finesim.results import cpu_bf16_flags

    flags = cpu_bf16_flags()
    if flags is None:
        return False, "auto: the CPU's flags cannot be read (no /proc/cpuinfo), so fp32"
    if "amx_bf16" in flags:
        return True, "auto: the CPU has AMX (amx_bf16)"
    listed = f"it lists {', '.join(flags)} but no AMX" if flags else "it lists no bf16 instructions"
    return False, f"auto: fp32, as bf16 autocast was slower than fp32 on CPUs without AMX ({listed})"


def bf16_setting(recipe: Recipe) -> tuple[bool, str]:
    """The recipe's ``train.bf16`` resolved for this machine, and why (:func:`resolve_bf16`): on the CPU when
    ``train.trainer_args`` says ``use_cpu`` or no GPU is visible; ``auto`` is off beside ``trainer_args.fp16``."""
    import torch

    t = recipe.train
    if t.bf16 == "auto" and t.trainer_args.get("fp16"):
        return False, "auto: train.trainer_args sets fp16"
    return resolve_bf16(t.bf16, use_cpu=bool(t.trainer_args.get("use_cpu", not torch.cuda.is_available())))


def selection_name(recipe: Recipe) -> str:
    """The name the trainer logs the selection evaluator under: ``dev`` when the recipe carves a dev split from
    train (``data.dev_fraction``), else ``validation``. Its Spearman, ``eval_<name>_spearman``, picks the best
    checkpoint."""
    return "dev" if recipe.data.dev_fraction is not None else "validation"


def training_arguments(
    recipe: Recipe, output_dir: Path, *, has_eval: bool, cross: bool, extra: dict[str, Any] | None = None
) -> Any:
    """The sentence-transformers training arguments for a recipe: finesim's ``train`` keys, ``train.trainer_args``
    as given (checked by :func:`~finesim.training.recipe.check_recipe`), then ``extra`` (the objective's own)."""
    import torch

    t = recipe.train
    objective = get_objective(recipe.objective.name)
    per_device = t.batch_size // 2 if objective.layout == "pairs" else t.batch_size
    kwargs: dict[str, Any] = {name: getattr(t, name) for name in SAME_NAME}
    kwargs.update(
        output_dir=str(output_dir / "checkpoints"),
        num_train_epochs=t.epochs,
        per_device_train_batch_size=per_device,
        per_device_eval_batch_size=t.eval_batch_size,
        # transformers 5 reads a float below 1 as a fraction of the total steps (warmup_ratio is deprecated)
        warmup_steps=float(t.warmup_ratio),
        lr_scheduler_type=t.lr_scheduler,
        seed=recipe.seed,
        data_seed=recipe.seed,
        eval_strategy=t.eval_strategy if has_eval else "no",
        save_strategy=t.eval_strategy,
        load_best_model_at_end=has_eval and t.keep in ("best", "soup"),
        metric_for_best_model=f"eval_{selection_name(recipe)}_spearman" if has_eval else None,
        greater_is_better=True,
        report_to="none",
        dataloader_pin_memory=torch.cuda.is_available(),
        # without an accelerator, use_cpu makes torchrun / accelerate launch run CPU DDP (gloo)
        use_cpu=not torch.cuda.is_available(),
    )
    kwargs.update(t.trainer_args)  # the trainer's other options as given; report_to and use_cpu above are defaults
    kwargs["bf16"], why = bf16_setting(recipe)
    if t.bf16 == "auto":
        logger.info("train.bf16 %s: bf16 autocast %s", why, "on" if kwargs["bf16"] else "off")
    if t.group_by_length:
        from finesim.training.sampler import LengthGroupedBatchSampler

        kwargs["batch_sampler"] = LengthGroupedBatchSampler
    if extra and "batch_sampler" in extra and t.group_by_length:
        raise RecipeError(f"train.group_by_length and objective {objective.name!r}'s batch sampler exclude each other")
    kwargs.update(extra or {})
    if t.eval_strategy == "steps":
        kwargs.update(eval_steps=t.eval_steps, save_steps=t.eval_steps)
    return trainer_arguments_class(cross)(**kwargs)
