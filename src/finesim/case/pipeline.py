"""The CASE actions as library functions: train a CASE recipe, embed, sweep, isotropy and score C-STS files.

:func:`train_recipe` is what ``finesim train`` runs for a recipe with ``method: case`` (and ``finesim case train``, its
alias), after :func:`check_case`, the checks of ``--dry-run``. The other actions take options already merged and
checked by :func:`finesim.case.options.resolve_options` (plus the files to read and the folder to write) and return
the results payload that ``finesim case`` prints from and writes as JSON. :func:`train_model` and
:func:`measure_isotropy` write their own files into ``output_dir``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from datasets import Dataset

from finesim.case.data import embed_pairs, read_case_data, split_by_pair, split_summary
from finesim.case.encoding import DEFAULT_FAMILY_FOR, ConditionAwareEncoder
from finesim.case.options import DEFAULTS, default_cache_dir, parse_dims, recipe_options
from finesim.case.projection import DEFAULT_ACTIVATION
from finesim.case.prompts import PromptFormat
from finesim.case.training import TrainConfig, evaluate_pairs, sweep_dimensions, train_projection
from finesim.options import RecipeError
from finesim.paths import RUN_FILE
from finesim.results import environment_record, file_sha256, write_json_atomic
from finesim.training import preflight
from finesim.training.recipe import CaseRecipe, recipe_source


class Splits(NamedTuple):
    """Training data of one run: train and dev rows, the report-only eval files, and their description."""

    train: Dataset
    dev: Dataset
    evals: dict[str, Dataset]
    description: dict[str, Any]


def _with_model_resolved(options: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``options`` whose ``model`` alias (``minilm``) is the real name: one cache namespace per model (a
    folder keeps its name as given, so a moved project still loads it; the weights hash in the encoder's description
    tells another model under that name)."""
    from finesim.models.hub import ALIASES

    return {**options, "model": ALIASES.get(options["model"], options["model"])}


def build_encoder(options: dict[str, Any], show_progress: bool = True) -> ConditionAwareEncoder:
    """Load the encoder named by ``options`` and wrap it in a :class:`~finesim.case.ConditionAwareEncoder`.

    Sets torch's thread count to ``options["threads"]``.
    """
    import torch

    from finesim.models.io import load_sentence_model

    options = _with_model_resolved(options)
    torch.set_num_threads(int(options["threads"]))
    family = options["family"] or DEFAULT_FAMILY_FOR[options["formulation"]]
    prompt = PromptFormat(family, options["formulation"], prompts_file=options["prompts_file"])
    model = load_sentence_model(
        options["model"],
        device=options["device"],
        pooling=options["pooling"],
        max_length=options["max_length"],
    )
    return ConditionAwareEncoder(
        model,
        prompt,
        subtract_condition=bool(options["subtract_condition"]),
        normalize_before_subtract=bool(options["normalize_before_subtract"]),
        cache_dir=options["cache_dir"],
        model_name=options["model"],
        batch_size=int(options["batch_size"]),
        show_progress=show_progress,
    )


def train_config(options: dict[str, Any]) -> TrainConfig:
    """The projection training settings of ``options``, after :func:`check_label_scaling`."""
    check_label_scaling(options, options.get("recipe") or "the CASE options")
    return TrainConfig(
        kind=options["kind"],
        dim=int(options["dim"]),
        lr=float(options["lr"]),
        batch_size=int(options["train_batch_size"]),
        epochs=int(options["epochs"]),
        dropout=options["dropout"],
        negative_slope=float(options["negative_slope"]),
        activation=options["activation"],
        hidden_dim=None if options["hidden_dim"] is None else int(options["hidden_dim"]),
        label_divisor=float(options["label_divisor"]),
        label_offset=float(options["label_offset"]),
        seed=int(options["seed"]),
        threads=int(options["threads"]),
    )


def resolve_paths(options: dict[str, Any], data: str | Path | None = None) -> dict[str, Any]:
    """``options`` with the data files ``train``, ``dev`` and ``eval`` resolved: relative paths under the data
    root (``data``, else finesim's configured one), absolute ones as given."""

    def resolve(path: str) -> str:
        return str(preflight.resolve_data_path(path, None if data is None else str(data)))

    dev = options["dev"] and resolve(options["dev"])
    return {**options, "train": resolve(options["train"]), "dev": dev, "eval": [resolve(p) for p in options["eval"]]}


def check_case(
    recipe: CaseRecipe,
    *,
    output_dir: str | Path | None = None,
    data: str | Path | None = None,
    resume: bool = True,
) -> tuple[dict[str, Any], list[str]]:
    """Every check of a CASE recipe that needs no encoding (``finesim train --dry-run``): the encoder resolvable
    now, the prompt family and formulation, each data file read as C-STS, the output folder writable and free
    (:func:`check_output_folder`; ``resume=False`` is ``--no-resume``).

    Returns:
        the resolved options (:func:`resolve_paths`) and one line per finding.

    Raises:
        RecipeError: naming the recipe file and the key; DataFormatError for a data file.
    """
    from finesim.models.hub import ModelResolutionError, resolve_model_path

    source = recipe_source(recipe)
    out = preflight.output_folder(recipe, output_dir)
    options = resolve_paths(recipe_options(recipe), data)
    try:
        found = resolve_model_path(options["model"])
    except ModelResolutionError as err:
        raise RecipeError(f"{source}: case.model: {err}") from None
    family = options["family"] or DEFAULT_FAMILY_FOR[options["formulation"]]
    try:
        PromptFormat(family, options["formulation"], prompts_file=options["prompts_file"])
    except (OSError, ValueError) as err:
        raise RecipeError(f"{source}: case.family / case.prompts_file: {err}") from None
    check_projection_options(options, source)
    preflight.check_writable(out, source)
    cache = options["cache_dir"] or default_cache_dir()
    encoder = {"the encoder's model folder (case.model)": found, "the embedding cache (case.cache_dir)": cache}
    check_not_encoder_folder(out, encoder, source)
    lines = [f"CASE encoder {options['model']}: found ({found}); prompt family {family}, {options['formulation']}"]
    for role, path in (("train", options["train"]), ("dev", options["dev"]), *(("eval", p) for p in options["eval"])):
        if path:
            lines.append(f"{role} data {path} (csts): {len(read_case_data(path, role, label_range(options))[0])} rows")
    if not options["dev"]:
        lines.append(f"dev: {options['dev_fraction']} of the training sentence pairs (seed {options['seed']})")
    if "dims" in recipe.case.model_fields_set:
        lines.append(f"case.dims is read by finesim case sweep; this trains one projection (case.dim {options['dim']})")
    lines.append(check_output_folder(out, options, resume=resume, source=source))
    return options, lines


def check_projection_options(options: dict[str, Any], source: str) -> None:
    """The projection's options that only some kinds take, refused before any encoding: an activation or a hidden
    layer for the linear projection, a LeakyReLU slope beside another activation. ``RecipeError`` names the key
    (the command line's ``--activation`` / ``--hidden-dim`` / ``--negative-slope`` set the same keys)."""
    kind, activation, hidden = options["kind"], options["activation"], options["hidden_dim"]
    if kind == "linear" and activation is not None:
        raise RecipeError(
            f"{source}: case.activation {activation!r}: the linear projection has no activation (z = W x); "
            "use case.kind nonlinear"
        )
    if kind == "linear" and hidden is not None:
        raise RecipeError(
            f"{source}: case.hidden_dim {hidden}: the linear projection has one layer (two linear layers compose to "
            "one map); use case.kind nonlinear for a two-layer projection"
        )
    if activation not in (None, "leaky_relu") and options["negative_slope"] != DEFAULTS["negative_slope"]:
        raise RecipeError(
            f"{source}: case.negative_slope {options['negative_slope']} is LeakyReLU's slope; case.activation "
            f"{activation!r} has none"
        )
    check_label_scaling(options, source)


ANY_LABEL = (float("-inf"), float("inf"))


def label_range(options: dict[str, Any]) -> tuple[float, float]:
    """The labels' declared range, ``(case.label_low, case.label_high)``: C-STS's 1-5 by default."""
    return float(options.get("label_low", 1.0)), float(options.get("label_high", 5.0))


def check_label_scaling(options: dict[str, Any], source: str) -> None:
    """The declared label range, scaled to cosine targets by ``(label - case.label_offset) / case.label_divisor``,
    must lie within the cosine's [-1, 1]: ``--label-divisor 2`` on C-STS's 1-5 trained towards targets up to 2.5,
    which no cosine reaches, without a word. ``RecipeError`` names the keys and the flags."""
    low, high = label_range(options)
    if not high > low:
        raise RecipeError(f"{source}: case.label_low ({low:g}) must be below case.label_high ({high:g})")
    divisor, offset = float(options["label_divisor"]), float(options["label_offset"])
    first, last = sorted(((low - offset) / divisor, (high - offset) / divisor))
    if first < -1.0 - 1e-9 or last > 1.0 + 1e-9:
        raise RecipeError(
            f"{source}: labels from {low:g} to {high:g} (case.label_low, case.label_high) become cosine targets "
            f"from {first:g} to {last:g} under (label - case.label_offset {offset:g}) / case.label_divisor "
            f"{divisor:g}, outside the cosine's [-1, 1]: set case.label_divisor (--label-divisor) and "
            f"case.label_offset (--label-offset) to the labels' scale, e.g. --label-divisor "
            f"{max(abs(low), abs(high)):g}"
        )


# what a CASE run writes into its folder (CaseModel.save: config, weights, marker, card; train_model: training.json)
CASE_RUN_FILES = ("case_model.json", "projection.safetensors", "finesim_model.json", "README.md", "training.json")
# what makes a folder a model that is no recorded run's: CASE's model would be mixed with it (refused, never deleted)
MODEL_FILES = ("modules.json", "model", "checkpoints")
# options that do not change the trained projection: where the recipe and the cache are, how fast it encodes, and
# the keys of other CASE actions
NOT_COMPARED = frozenset({"recipe", "cache_dir", "batch_size", "threads", "device", "dims", "num_directions"})


# options added after runs were recorded: a record without them ran their default
ADDED_OPTIONS = ("activation", "hidden_dim", "label_low", "label_high")


def _comparable(options: dict[str, Any]) -> dict[str, Any]:
    filled = {**{key: DEFAULTS[key] for key in ADDED_OPTIONS}, **options}
    if filled.get("kind") == "nonlinear" and filled.get("activation") is None:  # the same projection either way
        filled["activation"] = DEFAULT_ACTIVATION
    return {k: v for k, v in _with_model_resolved(filled).items() if k not in NOT_COMPARED}


def _case_record(out: Path) -> dict[str, Any] | None:
    """The options of the CASE run recorded in ``out`` (``training.json``; ``{}`` when only its marker
    ``finesim_model.json`` says ``encoder: case``), or None when ``out`` holds no CASE run."""
    for name in ("training.json", "finesim_model.json"):
        try:
            doc = json.loads((out / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(doc, dict):
            continue
        if name == "training.json" and isinstance(doc.get("options"), dict) and "training" in doc:
            return doc["options"]
        if name == "finesim_model.json" and doc.get("encoder") == "case":
            return {}
    return None


def run_files(out: Path) -> dict[str, list[str]]:
    """The files in ``out`` that a recorded run owns, by kind of run: ``CASE`` (:data:`CASE_RUN_FILES`, when
    :func:`_case_record` finds a CASE run) and ``sentence-transformers`` (:data:`finesim.training.preflight.OWNED`,
    when its ``run.json`` is there). Nothing else is a run's: a user's README.md or config.json is not."""
    found: dict[str, list[str]] = {}
    if _case_record(out) is not None:
        found["CASE"] = [name for name in CASE_RUN_FILES if (out / name).exists()]
    if (out / RUN_FILE).is_file():
        found["sentence-transformers"] = [name for name in preflight.OWNED if (out / name).exists()]
    return found


def check_not_encoder_folder(out: Path, folders: dict[str, str | Path | None], source: str = "recipe") -> None:
    """:class:`RecipeError` when the output folder ``out`` is, lies inside or contains one of ``folders`` (what
    they are -> the folder: the encoder's model folder, the embedding cache): training would write into it and
    ``--no-resume`` delete from it."""
    target = out.expanduser().resolve()
    for what, folder in folders.items():
        if not folder or not Path(folder).expanduser().exists():
            continue
        other = Path(folder).expanduser().resolve()
        if target == other:
            how = "is"
        elif other in target.parents:
            how = "is inside"
        elif target in other.parents:
            how = "contains"
        else:
            continue
        raise RecipeError(
            f"{source}: the output folder {out} {how} {what} ({folder}); training would write its files there "
            "(and --no-resume, resume=False in Python, delete from it). Choose another output folder"
        )


def check_output_folder(out: Path, options: dict[str, Any], *, resume: bool = True, source: str = "recipe") -> str:
    """Whether a CASE run may write into ``out``, as one line for the user; :class:`RecipeError` if not.

    Only a recorded run's files (:func:`run_files`) are ever replaced or deleted. A folder that holds no run
    (absent, empty, or other files) is used as is when training overwrites none of its files; one whose files
    training would overwrite (a README.md of the user's, say), or that holds a model that is no recorded run's
    (:data:`MODEL_FILES`), is refused: choose another folder. A folder holding a CASE run of the same options is
    trained again from the start and replaced: CASE keeps no checkpoints to resume from. Another recorded run
    (another CASE recipe, a sentence-transformers run with its ``run.json``) is refused, naming what differs,
    unless ``resume`` is False (``--no-resume``): then that run's files are deleted first (:func:`start_over`).
    """
    runs = run_files(out)
    owned = {name for names in runs.values() for name in names}
    foreign = [name for name in (*CASE_RUN_FILES, *MODEL_FILES) if (out / name).exists() and name not in owned]
    if foreign:
        overwritten = [name for name in foreign if name in CASE_RUN_FILES]
        issue = f"training would overwrite {', '.join(overwritten)}" if overwritten else ""
        model = [name for name in foreign if name in MODEL_FILES]
        if model:
            issue += f"{'; ' if issue else ''}it holds a model ({', '.join(model)}) that CASE's would be mixed with"
        raise RecipeError(
            f"{source}: the output folder {out}: {issue}. These files are no recorded finesim run's (no CASE "
            "training.json, no run.json), so --no-resume (resume=False) does not delete them: choose another output "
            "folder"
        )
    if not runs:
        return f"output folder {out}: the CASE model and training.json"
    if not resume:
        deleted = ", ".join(name for names in runs.values() for name in names)
        return f"output folder {out}: the earlier run there ({deleted}) is deleted first (--no-resume)"
    stored = _case_record(out)
    if list(runs) == ["CASE"] and stored:
        old, new = _comparable(stored), _comparable(options)
        changes = [
            f"{'' if key == 'seed' else 'case.'}{key}: {old.get(key, '<unset>')!r} -> {new.get(key, '<unset>')!r}"
            for key in sorted({*old, *new})
            if old.get(key, "<unset>") != new.get(key, "<unset>")
        ]
        if not changes:
            return (
                f"output folder {out}: holds a CASE run of the same recipe; CASE keeps no checkpoints, so it is "
                "trained again from the start and replaced"
            )
        what = f"a CASE run of another recipe ({'; '.join(changes[:8])}{'; ...' if len(changes) > 8 else ''})"
    else:
        what = " and ".join(f"a {kind} run ({', '.join(names)})" for kind, names in runs.items())
    raise RecipeError(
        f"{source}: the output folder {out} holds {what}; training would overwrite it. Rerun with --no-resume "
        "(resume=False in Python) to start over there (that run's files are deleted first, any other file is kept), "
        "or choose another output folder"
    )


def start_over(out: Path) -> list[str]:
    """Delete the files of the runs recorded in ``out`` (:func:`run_files`), keeping any other file; returns the
    names deleted."""
    return [name for names in run_files(out).values() for name in preflight.start_over(out, names)]


def train_recipe(
    recipe: CaseRecipe,
    *,
    output_dir: str | Path | None = None,
    data: str | Path | None = None,
    resume: bool = True,
    argv: Sequence[str] | None = None,
    show_progress: bool = True,
    checked: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Train a CASE recipe (``finesim train``): :func:`check_case`, then :func:`train_model` into ``output_dir``
    (default: the recipe's); ``resume=False`` (``--no-resume``) deletes an earlier run there first. ``checked``: the
    options :func:`check_case` returned for these arguments, when the caller already ran it. Returns the payload
    written to ``training.json``."""
    options = checked or check_case(recipe, output_dir=output_dir, data=data, resume=resume)[0]
    out = preflight.output_folder(recipe, output_dir)
    if not resume:
        start_over(out)
    return train_model(options, output_dir=str(out), argv=argv, show_progress=show_progress)


def carve_splits(options: dict[str, Any]) -> Splits:
    """Read the ``train`` file, the dev file (``options["dev"]``) or a dev split carved from train by sentence pair
    (``dev_fraction``, ``seed``), and the ``eval`` files (named by their stem)."""
    train_file = options["train"]
    train, _ = read_case_data(train_file, "train", label_range(options))
    if options["dev"]:
        dev, _ = read_case_data(options["dev"], "dev", label_range(options))
        dev_source = options["dev"]
    else:
        train, dev = split_by_pair(train, float(options["dev_fraction"]), int(options["seed"]))
        dev_source = f"{train_file} (carved: {options['dev_fraction']} of sentence pairs, seed {options['seed']})"
    named: dict[str, str] = {}
    for path in options["eval"] or []:  # a file's results are named by its stem: two of one name would be one row
        stem = Path(path).stem
        if stem in ("train", "dev"):
            raise ValueError(f"eval file {path}: its name {stem!r} names the {stem} split's results; rename the file")
        earlier = named.setdefault(stem, str(path))
        if Path(earlier).resolve() != Path(path).resolve():
            raise ValueError(
                f"eval files {earlier} and {path} share the name {stem!r}, which names their results: give them "
                "different file names"
            )
    evals = {name: read_case_data(path, "eval", label_range(options))[0] for name, path in named.items()}
    from finesim.results import file_sha256

    # each file's path and SHA-256 (an eval file was recorded by its stem alone, with no hash)
    dev_sha = file_sha256(Path(options["dev"])) if options["dev"] else None  # carved: train's hash says it
    description = {
        "train": split_summary("train", train, str(train_file), sha256=file_sha256(Path(train_file))),
        "dev": split_summary("dev", dev, dev_source, sha256=dev_sha),
        "eval": {
            name: split_summary(name, ds, named[name], sha256=file_sha256(Path(named[name])))
            for name, ds in evals.items()
        },
        "selection_split": "dev",
    }
    return Splits(train, dev, evals, description)


def embed_files(options: dict[str, Any], data_files: Sequence[str], *, show_progress: bool = True) -> dict[str, Any]:
    """Fill the embedding cache for ``data_files``; one row per file with the unsupervised Spearman.

    Returns:
        the payload of ``finesim case embed`` (its ``results`` are the rows).
    """
    options = _with_model_resolved(options)
    encoder = build_encoder(options, show_progress=show_progress)
    rows = []
    for path in data_files:
        ds, report = read_case_data(path, "embedding", label_range(options))
        start = time.perf_counter()
        before = encoder.encoded
        data = embed_pairs(encoder, ds)
        rows.append(
            {
                "file": path,
                "rows": len(ds),
                "skipped": report.skipped,
                "texts_encoded": encoder.encoded - before,
                "seconds": round(time.perf_counter() - start, 2),
                "unsupervised_spearman": evaluate_pairs(None, data),
            }
        )
    return {
        "command": "finesim case embed",
        **encoder.config(),
        "options": options,
        "results": rows,
        "environment": environment_record(),
    }


def train_model(
    options: dict[str, Any],
    *,
    output_dir: str | Path,
    argv: Sequence[str] | None = None,
    show_progress: bool = True,
) -> dict[str, Any]:
    """Train a projection on cached embeddings, save the CASE model to ``output_dir`` with ``training.json``.

    Args:
        options: resolved CASE options (``train``: the C-STS CSV to train on; dev is carved from it unless
            ``dev`` names a file).
        output_dir: folder for the model and ``training.json``.
        argv: the command line, recorded in the payload (None from Python).
        show_progress: show progress bars.

    Returns:
        the payload written to ``training.json``.
    """
    from finesim.case.model import CaseModel

    options = _with_model_resolved(options)
    encoder = build_encoder(options, show_progress=show_progress)
    splits = carve_splits(options)
    start = time.perf_counter()
    train_x, dev_x = embed_pairs(encoder, splits.train), embed_pairs(encoder, splits.dev)
    eval_x = {name: embed_pairs(encoder, ds) for name, ds in splits.evals.items()}
    embed_seconds = time.perf_counter() - start
    result = train_projection(train_x, dev_x, train_config(options), show_progress=show_progress)
    scores = {name: evaluate_pairs(result.projection, data) for name, data in eval_x.items()}
    summary = result.summary()
    metadata = {"training": summary, "data": splits.description, "eval_spearman": scores, "options": options}
    CaseModel(encoder, result.projection, metadata).save(output_dir)
    payload = {
        "command": "finesim train",
        "argv": list(argv) if argv is not None else None,
        **encoder.config(),
        "options": options,
        "data": splits.description,
        "training": summary,
        "embed_seconds": round(embed_seconds, 2),
        "texts_encoded": encoder.encoded,
        "eval_spearman": scores,
        "environment": environment_record(),
    }
    write_json_atomic(Path(output_dir) / "training.json", payload)
    return payload


def sweep_dims(options: dict[str, Any], *, show_progress: bool = True) -> dict[str, Any]:
    """Train one projection per output dimension of ``options["dims"]`` (``full`` = the encoder's width).

    Returns:
        the payload of ``finesim case sweep`` (one row per dimension in ``rows``).
    """
    parse_dims(options["dims"], width=1)  # syntax errors before any encoding
    options = _with_model_resolved(options)
    encoder = build_encoder(options, show_progress=show_progress)
    splits = carve_splits(options)
    train_x, dev_x = embed_pairs(encoder, splits.train), embed_pairs(encoder, splits.dev)
    dims = parse_dims(options["dims"], width=train_x.dim)
    eval_x = {name: embed_pairs(encoder, ds) for name, ds in splits.evals.items()}
    rows = sweep_dimensions(train_x, dev_x, dims, train_config(options), report=eval_x)
    return {
        "command": "finesim case sweep",
        **encoder.config(),
        "options": options,
        "data": splits.description,
        "rows": rows,
        "environment": environment_record(),
    }


def measure_isotropy(
    options: dict[str, Any], data_files: Sequence[str], output_dir: str | Path, *, show_progress: bool = True
) -> dict[str, Any]:
    """I_iso and embedding-to-mean cosines of both sentences of every row, with and without "− c".

    Writes ``isotropy.json`` (the returned payload) and the histogram ``cosine_to_mean.png`` to ``output_dir``.
    """
    import numpy as np

    from finesim.case.isotropy import cosine_to_mean, isotropy_summary, save_histograms

    options = _with_model_resolved(options)
    encoder = build_encoder(options, show_progress=show_progress)
    sentences, conditions = [], []
    for path in data_files:
        ds, _ = read_case_data(path, "isotropy", label_range(options))
        sentences += list(ds["sentence1"]) + list(ds["sentence2"])
        conditions += list(ds["condition"]) * 2
    conditional, unconditional = encoder.embed_parts(sentences, conditions)
    variants = {
        options["formulation"]: conditional,
        f"{options['formulation']} - c": conditional - unconditional,
    }
    out = Path(output_dir)
    summary = {
        name: isotropy_summary(x, num_directions=int(options["num_directions"]), seed=int(options["seed"]))
        for name, x in variants.items()
    }
    png = save_histograms(
        {name: cosine_to_mean(x) for name, x in variants.items()},
        out / "cosine_to_mean.png",
        title=f"{options['model']}: embedding-to-mean cosine",
    )
    payload = {
        "command": "finesim case isotropy",
        **encoder.config(),
        "seed": int(options["seed"]),  # draws the random directions of I_iso (its value moves with it)
        "num_directions": int(options["num_directions"]),
        "files": list(data_files),
        "files_sha256": {str(path): file_sha256(path) for path in data_files},
        "results": summary,
        "histogram": str(png),
        "mean_norm": float(np.linalg.norm(conditional, axis=1).mean()),
        "environment": environment_record(),
    }
    write_json_atomic(out / "isotropy.json", payload)
    return payload


def score_files(
    model_dir: str | Path,
    data_files: Sequence[str],
    *,
    cache_dir: str | Path | None = None,
    threads: int | None = None,
    device: str | None = None,
) -> dict[str, Any]:
    """Spearman and Pearson of a saved CASE model on each of ``data_files``.

    Args:
        model_dir: folder written by :func:`train_model` (``finesim train`` of a CASE recipe).
        data_files: C-STS CSV files.
        cache_dir: embedding cache (default :func:`~finesim.case.options.default_cache_dir`).
        threads: torch threads (default ``DEFAULTS["threads"]``).
        device: torch device of the encoder.

    Returns:
        the payload of ``finesim case score`` (one row per file in ``results``).
    """
    import torch

    from finesim.case.model import CaseModel
    from finesim.evaluation.metrics import pearson, spearman

    torch.set_num_threads(int(threads or DEFAULTS["threads"]))
    model = CaseModel.load(model_dir, cache_dir=cache_dir or str(default_cache_dir()), device=device)
    rows = []
    for path in data_files:
        # Spearman and Pearson are blind to the labels' scale: a file on any scale is scored (-1 still unlabelled)
        ds, _ = read_case_data(path, "scoring", ANY_LABEL)
        pred = model.score(ds["sentence1"], ds["sentence2"], ds["condition"])
        rows.append(
            {
                "file": path,
                "rows": len(ds),
                "spearman": spearman(pred, ds["label"]),
                "pearson": pearson(pred, ds["label"]),
                "texts_encoded": model.last_encoded,
            }
        )
    return {
        "command": "finesim case score",
        "model_dir": model_dir,
        "results": rows,
        "environment": environment_record(),
    }
