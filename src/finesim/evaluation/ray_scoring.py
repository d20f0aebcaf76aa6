"""Scoring on Ray (``finesim score --ray``): the single-process ``score_file`` with its model calls spread over Ray
actors, and the Ray plumbing the index's Ray build shares (session, worker errors, threads).

The driver does everything ``finesim score`` does without Ray: it reads the input with finesim's own table reader
(every format, ``--format hf`` / ``hub`` included), checks each row, sends bad rows to the rejects file with
``--skip-bad-rows``, and writes the input's columns plus the score through the same atomic writer
(:func:`finesim.evaluation.score_file.score_file`). Only the scoring of each chunk's valid rows is distributed: the
chunk is cut into one contiguous slice per actor, each actor (one CPU; the model loaded once, as ``load_scorer``
loads it) scores its slice with ``scorer.score``, and the slices come back in order. So the rows, the rejects and
the output are those of the single-process run, and the scores equal it up to float32 rounding (texts are batched
differently).

By default every actor reports its model's weights hash when it starts
(:func:`finesim.evaluation.fingerprint.scorer_fingerprint`, or another ``fingerprint`` function), and with the
default check also its tokenizer and prompts hashes (:func:`finesim.evaluation.fingerprint.scorer_inputs_fingerprint`):
actors that loaded different files (nodes with other copies of the model) are refused before any row is scored.
``fingerprint=False`` turns the check off, and says so.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from finesim.evaluation.inputs import ScorerBase

Fingerprint = Callable[[Any], "str | None"]


def fingerprint_function(fingerprint: Fingerprint | bool) -> Fingerprint | None:
    """The weights-hash function the actors run: :func:`~finesim.evaluation.fingerprint.scorer_fingerprint` for
    ``True`` (the default), ``fingerprint`` itself when it is a function, None (no check) for ``False`` only."""
    if fingerprint is True:
        from finesim.evaluation.fingerprint import scorer_fingerprint

        return scorer_fingerprint
    if fingerprint is False:
        return None
    if not callable(fingerprint):
        raise ValueError(
            f"fingerprint must be True (check the weights hash, the default), False (no check) or a function of a "
            f"loaded scorer, got {fingerprint!r}"
        )
    return fingerprint


class WorkerError(RuntimeError):
    """A Ray worker could not load the model or process its rows; the message carries its error."""


class ModelMismatchError(ValueError):
    """A model is not the one expected: its weights hash differs (an index built with another model, or Ray
    workers that loaded other files than the driver or each other)."""


def import_ray() -> Any:
    """``ray`` with Ray Data, or an ImportError saying what to install."""
    try:
        import ray
        import ray.data
    except ImportError:
        raise ImportError("--ray needs Ray Data: pip install 'finesim[ray]' (or 'ray[data]>=2.9')") from None
    return ray


@contextlib.contextmanager
def ray_session(address: str | None = None, *, num_cpus: int | None = None) -> Iterator[Any]:
    """Use the running Ray instance, connect to ``address`` (or ``$RAY_ADDRESS``), or start a local one for the
    duration (stopped afterwards)."""
    ray = import_ray()
    if ray.is_initialized():
        yield ray
        return
    address = address or os.environ.get("RAY_ADDRESS") or None
    # Ray follows finesim's verbosity; Ray Data's per-dataset INFO lines only with -vv (DEBUG)
    level = logging.getLogger("finesim").getEffectiveLevel()
    logging.getLogger("ray.data").setLevel(level if level <= logging.DEBUG else max(level, logging.WARNING))
    if address:
        ray.init(address=address, logging_level=level)
    else:
        ray.init(num_cpus=num_cpus, include_dashboard=False, logging_level=level)
    try:
        yield ray
    finally:
        ray.shutdown()


def torch_threads() -> None:
    """One torch thread per CPU Ray gave this worker."""
    import ray
    import torch

    cpus = ray.get_runtime_context().get_assigned_resources().get("CPU", 1)
    torch.set_num_threads(max(1, int(cpus)))


def worker_plan(device: str | None, workers: int | None, resources: dict[str, Any]) -> tuple[int, int, str]:
    """How many Ray workers, the GPUs each asks for and the device its model loads on, for ``--device``.

    ``cuda`` / ``cuda:N`` gives every worker one GPU of its own (Ray shows it only that one, so it loads on ``cuda``):
    the default count is then the cluster's GPUs, and a count above them is an error. Anything else keeps the
    workers off the GPUs (``cpu`` when no device is given, so no worker lands on a GPU Ray did not reserve for it);
    the default count is then the cluster's CPUs."""
    gpu = (device or "").startswith("cuda")
    offered = int(resources.get("GPU", 0))
    if workers is None:
        workers = max(1, offered if gpu and offered else int(resources.get("CPU", 1)))
    if not gpu:
        return workers, 0, device or "cpu"
    if workers > offered:
        raise ValueError(
            f"--device {device}: each of the {workers} Ray workers takes a GPU, but the Ray cluster offers {offered}: "
            "use fewer workers (--ray-workers)"
        )
    return workers, 1, "cuda"


def describe_error(err: BaseException) -> str:
    """An exception as one line, ``Type: message``: how a worker's failure travels back to the driver as data."""
    return f"{type(err).__name__}: {' '.join(str(err).split())}"


class PairScoreActor:
    """One Ray actor: the model loaded once, scoring slices of rows. Failures come back as data (an error text),
    since Ray hands an actor's exception to the driver only as formatted text."""

    def __init__(
        self,
        model: str,
        encoder: str | None,
        batch_size: int,
        device: str | None,
        fingerprint: Fingerprint | None,
        inputs: bool = False,
    ) -> None:
        self.error = ""
        self.scorer: Any = None
        self.fingerprint = fingerprint
        self.inputs = inputs  # also report the tokenizer and prompts hashes (the default check)
        try:
            from finesim.evaluation.loading import load_scorer

            torch_threads()
            self.scorer = load_scorer(model, encoder=encoder, batch_size=batch_size, device=device)
        except Exception as err:
            self.error = describe_error(err)

    def describe(self) -> dict[str, Any]:
        """The scorer's type, whether it needs a condition, its weights hash (and tokenizer and prompts hashes); or the
        load error."""
        if self.error:
            return {"error": self.error}
        inputs = None
        if self.inputs:
            from finesim.evaluation.fingerprint import scorer_inputs_fingerprint

            inputs = scorer_inputs_fingerprint(self.scorer)
        return {
            "error": "",
            "encoder": getattr(self.scorer, "encoder", "ensemble"),
            "requires_condition": bool(getattr(self.scorer, "requires_condition", False)),
            "prediction_range": getattr(self.scorer, "prediction_range", None),
            "fingerprint": None if self.fingerprint is None else self.fingerprint(self.scorer),
            "inputs": inputs,
        }

    def score(
        self, sentences1: list[str], sentences2: list[str], conditions: list[str] | None
    ) -> tuple[np.ndarray | None, str]:
        """``(scores, "")``, or ``(None, error)``."""
        if self.error:
            return None, self.error
        try:
            return np.asarray(self.scorer.score(sentences1, sentences2, conditions)), ""
        except Exception as err:
            return None, describe_error(err)


class RayScorer(ScorerBase):
    """A pair scorer whose ``score`` runs on ``workers`` Ray actors (see the module docstring); use it inside
    :func:`ray_session` and :meth:`close` it (or use it as a context manager).

    Args:
        ray: the initialised ``ray`` module. model: a model name every node can load (folder path or Hub id).
        encoder, batch_size, device: as for :func:`finesim.evaluation.loading.load_scorer`; a ``cuda`` device
            gives each actor one GPU (and ``cuda`` inside it).
        workers: actors (default: one per CPU the cluster offers).
        fingerprint: the weights-hash check: True (default) runs
            :func:`~finesim.evaluation.fingerprint.scorer_fingerprint` and
            :func:`~finesim.evaluation.fingerprint.scorer_inputs_fingerprint` (tokenizer, prompts) on every actor, a
            function of a loaded scorer (giving a hash, or None when it cannot tell) runs that instead; actors whose
            hashes differ are refused. False: no check.

    Raises:
        ValueError: more workers than the cluster has CPUs (or GPUs, for a ``cuda`` device).
        WorkerError: an actor could not load the model. ModelMismatchError: actors loaded different weights.
    """

    def __init__(
        self,
        ray: Any,
        model: str | Path,
        *,
        encoder: str | None = None,
        workers: int | None = None,
        batch_size: int = 64,
        device: str | None = None,
        fingerprint: Fingerprint | bool = True,
    ) -> None:
        check = fingerprint_function(fingerprint)
        if not isinstance(model, (str, Path)):
            raise ValueError("Ray workers load the model by name: pass a folder or Hub id, not a model object")
        self.ray = ray
        self.model = str(model)
        resources = ray.cluster_resources()
        cpus = int(resources.get("CPU", 0))
        self.workers, num_gpus, actor_device = worker_plan(device, workers, resources)
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers}")
        if self.workers > cpus:
            raise ValueError(
                f"{self.workers} Ray workers asked for, but the Ray cluster offers {cpus} CPUs (each worker takes "
                "one): use fewer workers (--ray-workers)"
            )
        remote = ray.remote(num_cpus=1, num_gpus=num_gpus)(PairScoreActor)
        inputs = fingerprint is True  # the default check covers the tokenizer and prompts too
        self.actors = [
            remote.remote(self.model, encoder, batch_size, actor_device, check, inputs) for _ in range(self.workers)
        ]
        try:
            described = self._get([actor.describe.remote() for actor in self.actors])
            failed = [d["error"] for d in described if d["error"]]
            if failed:
                raise WorkerError(f"a Ray worker could not load the model {self.model}: {failed[0]}")
            if len({d["fingerprint"] for d in described}) > 1:
                raise ModelMismatchError(
                    f"the Ray workers loaded different weights for {self.model} (weights sha256 differ): every node "
                    "must have the same model files"
                )
            from finesim.evaluation.fingerprint import describe_inputs_differences, inputs_differences

            inputs_seen = [d.get("inputs") for d in described]
            differ = sorted({part for seen in inputs_seen for part in inputs_differences(inputs_seen[0], seen)})
            if differ:
                raise ModelMismatchError(
                    f"the Ray workers loaded {self.model} with the same weights but different "
                    f"{describe_inputs_differences(differ)} ({', '.join(differ)} sha256 differ): every node must have "
                    "the same model files"
                )
        except BaseException:
            self.close()
            raise
        first = described[0]
        self.weights_sha256: str | None = first["fingerprint"]  # None: the check was off or could not hash
        self.encoder: str = first["encoder"]
        self.requires_condition = bool(first["requires_condition"])
        self.prediction_range = first["prediction_range"]
        self.last_encoded = 0

    def _get(self, refs: Sequence[Any]) -> list[Any]:
        """``ray.get`` with a dead actor (a crash, a lost node) reported as a :class:`WorkerError`."""
        try:
            return list(self.ray.get(list(refs)))
        except self.ray.exceptions.RayError as err:
            first = (str(err).strip().splitlines() or [""])[0]
            raise WorkerError(f"a Ray worker failed: {type(err).__name__}: {first}") from None

    def _score(self, sentences1: list[str], sentences2: list[str], conditions: list[str] | None) -> np.ndarray:
        n = len(sentences1)
        size = math.ceil(n / len(self.actors))
        spans = [(start, min(start + size, n)) for start in range(0, n, size)]  # at most one per actor
        refs = [
            actor.score.remote(sentences1[a:b], sentences2[a:b], None if conditions is None else conditions[a:b])
            for actor, (a, b) in zip(self.actors, spans)
        ]
        out = []
        for (a, b), (scores, error) in zip(spans, self._get(refs)):
            if error:
                raise WorkerError(f"a Ray worker failed on rows {a + 1}-{b} of a chunk of {n}: {error}")
            out.append(scores)
        return np.concatenate(out) if out else np.zeros(0, dtype=np.float32)

    def close(self) -> None:
        """End the actors (a local Ray instance ends them anyway when it stops)."""
        for actor in getattr(self, "actors", []):
            with contextlib.suppress(Exception):  # already gone
                self.ray.kill(actor)
        self.actors = []

    def __enter__(self) -> RayScorer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def score_file_ray(
    model: str | Path,
    input_path: str | Path,
    output_path: str | Path,
    *,
    encoder: str | None = None,
    address: str | None = None,
    workers: int | None = None,
    num_cpus: int | None = None,
    batch_size: int = 64,
    device: str | None = None,
    fingerprint: Fingerprint | bool = True,
    on_ready: Callable[[RayScorer], None] | None = None,
    **options: Any,
) -> dict[str, Any]:
    """:func:`~finesim.evaluation.score_file.score_file` with the scoring on Ray actors; returns its report plus
    ``ray_workers``.

    Args:
        model: a model name every Ray node can load. address: a Ray cluster (default ``$RAY_ADDRESS``; none: a local
            instance for this call, with ``num_cpus`` CPUs). workers: scoring actors (default: one per CPU).
        fingerprint: the weights-hash check of the actors (:class:`RayScorer`): on by default, False turns it off.
        on_ready: called with the :class:`RayScorer` once every actor has loaded the model.
        options: the other arguments of ``score_file`` (columns, condition, formats, split, chunk_rows,
            skip_bad_rows, show_progress).
    """
    from finesim.evaluation.score_file import score_file

    import_ray()
    with ray_session(address, num_cpus=num_cpus) as ray:
        with RayScorer(
            ray, model, encoder=encoder, workers=workers, batch_size=batch_size, device=device, fingerprint=fingerprint
        ) as scorer:
            if on_ready is not None:
                on_ready(scorer)
            report = score_file(scorer, input_path, output_path, **options)
    return {**report, "ray_workers": scorer.workers}
