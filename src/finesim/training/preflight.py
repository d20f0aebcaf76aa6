"""Everything about a training run that can be checked before the model is built, and the run's fingerprint.

:func:`preflight` is what ``finesim train --dry-run`` runs, and what a real run runs first:

- the recipe's names and values (:func:`finesim.training.recipe.check_recipe`), errors naming the file and key;
- the backbone resolvable now (a local folder, an offline copy, the Hugging Face cache, or a reachable Hub);
- every data file present and passing its reader's checks, labels inside ``labels.low/high`` (the declared range),
  the objective's layout possible (condition pairs, triplet columns);
- the values of ``train.trainer_args`` accepted by the trainer's arguments (built once, as the run will);
- the output folder writable, and what the run will do there.

**Resume only what is the same run.** A run writes ``OUT/run.json`` before it trains: its *fingerprint*, the recipe
as it runs (every key that changes the result) and a SHA-256 of each data file. A rerun into the same folder resumes
from ``OUT/checkpoints`` only when the fingerprint is the same; otherwise it is refused before any work, naming the
keys and files that changed. ``resume=False`` (``--no-resume``) starts over: the earlier run's checkpoints, model,
config, metrics and ``run.json`` are deleted. Keys that do not change the result (``name``, ``output_dir``,
``description``, ``paper``, ``notes``, ``data.root``, ``train.logging_steps``, ``train.num_threads``,
``train.dataloader_num_workers``, ``train.save_total_limit``, ``train.eval_batch_size``) are left out of it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from datasets import Dataset

from finesim.models.hub import MARKER_FILE
from finesim.paths import RUN_CONFIG_FILE, RUN_FILE, RUN_METRICS_FILE
from finesim.results import path_sha256
from finesim.training.recipe import CaseRecipe, Recipe, RecipeError, check_recipe, recipe_source

logger = logging.getLogger(__name__)

OWNED = ("checkpoints", "model", RUN_CONFIG_FILE, RUN_METRICS_FILE, RUN_FILE)  # what starting over deletes
NOT_IN_FINGERPRINT = frozenset(
    {
        "name",
        "output_dir",
        "description",
        "paper",
        "notes",
        "data.root",
        "train.logging_steps",
        "train.num_threads",
        "train.dataloader_num_workers",
        "train.save_total_limit",
        "train.eval_batch_size",
    }
)


@dataclass
class LoadedData:
    """One data file read, label-scaled and checked (``dataset`` has the canonical columns)."""

    role: str
    path: Path
    format: str
    dataset: Dataset
    report: dict[str, Any]
    sha256: str


@dataclass
class Preflight:
    """The outcome of :func:`preflight`: what a run will read and do.

    ``action``: ``start`` (a new run), ``resume`` (the same run, from ``checkpoint``), ``restart`` (an earlier
    run in the folder is deleted first) or ``done`` (the same run finished there: its model and ``metrics.json``
    are kept as they are, nothing is trained).
    """

    recipe: Recipe
    output_dir: Path
    data_root: str | None
    train: LoadedData
    validation: LoadedData | None
    backbone: str
    fingerprint: dict[str, Any]
    action: str
    checkpoint: str | None = None
    notes: list[str] = field(default_factory=list)
    dev: LoadedData | None = None  # carved from the training data (data.dev_fraction): the selection split
    pairs: tuple[Dataset, Any] | None = None  # the condition pairs of ``train`` (objectives in the pairs layout)

    @property
    def digest(self) -> str:
        """SHA-256 of the fingerprint's canonical JSON."""
        return hashlib.sha256(json.dumps(self.fingerprint, sort_keys=True, default=str).encode("utf-8")).hexdigest()

    def summary(self) -> list[str]:
        """One line per finding, for the command line."""
        lines = [f"backbone {self.recipe.model.backbone}: found ({self.backbone})"]
        for data in (self.train, self.dev, self.validation):
            if data is not None:
                from finesim.data.errors import skipped_text

                reasons = (data.report.get("skipped") or {}) if isinstance(data.report, dict) else {}
                extra = f", {sum(reasons.values())} rows skipped ({skipped_text(reasons)})" if reasons else ""
                for aux in data.report.get("auxiliary", []) if isinstance(data.report, dict) else []:
                    extra += f"; {aux['rows']} of them auxiliary from {aux['path']} ({aux['format']}"
                    extra += "" if aux["condition"] is None else f", condition {aux['condition']!r}"
                    extra += ")"
                lines.append(f"{data.role} data {data.path} ({data.format}): {len(data.dataset)} rows{extra}")
        resume = (
            f"resumes from {self.checkpoint}"
            if self.checkpoint
            else "no checkpoint was saved yet, so training starts from the first step"
        )
        lines.append(
            {
                "start": f"output folder {self.output_dir}: a new run",
                "resume": f"output folder {self.output_dir}: the same recipe and data; {resume}",
                "restart": f"output folder {self.output_dir}: the earlier run there is deleted first (--no-resume)",
                "done": f"output folder {self.output_dir}: this run finished there already (its model and "
                "metrics.json are kept; nothing is trained; --no-resume trains it again)",
            }[self.action]
        )
        return lines + self.notes

    def run_record(self) -> dict[str, Any]:
        """The content of ``OUT/run.json``."""
        from finesim._version import __version__
        from finesim.results import code_record

        return {
            "finesim": __version__,
            "code": code_record(),  # not in the fingerprint: a resume under other code is warned of, not refused
            "fingerprint_sha256": self.digest,
            "fingerprint": self.fingerprint,
        }


def preflight(
    recipe: Recipe, *, output_dir: str | Path | None = None, data_root: str | None = None, resume: bool = True
) -> Preflight:
    """Run every check that needs no training (see the module docstring); nothing is written or deleted.

    Args:
        recipe: the recipe as it will run (overrides applied).
        output_dir: overrides ``recipe.output_dir``.
        data_root: overrides ``recipe.data.root``.
        resume: False starts over when the folder holds an earlier run.

    Raises:
        RecipeError: a problem with the recipe, its backbone, its output folder or an earlier run there.
        DataFormatError: a data file that is missing or does not pass its reader's checks.
    """
    from finesim.models.hub import ModelResolutionError, resolve_model_path

    check_recipe(recipe)
    source = recipe_source(recipe)
    out = output_folder(recipe, output_dir)
    try:
        backbone = resolve_model_path(recipe.model.backbone)
    except ModelResolutionError as err:
        raise RecipeError(f"{source}: model.backbone: {err}") from None
    if recipe.model.max_length is not None:
        _check_positions(recipe.model.max_length, backbone, source)
    root = data_root if data_root is not None else recipe.data.root
    train, dev, auxiliary = read_training_data(recipe, root)
    validation = load_data(recipe, "validation", root) if recipe.data.validation else None
    pairs = check_layout(recipe, train.dataset, train.path)
    check_selection_data(recipe, train, dev, validation)
    check_label_form(recipe, train)
    overlap = validation_overlap(recipe, train, validation)
    if recipe.train.trainer_args:  # the trainer checks their values itself: now, not after the model is built
        _check_trainer_args(recipe, out, has_eval=dev is not None or validation is not None)
    check_writable(out, source)
    fingerprint = run_fingerprint(recipe, train, validation, auxiliary)
    action, checkpoint = _decide(out, fingerprint, resume, source)
    notes = [overlap] if overlap else []
    if recipe.train.bf16 == "auto":
        from finesim.training.arguments import bf16_setting

        on, why = bf16_setting(recipe)
        notes.append(f"train.bf16 {why}: bf16 autocast {'on' if on else 'off'} (metrics.json records it as bf16)")
    return Preflight(
        recipe,
        out,
        root,
        train,
        validation,
        backbone,
        fingerprint,
        action,
        checkpoint,
        notes=notes,
        dev=dev,
        pairs=pairs,
    )


def _check_positions(max_length: int, backbone: str, source: str) -> None:
    """``model.max_length`` within the backbone's positions, read from its config now (the model build checks the same
    with the weights loaded); a backbone whose config cannot be read here is left to the build."""
    from transformers import AutoConfig

    from finesim.models.io import check_max_length

    try:
        config = AutoConfig.from_pretrained(backbone)
    except (OSError, ValueError, KeyError):
        return
    try:
        check_max_length(max_length, config, backbone)
    except ValueError as err:
        raise RecipeError(f"{source}: model.max_length: {err}") from None


def output_folder(recipe: Recipe | CaseRecipe, output_dir: str | Path | None) -> Path:
    """The run's output folder: ``output_dir`` when given, else the recipe's."""
    if not (output_dir or recipe.output_dir):
        raise RecipeError(
            f"{recipe_source(recipe)}: no output folder: set output_dir in the recipe or pass one (--output-dir; "
            "output_dir= in Python)"
        )
    return Path(output_dir or recipe.output_dir or "")


def resolve_data_path(path: str, root: str | None) -> Path:
    """Absolute paths as given; relative ones against ``root`` or the finesim data root."""
    p = Path(path).expanduser()
    if p.is_absolute():
        return p
    from finesim.paths import data_root

    return data_root(root) / p


def read_data_file(
    recipe: Recipe,
    key: str,
    spec: str,
    data_format: str,
    options: Any,
    root: str | None,
    *,
    limit: int | None,
    purpose: str,
) -> tuple[Path, Dataset, dict[str, Any], str]:
    """Read one data file of the recipe, named ``key`` in errors (``data.train``, ``data.auxiliary[0]``): ``spec``
    resolved against the data root (or a Hub dataset id for ``table``), read through ``data_format`` with ``options``
    (:class:`~finesim.training.formats.FormatOptions`), refused when empty (``purpose``: "train on", ...), cut to
    ``limit`` rows. Returns the path, the dataset, the reader's report and the data's SHA-256."""
    from finesim.data.errors import DataFormatError
    from finesim.training.formats import get_data_format

    source = recipe_source(recipe)
    path = resolve_data_path(spec, root)
    here = Path(spec).expanduser()
    beside = not here.is_absolute() and not path.exists() and here.exists()  # a file in the working folder
    hub = data_format == "table" and not path.exists() and not beside and _is_hub_id(spec)
    if hub:
        path = Path(spec)  # a Hub dataset id, read by the table reader
    elif not path.exists():
        where = ""
        if not here.is_absolute():
            from finesim.paths import data_root, data_root_source

            where = f": a relative path is read under the data root {data_root(root)} (from {data_root_source(root)})"
            if beside:
                where += f"; {spec} exists in the working folder: give its absolute path ({here.resolve()})"
        raise DataFormatError(f"{key} not found (from {source}){where}", path=path)
    try:
        # a Hub id goes to the table reader as the string it is (read_table takes str | Path; DataLoader types a Path)
        dataset, report = get_data_format(data_format)(spec if hub else path, options)  # type: ignore[arg-type]
    except DataFormatError:
        raise  # names the file, row and column itself
    except ValueError as err:  # a format's own refusal (e.g. a file where it reads a folder): name the key
        raise RecipeError(f"{source}: {key} ({data_format!r}): {err}") from None
    if len(dataset) == 0:
        raise DataFormatError(f"no rows to {purpose} ({key})", path=path)
    if limit is not None and limit < len(dataset):
        dataset = dataset.select(range(limit))
    digest = (
        hashlib.sha256(f"hub dataset {spec} split {options.split}".encode()).hexdigest() if hub else path_sha256(path)
    )
    return path, dataset, report, digest


def load_data(recipe: Recipe, role: str, root: str | None) -> LoadedData:
    """Read one of the recipe's data files (``role`` ``train`` or ``validation``) through its format, cut to
    ``data.max_*_rows``, labels checked against ``labels.low/high`` and scaled; a model without conditions refuses
    data with them."""
    from finesim.training.encoders import get_encoder
    from finesim.training.formats import FormatOptions

    d = recipe.data
    source = recipe_source(recipe)
    spec = d.train if role == "train" else str(d.validation)
    data_format = d.format if role == "train" else (d.validation_format or d.format)
    options = FormatOptions(
        label_range=(recipe.labels.low, recipe.labels.high), columns=dict(d.columns or {}), split=d.split
    )
    path, dataset, report, digest = read_data_file(
        recipe,
        f"data.{role}",
        spec,
        data_format,
        options,
        root,
        limit=d.max_train_rows if role == "train" else d.max_validation_rows,
        purpose="train on" if role == "train" else "validate on",
    )
    dataset = scale_labels(dataset, recipe, what=str(path))
    unread = report.get("columns_unread") if isinstance(report, dict) else None
    if unread and "condition" not in dataset.column_names:
        what = "train" if role == "train" else "are validated"
        logger.warning(
            "%s (data.%s) has no 'condition' column, so its pairs %s without conditions; columns not read: %s. If "
            "one of them holds the condition, map it with data.columns.condition: NAME",
            path,
            role,
            what,
            unread,
        )
    encoder = get_encoder(recipe.model.encoder)
    if not encoder.conditions and "condition" in dataset.column_names:
        raise RecipeError(
            f"{source}: encoder {encoder.name!r} embeds single sentences, but the data {path} (format "
            f"{data_format!r}) gives a condition per pair; use STS-style data without conditions"
        )
    return LoadedData(role, path, data_format, dataset, report, digest)


def load_auxiliary(recipe: Recipe, root: str | None, *, conditions: bool) -> list[LoadedData]:
    """Read ``data.auxiliary``'s pairs (:class:`~finesim.training.recipe.AuxiliarySpec`) as :func:`load_data` reads a
    file (``split``, ``columns``, a Hub id for ``table``), cut to ``max_rows``; labels checked against the entry's
    ``low/high``, mapped linearly onto ``labels.low/high`` and scaled as the main rows are. ``conditions``: whether
    data.train's rows carry a condition; then every auxiliary pair gets one (the entry's ``condition``, or the data's
    own), else none may. Columns as :func:`load_data`'s, without ``row``."""
    import numpy as np

    from finesim.data.errors import DataFormatError
    from finesim.training.formats import FormatOptions

    source = recipe_source(recipe)
    lab = recipe.labels
    loaded = []
    for i, aux in enumerate(recipe.data.auxiliary):
        key = f"data.auxiliary[{i}]"
        options = FormatOptions(label_range=(aux.low, aux.high), columns=dict(aux.columns), split=aux.split)
        path, dataset, report, digest = read_data_file(
            recipe, f"{key}.train", aux.train, aux.format, options, root, limit=aux.max_rows, purpose="train on"
        )
        missing = sorted({"sentence1", "sentence2", "label"} - set(dataset.column_names))
        if missing:
            raise RecipeError(
                f"{source}: {key}: format {aux.format!r} gives columns {dataset.column_names}, not labelled sentence "
                f"pairs ({missing} missing)"
            )
        labels = np.asarray(dataset["label"], dtype=np.float64)
        bad = np.flatnonzero((labels < aux.low) | (labels > aux.high))
        if bad.size:  # formats with a fixed scale (sts: 0-5) do not check the entry's range themselves
            where = f"row {dataset['row'][int(bad[0])]}" if "row" in dataset.column_names else f"pair {int(bad[0]) + 1}"
            raise DataFormatError(
                f"{bad.size} labels lie outside {key}.low/high [{aux.low:g}, {aux.high:g}]; first at {where} of what "
                f"format {aux.format!r} read (label {labels[int(bad[0])]:g})",
                path=path,
            )
        columns: dict[str, list[Any]] = {"sentence1": dataset["sentence1"], "sentence2": dataset["sentence2"]}
        own = "condition" in dataset.column_names
        if own and aux.condition is not None:
            raise RecipeError(f"{source}: {key}: {path} carries its own conditions; remove {key}.condition")
        if not conditions and (own or aux.condition is not None):
            raise RecipeError(
                f"{source}: {key}: data.train's rows have no condition, so auxiliary pairs take none "
                f"({'its data carries conditions' if own else f'remove {key}.condition'})"
            )
        if own:
            columns["condition"] = dataset["condition"]
        elif conditions:
            if aux.condition is None:
                raise RecipeError(
                    f"{source}: {key}.condition is required: data.train's rows carry a condition, so every auxiliary "
                    "pair needs one (e.g. 'overall meaning'; \"\" for an empty one)"
                )
            columns["condition"] = [aux.condition] * len(dataset)
        mapped = lab.low + (labels - aux.low) * (lab.high - lab.low) / (aux.high - aux.low)
        columns["label"] = np.clip(mapped, lab.low, lab.high).tolist()  # no overshoot by rounding at the ends
        scaled = scale_labels(Dataset.from_dict(columns), recipe, what=f"{path} ({key})")
        record = {
            "format": aux.format,
            "rows": len(scaled),
            "condition": aux.condition,
            "labels_mapped": f"[{aux.low:g}, {aux.high:g}] -> [{lab.low:g}, {lab.high:g}]",
            "report": report,
        }
        loaded.append(LoadedData(key, path, aux.format, scaled, record, digest))
    return loaded


def with_auxiliary(train: LoadedData, auxiliary: Sequence[LoadedData]) -> LoadedData:
    """``train`` with the auxiliary rows appended (after its dev split was carved: they never reach dev); the
    report lists them under ``auxiliary``. Without auxiliary data, ``train`` itself."""
    if not auxiliary:
        return train
    from datasets import concatenate_datasets

    columns = [c for c in train.dataset.column_names if c != "row"]  # load_auxiliary gave them these
    parts = [train.dataset.select_columns(columns)] + [a.dataset.select_columns(columns) for a in auxiliary]
    parts = [p if p.features == parts[0].features else p.cast(parts[0].features) for p in parts]
    report = {**train.report, "auxiliary": [{"path": str(a.path), **a.report} for a in auxiliary]}
    return LoadedData(train.role, train.path, train.format, concatenate_datasets(parts), report, train.sha256)


def read_training_data(recipe: Recipe, root: str | None) -> tuple[LoadedData, LoadedData | None, list[LoadedData]]:
    """``(train, dev, auxiliary)``: data.train read, its dev split carved (``data.dev_fraction``), the auxiliary
    pairs appended to the rest; ``auxiliary`` as read (for the fingerprint)."""
    train, dev = carve_dev(recipe, load_data(recipe, "train", root))
    auxiliary = load_auxiliary(recipe, root, conditions="condition" in train.dataset.column_names)
    return with_auxiliary(train, auxiliary), dev, auxiliary


def _is_hub_id(spec: str) -> bool:
    from finesim.data.table import HUB_FORMAT, detect_format

    try:
        return detect_format(spec) == HUB_FORMAT
    except ValueError:
        return False


def carve_dev(recipe: Recipe, train: LoadedData) -> tuple[LoadedData, LoadedData | None]:
    """``(train, dev)``: with ``data.dev_fraction`` a development split of whole sentence pairs carved from the
    training data (seed ``data.dev_seed``), chosen on during training; else ``(train, None)``."""
    d = recipe.data
    if d.dev_fraction is None:
        return train, None
    from finesim.data.splits import split_by_pair

    if not {"sentence1", "sentence2"} <= set(train.dataset.column_names):
        raise RecipeError(f"{recipe_source(recipe)}: data.dev_fraction needs sentence pairs (not triplets)")
    rest, dev = split_by_pair(train.dataset, d.dev_fraction, d.dev_seed)
    carved = {"carved_from": str(train.path), "dev_fraction": d.dev_fraction, "dev_seed": d.dev_seed}
    kept = LoadedData("train", train.path, train.format, rest, {**train.report, "dev_carved": carved}, train.sha256)
    return kept, LoadedData("dev", train.path, train.format, dev, carved, train.sha256)


def scale_labels(dataset: Dataset, recipe: Recipe, *, what: str) -> Dataset:
    """Apply the recipe's label scaling to the ``label`` column (errors name the file's row)."""
    import numpy as np

    from finesim.data.labels import minmax_scale

    spec = recipe.labels
    if spec.scale == "none" or "label" not in dataset.column_names:
        return dataset
    labels = np.asarray(dataset["label"], dtype=np.float64)
    bad = np.flatnonzero((labels < spec.low) | (labels > spec.high))
    if bad.size:
        rows = dataset["row"] if "row" in dataset.column_names else list(range(1, len(dataset) + 1))
        i = int(bad[0])
        raise ValueError(
            f"{what}: {bad.size} labels lie outside labels.low/high [{spec.low:g}, {spec.high:g}]; "
            f"first at row {rows[i]} (label {labels[i]:g})"
        )
    scaled = minmax_scale(labels, spec.low, spec.high).tolist()
    return dataset.remove_columns("label").add_column("label", scaled)


def check_layout(recipe: Recipe, rows: Dataset, train_path: Path) -> tuple[Dataset, Any] | None:
    """The objective's layout is possible with this data; for the pairs layout, its condition pairs (made once, here:
    the runner lays them out)."""
    from finesim.training.encoders import TRIPLET_COLUMNS, get_encoder
    from finesim.training.objectives import get_objective

    source = recipe_source(recipe)
    objective = get_objective(recipe.objective.name)
    encoder = get_encoder(recipe.model.encoder)
    if objective.layout == "pairs":
        if encoder.pairs is None:
            raise RecipeError(
                f"{source}: objective {objective.name!r} needs condition pairs, which encoder {encoder.name!r} lacks"
            )
        if "condition" not in rows.column_names:
            raise RecipeError(f"{source}: objective {objective.name!r} needs data with conditions (data.format)")
        from finesim.data.pairing import PairingError, pair_conditions, same_condition_note

        try:
            pairs = pair_conditions(rows, equal_labels=recipe.data.equal_labels)
        except PairingError as err:
            raise RecipeError(f"{train_path}: {err} (data.equal_labels in {source})") from None
        note = same_condition_note(pairs[1])
        if note:
            logger.warning("%s: %s", train_path, note)
        if len(pairs[0]) == 0:
            dropped = ", the rest with equal labels dropped" if pairs[1].equal_label_pairs_dropped else ""
            raise RecipeError(
                f"{train_path}: objective {objective.name!r} trains on sentence pairs labelled under two conditions, "
                f"and none of the {len(rows)} rows forms one ({len(pairs[1].bad_groups)} sentence pairs without "
                f"exactly two conditions{dropped}) ({source})"
            )
        return pairs
    if objective.layout == "triplets":
        missing = sorted(set(TRIPLET_COLUMNS) - set(rows.column_names))
        if missing:
            raise RecipeError(
                f"{source}: objective {objective.name!r} needs {list(TRIPLET_COLUMNS)} columns; data format "
                f"{recipe.data.format!r} gives {rows.column_names} ({missing} missing)"
            )
    elif encoder.name == "tri" and "condition" not in rows.column_names:
        raise RecipeError(f"{source}: a tri-encoder needs a condition column in the training data")
    return None


def validation_overlap(recipe: Recipe, train: LoadedData, validation: LoadedData | None) -> str | None:
    """Validation that is the training data itself (the same content) is warned of: it chooses and reports on rows
    the model trains on (a smoke test may want that; a result may not). A validation whose sentence pairs (either
    order) are partly in the training data is a note for the summary (C-STS validation has 5 of its 1,824 rows'
    pairs in train). None when there is no overlap."""
    if validation is None or not {"sentence1", "sentence2"} <= set(validation.dataset.column_names):
        return None
    if not {"sentence1", "sentence2"} <= set(train.dataset.column_names):
        return None
    if validation.sha256 == train.sha256:
        logger.warning(
            "%s: data.validation (%s) is the training data itself: the model is validated (and, without a dev split, "
            "its checkpoints chosen) on rows it trains on, an optimistic score; give a held-out file for a result",
            recipe_source(recipe),
            validation.path,
        )
    from finesim.data.overlap import count_overlap

    shared = count_overlap(train.dataset, validation.dataset)
    if not shared:
        return None
    return (
        f"{shared} of the {len(validation.dataset)} validation rows have a sentence pair (either order) that the "
        "training data has too"
    )


COSINE_REGRESSION_OBJECTIVES = ("mse", "quad-mse", "ccl")  # their loss regresses cos(u, v) on the label's value


def check_label_form(recipe: Recipe, train: LoadedData) -> None:
    """A bi- or tri-encoder objective that regresses the cosine on the label values (``mse``, and the MSE terms of
    ``quad-mse`` and ``ccl``) on labels kept as they are (``labels.scale: none``) needs them within the cosine's
    [-1, 1]: raw 0-5 or 0-10 labels trained a loss of about 20 without a word. A cross-encoder's regression output is
    not bounded, and ``quad`` compares labels only: neither is checked."""
    objective = recipe.objective.name
    regresses = objective in COSINE_REGRESSION_OBJECTIVES and recipe.model.encoder in ("bi", "tri")
    if not regresses or recipe.labels.scale != "none" or "label" not in train.dataset.column_names:
        return
    labels = [float(x) for x in train.dataset["label"]]
    low, high = min(labels, default=0.0), max(labels, default=0.0)
    if low < -1.0 - 1e-6 or high > 1.0 + 1e-6:  # a teacher's cosines may pass 1 by rounding
        raise RecipeError(
            f"{recipe_source(recipe)}: objective {objective!r} regresses a cosine, within [-1, 1], on the labels, "
            f"but {train.path} (data.train) has labels from {low:g} to {high:g} and labels.scale is none: set "
            "labels.scale: minmax with labels.low/high the labels' range"
        )


def check_selection_data(
    recipe: Recipe, train: LoadedData, dev: LoadedData | None, validation: LoadedData | None
) -> None:
    """The split checkpoints are chosen on (dev when carved, else validation; none with ``train.keep: last``) can
    choose: at least two labelled rows and labels that are not all one value (a constant side makes Spearman 0.0 at
    every evaluation, and the first checkpoint would be kept as "best"). A validation file must give conditions as
    the training data does: a conditional model chosen on plain pairs is refused; reported on them (a dev split
    chooses, or none does), or a plain model on conditional pairs, is warned of."""
    source = recipe_source(recipe)
    chooses = recipe.train.keep != "last"  # train.keep last keeps the last checkpoint: no split chooses
    conditional = "condition" in train.dataset.column_names
    if validation is not None and conditional != ("condition" in validation.dataset.column_names):
        where = f"{validation.path} (data.validation)"
        if conditional and dev is None and chooses:
            raise RecipeError(
                f"{source}: the training data gives a condition per pair, but {where} has none: the conditional "
                "model would be validated, and its checkpoints chosen, on plain pairs; give a validation file with "
                "conditions (map its column with data.columns.condition), carve a dev split (data.dev_fraction), or "
                "set data.validation: null"
            )
        logger.warning(
            "%s %s, but the training data %s: the model is validated on inputs unlike those it trains on",
            where,
            "has no condition column" if conditional else "gives a condition per pair",
            "gives a condition per pair" if conditional else "has none",
        )
    selection = dev if dev is not None else validation
    if selection is None or "label" not in selection.dataset.column_names or not chooses:
        return
    if selection.role == "dev":
        where = f"the dev split carved from {selection.path} (data.dev_fraction {recipe.data.dev_fraction})"
    else:
        where = f"{selection.path} (data.validation)"
    labels = list(selection.dataset["label"])
    if len(labels) < 2:
        raise RecipeError(
            f"{source}: {where} has {len(labels)} labelled row{'' if len(labels) == 1 else 's'}; choosing checkpoints "
            "needs at least 2 (a correlation over fewer is undefined): use a larger split"
        )
    if len(set(labels)) == 1:
        raise RecipeError(
            f"{source}: every label of {where} is {labels[0]:g}: a correlation with constant labels is 0.0 at every "
            "evaluation, so no checkpoint could be chosen on it; use a split with varied labels"
        )


def _check_trainer_args(recipe: Recipe, out: Path, *, has_eval: bool) -> None:
    from finesim.training.arguments import training_arguments
    from finesim.training.encoders import get_encoder

    cross = get_encoder(recipe.model.encoder).trainer == "cross"
    try:
        training_arguments(recipe, out, has_eval=has_eval, cross=cross)
    except (TypeError, ValueError) as err:
        raise RecipeError(f"{recipe_source(recipe)}: train.trainer_args: {err}") from None


def check_writable(out: Path, source: str) -> None:
    """The output folder ``out`` is a folder or can be created, and is writable; errors name ``source``."""
    if out.exists() and not out.is_dir():
        raise RecipeError(f"{source}: the output folder {out} is a file")
    folder = out
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir() or not os.access(folder, os.W_OK):
        raise RecipeError(f"{source}: the output folder {out} cannot be created or written ({folder} is not writable)")


# ---------------------------------------------------------------- fingerprint and resume


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(_flatten(value, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): data}


def run_fingerprint(
    recipe: Recipe, train: LoadedData, validation: LoadedData | None, auxiliary: Sequence[LoadedData] = ()
) -> dict[str, Any]:
    """What makes a run the same run: the recipe's result-changing keys (flattened) and the data files' hashes
    (``auxiliary``'s only when there are some, so that a run without them keeps its fingerprint)."""
    keys = {k: v for k, v in _flatten(recipe.to_dict()).items() if k not in NOT_IN_FINGERPRINT}
    if not keys.get("data.auxiliary"):  # none: the key is left out, as an empty trainer_args leaves none
        keys.pop("data.auxiliary", None)
    if recipe.train.keep != "soup":  # it acts only with keep soup; without it a run keeps its earlier fingerprint
        keys.pop("train.soup_checkpoints", None)
    if not keys.get("train.freeze"):  # nothing frozen: left out, so that such a run keeps its earlier fingerprint
        keys.pop("train.freeze", None)
    if recipe.train.bf16 == "auto":  # what auto chose here: a resume where it chooses otherwise is another run
        from finesim.training.arguments import bf16_setting

        keys["train.bf16 (auto chose)"] = bf16_setting(recipe)[0]
    data: dict[str, Any] = {"train": train.sha256, "validation": None if validation is None else validation.sha256}
    if auxiliary:
        data["auxiliary"] = [a.sha256 for a in auxiliary]
    return {"recipe": keys, "data": data}


def fingerprint_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Human-readable differences between two fingerprints (``key: old -> new``)."""
    changes = []
    old_keys, new_keys = old.get("recipe", {}), new.get("recipe", {})
    # A key that only one side has is a field added to recipes since the other run was written (or an option dict
    # entry); it counts as a change unless it holds the field's default, the behaviour of the finesim without it.
    defaults = _flatten(Recipe().to_dict())
    for key in sorted(set(old_keys) | set(new_keys)):
        a, b = old_keys.get(key, "<unset>"), new_keys.get(key, "<unset>")
        if "<unset>" in (a, b) and key in defaults and defaults[key] == (b if a == "<unset>" else a):
            continue
        if a != b:
            changes.append(f"{key}: {a!r} -> {b!r}")
    for role in ("train", "validation", "auxiliary"):
        a, b = (old.get("data") or {}).get(role), (new.get("data") or {}).get(role)
        if a != b:
            changes.append(f"the {role} data (its content changed)" if a and b else f"the {role} data: {a} -> {b}")
    return changes


def checkpoint_complete(checkpoint: Path) -> bool:
    """Whether the trainer finished saving ``checkpoint``.

    transformers writes ``trainer_state.json`` last (after the weights, optimizer, scheduler and RNG states), so a run
    stopped while saving leaves a folder without it, or with it half written.
    """
    try:
        json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return True


def step_checkpoints(folder: Path) -> list[Path]:
    """The trainer's ``checkpoint-<step>`` folders in ``folder`` (complete or not), oldest first; none when it is
    missing."""
    if not folder.is_dir():
        return []
    found = []
    for child in folder.iterdir():
        prefix, _, step = child.name.partition("-")
        if child.is_dir() and prefix == "checkpoint" and step.isdigit():
            found.append((int(step), child))
    return [checkpoint for _, checkpoint in sorted(found)]


def _last_checkpoint(folder: Path) -> str | None:
    """The newest complete ``checkpoint-N`` in ``folder``; newer incomplete ones are named in a warning and skipped.

    The trainer saves into the skipped folder again when it reaches that step.
    """
    skipped: list[str] = []
    for checkpoint in reversed(step_checkpoints(folder)):
        if checkpoint_complete(checkpoint):
            if skipped:
                logger.warning(
                    "skipping %s: the run was stopped while saving it (no complete trainer_state.json)",
                    ", ".join(skipped),
                )
            return str(checkpoint)
        skipped.append(checkpoint.name)
    if skipped:
        logger.warning(
            "no complete checkpoint in %s (%s incomplete): training starts from the first step",
            folder,
            ", ".join(skipped),
        )
    return None


def _older_finesim_run(out: Path) -> bool:
    """Whether ``out`` holds a run of a finesim that wrote no ``run.json``: the trainer's ``checkpoints/checkpoint-N``
    folders, or a ``config.json`` that is a finesim recipe (not, e.g., a transformers model's config)."""
    if any((out / "checkpoints").glob("checkpoint-*")):
        return True
    try:
        config = json.loads((out / RUN_CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and {"model", "objective", "train"} <= config.keys()


def _earlier_run(out: Path, source: str) -> bool:
    """Whether ``out`` holds an earlier finesim run. Files of :data:`OWNED`'s names that no finesim run recorded
    (a user's own ``config.json`` or ``model/``) are refused: a run would overwrite them, and ``--no-resume`` would
    delete them."""
    found = [name for name in OWNED if (out / name).exists()]
    if not found or (out / RUN_FILE).is_file() or _older_finesim_run(out):
        return bool(found)
    raise RecipeError(
        f"{source}: the output folder {out} holds {', '.join(found)}, which no finesim run recorded (no {RUN_FILE}); "
        "a run there would overwrite them (and --no-resume would delete them): choose another output folder "
        "(--output-dir; output_dir= in Python)"
    )


def _decide(out: Path, fingerprint: dict[str, Any], resume: bool, source: str) -> tuple[str, str | None]:
    """``(action, checkpoint)`` for a run into ``out`` (see :class:`Preflight`)."""
    if not _earlier_run(out, source):
        return "start", None
    if not resume:
        return "restart", None
    record_file = out / RUN_FILE
    if not record_file.is_file():
        raise RecipeError(
            f"{source}: the output folder {out} holds an earlier run without a fingerprint ({RUN_FILE}; written by "
            "an older finesim), so whether it is the same run is unknown; rerun with --no-resume (resume=False in "
            "Python) to start over there, or choose another output folder"
        )
    try:
        record = json.loads(record_file.read_text(encoding="utf-8"))
        stored = record["fingerprint"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise RecipeError(
            f"{source}: {record_file} is unreadable ({err}); rerun with --no-resume (resume=False in Python)"
        ) from None
    changes = fingerprint_changes(stored, fingerprint)
    if changes:
        shown = "; ".join(changes[:8]) + (f"; and {len(changes) - 8} more" if len(changes) > 8 else "")
        raise RecipeError(
            f"{source}: the output folder {out} holds a run of another recipe or data ({shown}); resuming it would "
            "train with its old settings. Rerun with --no-resume (resume=False in Python) to start over there, or "
            "choose another output folder"
        )
    _warn_other_code(out, record)
    if (out / RUN_METRICS_FILE).is_file() and (out / "model" / MARKER_FILE).is_file():  # written last, in this order
        return "done", None
    return "resume", _last_checkpoint(out / "checkpoints")


def _warn_other_code(out: Path, record: dict[str, Any]) -> None:
    """The fingerprint holds no code: a resume under another finesim version or git commit than the run started
    with is said (the run is then trained by two versions of the code), and so is a finished run kept as it is."""
    from finesim._version import __version__
    from finesim.results import code_record

    then = (record.get("finesim"), (record.get("code") or {}).get("git_commit"))
    now = (__version__, code_record()["git_commit"])
    names = ("finesim", "commit")
    changed = [f"{what} {old} -> {new}" for what, old, new in zip(names, then, now) if old and new and old != new]
    if changed:
        logger.warning(
            "%s holds a run started under other code than this (%s): resumed, it is trained by two versions of "
            "finesim; finished, it is kept as that code made it (--no-resume trains it over under this one)",
            out,
            "; ".join(changed),
        )


def start_over(out: Path, names: Sequence[str] = OWNED) -> list[str]:
    """Delete what an earlier run wrote into ``out``: ``names`` (default :data:`OWNED`, a ``finesim train`` run's
    files), files or folders; returns the names deleted."""
    deleted = []
    for name in names:
        target = out / name
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
        else:
            continue
        deleted.append(name)
    return deleted
