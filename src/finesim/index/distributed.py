"""Scale-out on Ray Data: build (or add to) an index with one model per worker.

Design (docs/search.md, "Ray"):

- ``ray.data`` reads the file (``read_csv`` / ``read_json`` / ``read_parquet``; the format from
  :func:`finesim.data.table.detect_format`; text columns read as strings); the read is materialised and counted
  before any model is loaded, so a missing column or an empty file fails at once.
- ``map_batches`` runs a callable class on an actor pool (``compute=ActorPoolStrategy(size=workers)``, one CPU
  each): every actor loads the model once, checks that its weights hash equals the driver's (the same model on every
  node), and embeds its batches with the same code as the single-process path
  (:class:`~finesim.index.encoders.IndexEncoder`). A row with an empty text is flagged, not raised, by the worker:
  the driver knows each row's position and names it.
- The driver streams the results in order (``preserve_order``) into the index writer: texts and vectors go to the
  same temporary part and the same manifest commit as ``ConditionalIndex.build`` / ``add``. Results equal the
  single-process ones up to float32 rounding (batches are grouped differently).

``address`` (or ``$RAY_ADDRESS``) connects to a running cluster (``ray://head:10001``, ``auto``); without one a local
Ray instance is started for the call and stopped after it. The model must be given by a name every node can load
(a path present on every node, or a Hub id in every node's cache); finesim must be installed on every node. Scoring
a table on Ray is ``finesim score --ray`` (:mod:`finesim.evaluation.ray_scoring`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from finesim.data.errors import DataFormatError, LoadReport
from finesim.data.table import detect_format
from finesim.evaluation.fingerprint import (
    describe_inputs_differences,
    inputs_differences,
    model_fingerprint,
    model_inputs_fingerprint,
)
from finesim.evaluation.ray_scoring import (
    ModelMismatchError,
    WorkerError,
    describe_error,
    ray_session,
    torch_threads,
    worker_plan,
)
from finesim.index.conditional_index import (
    Batch,
    ConditionalIndex,
    _check_text,
    _text_list,
    condition_key,
    load_index_model,
    prepare_new_folder,
)
from finesim.index.corpus import file_record, missing_column, note_blank_lines
from finesim.index.encoders import IndexEncoder
from finesim.index.store import SENTENCES
from finesim.index.two_stage import FIRST_STAGE, SELF, resolve_first_stage

BAD = "_finesim_bad"  # per mapped row: its text is empty or not a string
ERROR = "_finesim_error"  # per mapped row: the error a worker met on its batch ("" when none)
RAY_FORMATS = ("csv", "tsv", "jsonl", "parquet")  # what Ray Data's readers read
RAY_CHUNK = 1024  # rows per map_batches call


def table_format(path: str | Path, format: str | None = None) -> str:
    """``csv``, ``tsv``, ``jsonl`` or ``parquet``: :func:`finesim.data.table.detect_format` (``format`` when given,
    else by the file's extension), limited to the formats Ray Data reads."""
    name = detect_format(path, format)
    if name not in RAY_FORMATS:
        raise DataFormatError(f"--ray reads {', '.join(RAY_FORMATS)} files, not format {name!r}", path=path)
    return name


def strict_record_count(path: Path, fmt: str) -> tuple[int, int]:
    """The records of a CSV, TSV or JSONL file as finesim's own reader reads them, and its blank lines: one pass
    that raises what the local build raises. pyarrow's CSV parser, which Ray Data uses, is lenient where finesim is
    strict: it reads ``"A big" dog runs.`` as ``A big dog runs.`` (the text changed) and skips blank lines."""
    from finesim.data.table import open_table

    report = LoadReport(path=str(path))
    records = sum(1 for _ in open_table(path, format=fmt, report=report))
    return records, report.skipped.get("blank lines", 0)


def read_table(path: str | Path, columns: Sequence[str], format: str | None = None) -> tuple[Any, int, int]:
    """The ``columns`` of a table file as a materialised Ray dataset, its row count and its blank lines skipped.

    A CSV, TSV or JSONL file is read once by finesim's own strict reader first (:func:`strict_record_count`), so a
    file the local build refuses is refused here too, and Ray Data must find the same number of records.

    Raises:
        DataFormatError: the file is missing or malformed, a column is missing (the message lists those there are),
            the file has no rows, or Ray Data reads another number of rows than finesim's reader.
    """
    import pyarrow as pa
    import ray.data

    source = Path(path)
    if not source.exists():
        raise DataFormatError("file not found", path=path)
    fmt = table_format(path, format)
    records, blank = strict_record_count(source, fmt) if fmt != "parquet" else (None, 0)
    strings = {c: pa.string() for c in columns}
    if fmt in ("csv", "tsv"):
        from pyarrow import csv

        ds = ray.data.read_csv(
            str(source),
            file_extensions=None,
            parse_options=csv.ParseOptions(delimiter="\t" if fmt == "tsv" else ",", newlines_in_values=True),
            convert_options=csv.ConvertOptions(column_types=strings, strings_can_be_null=False),
        )
    elif fmt == "jsonl":
        ds = ray.data.read_json(str(source), lines=True, file_extensions=None)
    else:
        ds = ray.data.read_parquet(str(source), file_extensions=None)
    # Materialised before its columns are read: asking a lazy dataset for its schema runs the reads until the first
    # block and cancels the rest, and Ray (2.60) can abort the whole driver process when a read task finishes while
    # it is being cancelled ("Tried to complete task that was not pending", ray-project/ray#54527).
    ds = ds.materialize()
    found = list(ds.columns() or [])
    for column in columns:
        if column not in found:
            raise missing_column(path, column, found)
    ds = ds.select_columns(list(columns)).materialize()
    count = ds.count()
    if count == 0:
        raise DataFormatError("no rows: the table is empty", path=path)
    if records is not None and count != records:
        raise DataFormatError(
            f"Ray Data reads {count} rows where finesim's reader reads {records} records ({blank} blank lines "
            'skipped, among them records whose fields are all empty, such as a line holding only ""): build '
            "without --ray (the local reader), or rewrite the file as Parquet",
            path=path,
        )
    return ds, count, blank


def _corpus_record(path: str | Path, count: int, column: str, format: str | None, blank: int) -> dict[str, Any]:
    """The manifest's corpus entry, its blank lines recorded and warned of as the local build does."""
    description = file_record(path, count, column, format)
    note_blank_lines(description, blank)
    return description


def _texts(batch: dict[str, np.ndarray], column: str) -> tuple[list[str], np.ndarray]:
    """The texts of a batch (an empty or non-text value replaced by a placeholder) and a mask of those bad rows;
    the driver, which knows each row's position, reports them (see :func:`_check_rows`)."""
    texts, bad = [], np.zeros(len(batch[column]), dtype=bool)
    for i, value in enumerate(batch[column]):
        if not isinstance(value, str) or not value.strip():
            bad[i] = True
            value = "-"
        texts.append(value)
    return texts, bad


def _check_rows(batch: dict[str, np.ndarray], start: int, path: str, column: str) -> None:
    """Raise for the first failed or bad row of a mapped batch whose first row is row ``start`` (0-based)."""
    failed = [str(e) for e in batch[ERROR] if e]
    if failed:
        raise WorkerError(f"{path}, rows {start + 1}-{start + len(batch[ERROR])}: a Ray worker failed: {failed[0]}")
    if batch[BAD].any():
        i = int(np.argmax(batch[BAD]))
        raise DataFormatError("text is empty", path=path, row=start + i + 1, column=column)


class EncodeActor:
    """A Ray Data callable class that embeds corpus rows for an index (one model per actor). Its failures come back
    as data (an error column), not as exceptions: Ray Data hands the driver a worker's exception only as formatted
    text, and the driver knows which rows failed."""

    def __init__(
        self,
        model: str,
        encoder: str,
        fingerprint: str,
        dim: int,
        keys: dict[str, str],
        column: str,
        batch_size: int = 64,
        device: str | None = None,
        first_stage: bool = False,
        inputs: dict[str, str] | None = None,
    ) -> None:
        self.model, self.encoder, self.fingerprint, self.dim = model, encoder, fingerprint, dim
        self.inputs = inputs  # the driver's tokenizer and prompts hashes (model_inputs_fingerprint); None: unchecked
        self.keys, self.column, self.batch_size, self.device = keys, column, batch_size, device
        self.first_stage = first_stage  # also the bi-encoder's own first-stage vectors (two-stage search)
        self.error = ""
        try:
            torch_threads()
            self.setup()
        except Exception as err:
            self.error = describe_error(err)

    def setup(self) -> None:
        loaded = load_index_model(self.model, self.encoder, self.device)
        if model_fingerprint(loaded.model) != self.fingerprint:
            raise ModelMismatchError(
                f"the model {self.model} loaded on a Ray worker differs from the driver's (weights sha256): every "
                "node must have the same model files"
            )
        differ = inputs_differences(self.inputs, model_inputs_fingerprint(loaded.model))
        if differ:
            raise ModelMismatchError(
                f"the model {self.model} loaded on a Ray worker has the driver's weights but not the same "
                f"{describe_inputs_differences(differ)} ({', '.join(differ)} sha256 differ): every node must have "
                "the same model files"
            )
        self.embedder = IndexEncoder(loaded.model, loaded.encoder, batch_size=self.batch_size)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        n = len(next(iter(batch.values())))
        if not self.error:
            try:
                return {**self.process(batch), ERROR: np.full(n, "", dtype=object)}
            except Exception as err:
                return {**self.placeholder(n), ERROR: np.full(n, describe_error(err), dtype=object)}
        return {**self.placeholder(n), ERROR: np.full(n, self.error, dtype=object)}

    def _arrays(self) -> list[str]:
        stored = [SENTENCES] if self.encoder == "tri" else list(self.keys)
        return stored + ([FIRST_STAGE] if self.first_stage else [])

    def placeholder(self, n: int) -> dict[str, np.ndarray]:
        """Output columns of ``n`` failed rows (same names and shapes as :meth:`process` gives)."""
        out = {name: np.zeros((n, self.dim), dtype=np.float32) for name in self._arrays()}
        return {**out, "text": np.full(n, "", dtype=object), BAD: np.zeros(n, bool)}

    def process(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        texts, bad = _texts(batch, self.column)
        out: dict[str, np.ndarray] = {"text": np.asarray(texts, dtype=object), BAD: bad}
        if self.encoder == "tri":
            out[SENTENCES] = self.embedder.stage(texts)
        if self.first_stage:
            out[FIRST_STAGE] = self.embedder.plain(texts)
        for key, condition in self.keys.items():
            out[key] = self.embedder.conditioned(texts, condition)
        return out


@contextlib.contextmanager
def _ordered(show_progress: bool) -> Iterator[None]:
    """Ray Data keeps rows in order (and shows progress bars only if asked) for the duration."""
    from ray.data import DataContext

    context = DataContext.get_current()
    saved = (context.execution_options.preserve_order, context.enable_progress_bars)
    context.execution_options.preserve_order = True
    context.enable_progress_bars = show_progress
    try:
        yield
    finally:
        context.execution_options.preserve_order, context.enable_progress_bars = saved


def _index_batches(mapped: Any, keys: dict[str, str], path: str, column: str) -> Iterator[Batch]:
    """The mapped batches in file order (``preserve_order``), each checked for failed or bad rows, as index
    batches."""
    start = 0
    for batch in mapped.iter_batches(batch_size=None, batch_format="numpy"):
        _check_rows(batch, start, path, column)
        start += len(batch[ERROR])
        names = (SENTENCES, FIRST_STAGE, *keys)
        arrays = {name: np.asarray(batch[name], dtype=np.float32) for name in names if name in batch}
        yield Batch([str(t) for t in batch["text"]], arrays)


def _map_encoder(ds: Any, ray: Any, workers: int | None, **actor: Any) -> Any:
    """``ds`` mapped by a pool of :class:`EncodeActor` (``actor``: its arguments), one per worker (default: one per
    CPU of the cluster; with a CUDA ``device`` one per GPU, each worker taking its own GPU: :func:`worker_plan`)."""
    size, num_gpus, actor["device"] = worker_plan(actor.get("device"), workers, ray.cluster_resources())
    return ds.map_batches(
        EncodeActor,
        fn_constructor_kwargs=actor,
        batch_size=RAY_CHUNK,
        batch_format="numpy",
        compute=ray.data.ActorPoolStrategy(size=size),
        num_cpus=1,
        num_gpus=num_gpus,
    )


def build_index_ray(
    model: str,
    corpus: str | Path,
    path: str | Path,
    *,
    text_column: str = "text",
    format: str | None = None,
    encoder: str | None = None,
    conditions: Sequence[str] = (),
    dtype: str = "float32",
    approximate: str | None = None,
    first_stage: str | None = "auto",
    first_stage_query: str | None = None,
    address: str | None = None,
    workers: int | None = None,
    batch_size: int = 64,
    device: str | None = None,
    show_progress: bool = False,
    num_cpus: int | None = None,
) -> ConditionalIndex:
    """``ConditionalIndex.build`` with the corpus read and embedded on Ray Data (see the module docstring).

    Args:
        model: a model name every Ray node can load. corpus: the corpus file. path: the new index folder.
        address: a Ray cluster address (default ``$RAY_ADDRESS``; none: a local instance for this call).
        workers: encoder actors (default: the cluster's CPU count). num_cpus: CPUs of a local instance.
        The other arguments are those of :meth:`ConditionalIndex.build`.
    """
    if not isinstance(model, (str, Path)):
        raise ValueError("Ray workers load the model by name: pass a folder or Hub id, not a model object")
    conditions = [_check_text(c, "condition") for c in _text_list(conditions, "conditions")]
    prepare_new_folder(Path(path), make=False)  # refuse a used folder before any work (made once the model loads)
    with ray_session(address, num_cpus=num_cpus) as ray, _ordered(show_progress):
        ds, count, blank = read_table(corpus, [text_column], format)
        loaded = load_index_model(str(model), encoder, device)
        fingerprint = model_fingerprint(loaded.model)
        keys = {condition_key(fingerprint, loaded.encoder, c): c for c in conditions} if loaded.encoder != "tri" else {}
        dim = IndexEncoder(loaded.model, loaded.encoder).dim
        stage, _ = resolve_first_stage(loaded.encoder, first_stage, first_stage_query)
        if stage not in (None, SELF):
            raise ValueError("--ray builds the bi-encoder's own first stage only: use first_stage='self' or none")
        mapped = _map_encoder(
            ds, ray, workers, model=str(model), encoder=loaded.encoder, fingerprint=fingerprint, dim=dim, keys=keys,
            column=text_column, batch_size=batch_size, device=device, first_stage=stage == SELF,
            inputs=model_inputs_fingerprint(loaded.model),
        )  # fmt: skip
        return ConditionalIndex._create(
            loaded,
            path,
            count=count,
            batches=_index_batches(mapped, keys, str(corpus), text_column),
            conditions=list(conditions),
            dtype=dtype,
            approximate=approximate,
            corpus=[_corpus_record(corpus, count, text_column, format, blank)],
            first_stage=first_stage,
            first_stage_query=first_stage_query,
            batch_size=batch_size,
            device=device,
            show_progress=show_progress,
        )


def add_index_ray(
    index: ConditionalIndex,
    corpus: str | Path,
    *,
    text_column: str = "text",
    format: str | None = None,
    address: str | None = None,
    workers: int | None = None,
    batch_size: int = 64,
    device: str | None = None,
    num_cpus: int | None = None,
    model: str | None = None,
) -> int:
    """``ConditionalIndex.add`` with the corpus read and embedded on Ray Data (stored conditions included, written
    before the manifest commit like every add; a file or rows already in the index add nothing); returns the row
    count. An index with IDs / metadata is refused (the Ray path reads the text column only). ``model``: what the
    workers load (the index was opened with it), instead of the model the index records (a folder since moved)."""
    fields = index.store.fields
    if fields["id"] or fields["metadata"]:
        raise ValueError(f"{index.store.root}: this index has IDs / metadata, which the Ray path does not read yet")
    name = model or index.store.manifest["model"].get("resolved") or index.store.manifest["model"].get("name")
    if not name:
        raise ValueError("the index records no model name, which Ray workers need to load the model")
    conditions = index.conditions
    keys = {index.key(c): c for c in conditions}
    spec = index.first_stage_spec
    if spec is not None and spec.model != SELF:
        raise ValueError(f"--ray adds to indexes whose first stage is the model itself, not {spec.model}")
    with ray_session(address, num_cpus=num_cpus) as ray, _ordered(index.show_progress):
        ds, count, blank = read_table(corpus, [text_column], format)
        mapped = _map_encoder(
            ds, ray, workers, model=str(name), encoder=index.encoder,
            fingerprint=index.store.manifest["model"]["sha256"], dim=index.store.dim, keys=keys, column=text_column,
            batch_size=batch_size, device=device, first_stage=spec is not None,
            inputs=model_inputs_fingerprint(index.model),  # the driver's, checked by open() when the index records them
        )  # fmt: skip
        return index._append(
            count,
            _index_batches(mapped, keys, str(corpus), text_column),
            corpus=[_corpus_record(corpus, count, text_column, format, blank)],
            conditions=conditions,
            update_conditions=False,
        )
