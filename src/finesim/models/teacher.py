"""What a distillation teacher recorded about the dev split its training held out, and the check that it never saw
the dev rows a student is selected on (``finesim distill-data --teacher``, benchmarks/distill/run.py).

A teacher trained on all of C-STS train has seen the dev rows: its dev score is inflated and the rows leak into the
student's checkpoint selection. finesim records the recipe a model was trained with in two places, read in this
order: the card of the folder's marker (``finesim_model.json``, its ``card.recipe``), and the ``config.json`` that
``finesim train`` writes beside the ``model/`` folder (the resolved recipe). Their ``data.dev_fraction`` and
``data.dev_seed`` must equal the split the triples are built with (a CASE model's card keeps its flat training
options instead: ``dev_fraction`` and the run's ``seed``, carved by the same function). A model without either
record (a Hub model, a folder saved by hand) cannot be checked: it is refused unless the caller says it knows
(``allow_unchecked``).

The same fraction and seed carve other rows from another file: given the triples' training file (``train``), its
SHA-256 must equal the one the teacher's run recorded for its ``data.train`` (the card's data entry, or the run's
``run.json`` beside ``model/``). A teacher that records no hash (trained before finesim recorded it) is warned of.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from finesim.models.card import CARD_KEY
from finesim.models.hub import MARKER_FILE, resolve_model_path
from finesim.paths import RUN_CONFIG_FILE, RUN_FILE

logger = logging.getLogger(__name__)


class TeacherCheckError(ValueError):
    """The teacher's recorded dev split is missing or differs from the one the triples are built with."""


@dataclass(frozen=True)
class RecordedDevSplit:
    """The dev split a model's training recipe held out: ``fraction`` None means it trained on all of train."""

    fraction: float | None
    seed: int | None
    source: str  # the file it was read from
    keys: tuple[str, str] = ("data.dev_fraction", "data.dev_seed")  # the recipe keys that set them
    train_sha256: str | None = None  # the SHA-256 of the file the split was carved from, when recorded


def recorded_dev_split(model: str | Path) -> RecordedDevSplit | None:
    """The dev split recorded for ``model`` (a folder, or a name finesim resolves), None when nothing records it.

    Raises:
        TeacherCheckError: a record that is not valid JSON.
    """
    folder = Path(resolve_model_path(str(model)))
    candidates = [(folder / MARKER_FILE, lambda doc: (doc.get(CARD_KEY) or {}).get("recipe"))]
    candidates.append((folder.parent / RUN_CONFIG_FILE, lambda doc: doc))
    for path, recipe_of in candidates:
        if not path.is_file():
            continue
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise TeacherCheckError(f"{path}: cannot read the teacher's recorded recipe: {err}") from None
        recipe = recipe_of(doc) if isinstance(doc, dict) else None
        data = recipe.get("data") if isinstance(recipe, dict) else None
        if isinstance(doc, dict) and doc.get("encoder") == "case" and isinstance(recipe, dict):
            case = _case_dev_split(recipe, str(path))
            if case is not None:
                return RecordedDevSplit(
                    case.fraction, case.seed, case.source, case.keys, train_sha256=_recorded_train_sha256(folder, doc)
                )
            continue
        if isinstance(data, dict) and "dev_fraction" in data:
            fraction, seed = data.get("dev_fraction"), data.get("dev_seed")
            return RecordedDevSplit(
                None if fraction is None else float(fraction),
                None if seed is None else int(seed),
                str(path),
                train_sha256=_recorded_train_sha256(folder, doc),
            )
    return None


def _recorded_train_sha256(folder: Path, doc: dict[str, Any]) -> str | None:
    """The teacher's training file's SHA-256: its card's ``train`` data entry, else the fingerprint of the finesim
    run beside it (``run.json``); None when neither records it."""
    card = doc.get(CARD_KEY)
    for entry in (card.get("data") if isinstance(card, dict) else None) or []:
        if isinstance(entry, dict) and entry.get("split") == "train" and isinstance(entry.get("sha256"), str):
            return str(entry["sha256"])
    run = folder.parent / RUN_FILE
    try:
        digest = json.loads(run.read_text(encoding="utf-8"))["fingerprint"]["data"]["train"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return digest if isinstance(digest, str) else None


def _case_dev_split(options: dict, source: str) -> RecordedDevSplit | None:
    """A CASE model's record: its card keeps the flat training options, whose dev split is carved from train by the
    same :func:`~finesim.data.splits.split_by_pair` (``dev_fraction``, the run's ``seed``) unless a separate ``dev``
    file was given (then it trained on all of train)."""
    if "dev_fraction" not in options or "dev" not in options:  # not a record of where its dev rows came from
        return None
    if options["dev"]:
        return RecordedDevSplit(None, None, source, ("case.dev_fraction", "seed"))
    fraction, seed = options.get("dev_fraction"), options.get("seed")
    fraction = None if fraction is None else float(fraction)
    return RecordedDevSplit(fraction, None if seed is None else int(seed), source, ("case.dev_fraction", "seed"))


def check_teacher_dev_split(
    teacher: str | Path,
    *,
    dev_fraction: float,
    dev_seed: int,
    allow_unchecked: bool = False,
    train: str | Path | None = None,
) -> RecordedDevSplit | None:
    """Refuse a teacher that may have trained on the dev split ``dev_fraction`` / ``dev_seed``: its recorded
    ``data.dev_fraction`` and ``data.dev_seed`` must equal them, and (given ``train``, the file the split is carved
    from) its recorded training file's SHA-256 must be ``train``'s. Returns the record (None when there is none and
    ``allow_unchecked`` is set).

    Raises:
        TeacherCheckError: no record (without ``allow_unchecked``), or a record of another split or another
            training file (always: a recorded mismatch is a known leak, which ``allow_unchecked`` does not excuse).
    """
    wanted = f"data.dev_fraction {dev_fraction} and data.dev_seed {dev_seed}"
    record = recorded_dev_split(teacher)
    if record is None:
        if allow_unchecked:
            return None
        raise TeacherCheckError(
            f"{teacher}: no recorded training recipe (no recipe in its {MARKER_FILE}, no {RUN_CONFIG_FILE} of a "
            f"finesim run beside it), so nothing shows that the teacher never trained on the dev split ({wanted}); "
            "train the teacher with finesim and those settings, or pass --allow-unchecked-teacher for a teacher "
            "trained elsewhere (a Hub model) that you know never saw these dev rows"
        )
    if record.fraction == dev_fraction and record.seed == dev_seed:
        if train is not None:
            _check_train_file(teacher, record, Path(train))
        return record
    fraction_key, seed_key = record.keys
    had = (
        f"on all of train ({fraction_key} null)"
        if record.fraction is None
        else f"with {fraction_key} {record.fraction} and {seed_key} {record.seed}"
    )
    raise TeacherCheckError(
        f"{teacher} was trained {had} ({record.source}), but the dev split here is {wanted}: the teacher trained on "
        "dev rows, which inflates its dev score and leaks them into the student's selection; train the teacher "
        f"with --set {fraction_key}={dev_fraction} --set {seed_key}={dev_seed}, or build the dev split with "
        "the teacher's values"
    )


def _check_train_file(teacher: str | Path, record: RecordedDevSplit, train: Path) -> None:
    from finesim.results import path_sha256

    if record.train_sha256 is None:
        logger.warning(
            "%s records no SHA-256 of its training file (trained by an older finesim): the dev split was checked by "
            "its fraction and seed only; from another file than %s they carve other rows",
            teacher,
            train,
        )
        return
    digest = path_sha256(train)
    if digest != record.train_sha256:
        raise TeacherCheckError(
            f"{teacher} was trained on another file than {train} (its training file's SHA-256 "
            f"{record.train_sha256[:12]}..., {train}'s {digest[:12]}...): the same dev fraction and seed carve other "
            "rows from another file, so the teacher may have trained on these dev rows; build the triples from the "
            "teacher's training file, or train the teacher on this one"
        )
