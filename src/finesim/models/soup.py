"""Model soups: one model whose weights are the uniform average of several fine-tunings of one base model.

A soup of the seeds of one recipe is a single model (one forward pass, indexable and servable like any other), and on
finesim's MiniLM C-STS screen it scored above its best member on dev (docs/results.md, issue 42). The members must
share one architecture (every parameter's name and shape) and, where their cards record it, one base model: weight
averaging is only meaningful between fine-tunings of the same starting weights. Floating-point tensors are averaged in
float32 and cast back; any other tensor (position ids) must be equal in every member and is kept.

``finesim soup --model A --model B ... --output-dir DIR`` (:func:`make_soup`) writes the soup as a finesim model
folder: member 0's card (recipe, base model, data) without its scores, which do not carry over, and the members named.
"""

from __future__ import annotations

import copy
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from finesim.models.io import ENCODER_TYPES, check_one_label_scale, load_conditional_model, read_marker, save_model
from finesim.models.runtime import RUNTIME_KEY

SOUP_DETAIL = "model soup"  # the card's details key naming the members


def average_state(states: Sequence[dict[str, Any]], names: Sequence[str] | None = None) -> dict[str, Any]:
    """The uniform average of several state dicts of one architecture (floating-point tensors averaged in float32
    and cast back; any other tensor must be equal in every member). ``ValueError`` names the first difference and
    the members (``names``, e.g. their folders; else "member i")."""
    import torch

    if not states:
        raise ValueError("no state dicts to average")
    label = list(names) if names is not None else [f"member {i}" for i in range(len(states))]
    first = states[0]
    for i, state in enumerate(states[1:], start=1):
        if state.keys() != first.keys():
            lacks, extra = sorted(set(first) - set(state))[:3], sorted(set(state) - set(first))[:3]
            raise ValueError(f"{label[i]} has other parameters than {label[0]}: it lacks {lacks}, has {extra}")
        for name, tensor in state.items():
            if tensor.shape != first[name].shape:
                raise ValueError(
                    f"{label[i]}: {name} has shape {tuple(tensor.shape)}, {label[0]} {tuple(first[name].shape)}"
                )
    out = {}
    for name, tensor in first.items():
        if torch.is_floating_point(tensor):
            total = sum(state[name].to(torch.float32) for state in states)
            out[name] = (total / len(states)).to(tensor.dtype)
        else:
            for i, state in enumerate(states[1:], start=1):
                if not torch.equal(state[name], tensor):
                    raise ValueError(f"{label[i]}: the non-float tensor {name} differs from {label[0]}'s")
            out[name] = tensor.clone()
    return out


def settings(model: Any) -> list[Any]:
    """What a model computes with besides its weights: each module's type and configuration (pooling mode, maximum
    length, a condition head's kind, a cross-encoder's head, ...), in order."""
    modules = list(model) if hasattr(model, "__iter__") else [model]
    lengths = [(name, getattr(model, name, None)) for name in ("max_seq_length", "max_length")]
    return [*lengths, *((type(m).__name__, _inference_config(m)) for m in modules if type(m).__name__ != "Dropout")]


def _inference_config(module: Any) -> dict[str, Any] | None:
    """A module's configuration less its dropout, which only acts in training (members of a dropout sweep soup)."""
    if not hasattr(module, "get_config_dict"):
        return None
    return {k: v for k, v in module.get_config_dict().items() if "dropout" not in k}


def member_markers(folders: Sequence[str | Path]) -> list[dict[str, Any]]:
    """The markers of a soup's members, checked: two or more finesim bi-, tri- or cross-encoder folders with torch
    weights (not an export), all of one encoder type and, where the cards record it, of one base model."""
    if len(folders) < 2:
        raise ValueError(f"a soup needs two or more models, got {len(folders)}")
    seen: dict[Path, str | Path] = {}
    for folder in folders:
        if Path(folder).resolve() in seen:
            raise ValueError(f"{folder} is given twice (as {seen[Path(folder).resolve()]}): each member once")
        seen[Path(folder).resolve()] = folder
    markers = []
    for folder in folders:
        marker = read_marker(folder) if Path(folder).is_dir() else None
        if marker is None:
            raise ValueError(
                f"{folder}: not a model folder finesim saved (no finesim_model.json); a soup averages finesim's "
                "bi-, tri- or cross-encoders"
            )
        if marker["encoder"] not in ENCODER_TYPES:
            raise ValueError(
                f"{folder}: a finesim {marker['encoder']!r} folder; a soup averages the weights of bi-, tri- or "
                "cross-encoders"
            )
        if RUNTIME_KEY in marker:
            raise ValueError(f"{folder}: an export (finesim export); make the soup of the models it was exported from")
        markers.append(marker)
    encoders = [m["encoder"] for m in markers]
    for folder, marker in zip(folders[1:], markers[1:]):
        if marker["encoder"] != encoders[0]:
            raise ValueError(f"{folders[0]} is a {encoders[0]}-encoder but {folder} a {marker['encoder']}-encoder")
    check_one_label_scale(
        {str(f): m for f, m in zip(folders, markers)}, "the mean of their weights may mix what they predict"
    )
    known = [(folder, base) for folder, m in zip(folders, markers) if (base := _base(m))]
    for folder, base in known[1:]:
        if base != known[0][1]:
            raise ValueError(
                f"{known[0][0]} was fine-tuned from {known[0][1]} but {folder} from {base}: a soup averages "
                "fine-tunings of one base model"
            )
    return markers


def _base(marker: dict[str, Any]) -> str | None:
    """A member's recorded base model, spelled one way (finesim's aliases and Hub ids resolved: ``minilm`` and
    ``sentence-transformers/all-MiniLM-L6-v2`` are one base)."""
    from finesim.models.hub import ALIASES

    base = (marker.get("card") or {}).get("base_model")
    return ALIASES.get(base, base) if isinstance(base, str) and base else None


def average_models(models: Sequence[Any], names: Sequence[str] | None = None) -> Any:
    """A copy of ``models[0]`` holding the uniform average of every member's weights (:func:`average_state`). The
    members must compute alike besides their weights (:func:`settings`: pooling, maximum length, head, ...);
    ``ValueError`` names the first that does not (by ``names``, else "member i")."""
    label = list(names) if names is not None else [f"member {i}" for i in range(len(models))]
    first = settings(models[0])
    for name, model in zip(label[1:], models[1:]):
        mine = settings(model)
        if mine != first:
            if len(mine) != len(first):
                raise ValueError(
                    f"{name} has other modules than {label[0]} ({[m[0] for m in mine]} vs {[m[0] for m in first]})"
                )
            differ = next((a, b) for a, b in zip(mine, first) if a != b)
            raise ValueError(f"{name} is set up otherwise than {label[0]} ({differ[0]} vs {differ[1]})")
    states = [{k: v.detach().cpu() for k, v in model.state_dict().items()} for model in models]
    soup = copy.deepcopy(models[0]).to("cpu")
    soup.load_state_dict(average_state(states, label))
    return soup


def save_soup(
    model: Any,
    folder: str | Path,
    *,
    members: Sequence[str],
    marker: dict[str, Any],
    metrics: dict[str, dict[str, float]] | None = None,
) -> Path:
    """Save a soup as a finesim model folder, written whole or not at all (a temporary sibling, renamed). Its card is
    member 0's (``marker``) with ``metrics`` in place of that member's scores and the members (as given) named."""
    from finesim.models.card import CardInfo

    folder = Path(folder)
    if folder.exists() and any(folder.iterdir()):
        raise FileExistsError(f"{folder} exists and is not empty; choose a new folder for the soup")
    card = CardInfo.from_dict(marker["card"]) if "card" in marker else CardInfo(encoder=str(marker["encoder"]))
    card.metrics = dict(metrics or {})
    card.details = {k: v for k, v in card.details.items() if k != "Training"}  # member 0's run, not the soup's
    card.details[SOUP_DETAIL] = (
        f"uniform weight average of {len(members)} fine-tunings (the recipe shown is member 0's; each member ran "
        f"its own seed): {', '.join(members)}"
    )
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = folder.parent / f".tmp-{folder.name}.{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        save_model(model, staging, encoder=str(marker["encoder"]), card=card)
        if folder.exists():
            folder.rmdir()  # empty, checked above
        staging.rename(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder


def make_soup(folders: Sequence[str | Path], output_dir: str | Path) -> Path:
    """Average the weights of the models in ``folders`` (:func:`member_markers` checks them) and save the soup to
    ``output_dir``; returns it. The members' scores do not carry over: evaluate the soup."""
    from finesim.results import portable_path

    markers = member_markers(folders)
    names = [str(folder) for folder in folders]
    models = [load_conditional_model(folder, device="cpu") for folder in folders]
    soup = average_models(models, names)
    return save_soup(soup, output_dir, members=[portable_path(f) for f in folders], marker=markers[0])
