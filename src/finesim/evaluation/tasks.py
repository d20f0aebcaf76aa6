"""The evaluation task registry, declared as data in ``tasks.yaml``."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from datasets import Dataset, concatenate_datasets

from finesim.data.csts import read_csts
from finesim.data.errors import DataFormatError, LoadReport
from finesim.data.sts import read_senteval_subset, read_sick, read_stsb
from finesim.options import did_you_mean, parse_yaml

PACKAGED = "finesim/evaluation/tasks.yaml"  # the source of the packaged registry, as its errors name it
Format = Literal["senteval", "stsb", "sick", "csts", "table"]
FORMATS = ("senteval", "stsb", "sick", "csts", "table")


@dataclass(frozen=True)
class Task:
    """One evaluation task: where its data is and how it is scored."""

    name: str
    format: Format
    path: str
    score_range: tuple[float, float]
    subsets: tuple[str, ...] = ()
    split: str = "test"
    aggregation: Literal["pooled", "mean"] = "pooled"
    condition_mode: Literal["pair", "ignore"] = "pair"
    demonstrations: str | None = None  # training file of in-context examples (prompting baseline)
    columns: tuple[tuple[str, str], ...] = ()  # format "table": finesim's column name -> the file's
    with_conditions: bool = False  # format "table": the table gives a condition per pair
    table_split: str | None = None  # format "table": the split of a DatasetDict folder (the spec's `split`, if given)

    @property
    def conditional(self) -> bool:
        return self.format == "csts" or (self.format == "table" and self.with_conditions)

    @property
    def score_group(self) -> str:
        """Tasks whose main scores may be averaged together: ``sts``, ``csts`` (condition given) or
        ``csts-unconditional`` (condition ignored, the reference point)."""
        if not self.conditional:
            return "sts"
        return "csts" if self.condition_mode == "pair" else "csts-unconditional"

    def files(self, root: Path) -> list[Path]:
        """The data files this task reads."""
        base = root / self.path
        if self.format == "senteval":
            return [base / f"STS.{kind}.{s}.txt" for s in self.subsets for kind in ("input", "gs")]
        return [base]

    def load(self, root: Path) -> tuple[Dataset, list[LoadReport]]:
        """Load the task's pairs (and conditions for C-STS) from ``root``."""
        base = root / self.path
        if self.format == "senteval":
            parts = [read_senteval_subset(base, s, label_range=self.score_range) for s in self.subsets]
            return concatenate_datasets([d for d, _ in parts]), [r for _, r in parts]
        if self.format == "table":
            from finesim.data.table import read_table

            ds, report = read_table(
                base,
                columns=dict(self.columns) or None,
                label_range=self.score_range,
                conditions="required" if self.with_conditions else "none",
                split=self.table_split,
            )
        else:
            read = {"stsb": read_stsb, "sick": read_sick, "csts": read_csts}[self.format]
            ds, report = read(base, label_range=self.score_range)
        return ds, [report]


TASK_KEYS = (
    "format",
    "path",
    "score_range",
    "subsets",
    "split",
    "aggregation",
    "condition_mode",
    "demonstrations",
    "columns",
    "conditional",
)


def _refuse_ignored_keys(
    where: str, spec: dict[str, Any], subsets: Any, columns: dict[str, str], conditional: bool
) -> None:
    """A key the task's format would not read is an error, not a setting silently dropped."""
    fmt = spec["format"]
    if (subsets or "aggregation" in spec) and fmt != "senteval":
        key = "subsets" if subsets else "aggregation"
        raise ValueError(f"{where}: {key} applies to multi-subset tasks (format 'senteval') only")
    if fmt == "table" and "condition" in columns and not conditional:
        raise ValueError(
            f"{where}: columns maps condition to {columns['condition']!r}, but the task is not conditional: add "
            "conditional: true to score with the conditions, or drop the mapping"
        )
    if "condition_mode" in spec and not (fmt == "csts" or (fmt == "table" and conditional)):
        raise ValueError(
            f"{where}: condition_mode applies to conditional tasks only (format 'csts', or 'table' with "
            "conditional: true)"
        )
    from finesim.data.table import EXTENSIONS

    path = str(spec["path"])
    if fmt == "table" and "split" in spec and Path(path).suffix.lower() in EXTENSIONS:
        raise ValueError(
            f"{where}: split selects a split of a folder written by save_to_disk or of a Hub dataset; "
            f"{path} is a {Path(path).suffix} file: drop split"
        )


def _parse_task(name: str, spec: Any, source: str) -> Task:
    """One task entry of a registry file, every key checked (errors name the file, the task and the key)."""
    where = f"{source}: task {name!r}"
    if not isinstance(spec, dict):
        raise DataFormatError(
            f"task {name!r} must be a mapping of keys to values, got {type(spec).__name__}", path=source
        )
    unknown = sorted(set(spec) - set(TASK_KEYS))
    if unknown:
        hint = did_you_mean(unknown[0], TASK_KEYS)
        raise ValueError(f"{where} has unknown keys {unknown}{hint}; allowed: {sorted(TASK_KEYS)}")
    for key in ("format", "path", "score_range"):
        if key not in spec:
            raise ValueError(f"{where} lacks {key!r}")
    if spec["format"] not in FORMATS:
        hint = did_you_mean(str(spec["format"]), FORMATS)
        raise ValueError(f"{where} has format {spec['format']!r}{hint}; expected one of {FORMATS}")
    score_range = spec["score_range"]
    try:
        low, high = (float(x) for x in score_range)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: score_range must be two numbers [low, high], got {score_range!r}") from None
    if not high > low:
        raise ValueError(f"{where}: score_range low ({low:g}) must be below high ({high:g})")
    choices = {"aggregation": ("pooled", "mean"), "condition_mode": ("pair", "ignore")}
    for key, allowed in choices.items():
        if key in spec and spec[key] not in allowed:
            hint = did_you_mean(str(spec[key]), allowed)
            raise ValueError(f"{where}: {key} {spec[key]!r} is not one of {list(allowed)}{hint}")
    subsets = spec.get("subsets", ())
    if not isinstance(subsets, (list, tuple)) or not all(isinstance(x, str) for x in subsets):
        raise ValueError(f"{where}: subsets must be a list of names, got {subsets!r}")
    if spec["format"] == "senteval" and not subsets:
        raise ValueError(f"{where}: a senteval task needs subsets")
    columns = spec.get("columns") or {}
    if not isinstance(columns, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in columns.items()):
        raise ValueError(f"{where}: columns must map finesim's column names to the file's, got {columns!r}")
    if (columns or "conditional" in spec) and spec["format"] != "table":
        raise ValueError(f"{where}: columns and conditional apply to format 'table' only")
    conditional = spec.get("conditional", False)
    if not isinstance(conditional, bool):
        raise ValueError(f"{where}: conditional must be true or false, got {conditional!r}")
    _refuse_ignored_keys(where, spec, subsets, columns, conditional)
    return Task(
        name=name,
        format=spec["format"],
        path=str(spec["path"]),
        score_range=(low, high),
        subsets=tuple(subsets),
        split=str(spec.get("split", "test")),
        aggregation=spec.get("aggregation", "pooled"),
        condition_mode=spec.get("condition_mode", "pair"),
        demonstrations=None if spec.get("demonstrations") is None else str(spec["demonstrations"]),
        columns=tuple(sorted(columns.items())),
        with_conditions=conditional,
        table_split=str(spec["split"]) if spec["format"] == "table" and "split" in spec else None,
    )


@dataclass(frozen=True)
class Registry:
    """All known tasks and named groups of them."""

    tasks: dict[str, Task]
    groups: dict[str, tuple[str, ...]]
    # the file it was read from (:data:`PACKAGED` for finesim's own); None: built in Python
    source: str | None = None

    def resolve(self, spec: str | list[str]) -> list[Task]:
        """Turn ``"sts"``, ``"all"``, ``"STS12,SICK-R"`` or a list of names/groups into tasks (order kept)."""
        items = spec if isinstance(spec, list) else [s.strip() for s in spec.split(",") if s.strip()]
        names: list[str] = []
        for item in items:
            if item in self.groups:
                names.extend(self.groups[item])
            elif item in self.tasks:
                names.append(item)
            else:
                raise ValueError(
                    f"unknown task or group {item!r}; groups: {sorted(self.groups)}, tasks: {sorted(self.tasks)}"
                )
        return [self.tasks[n] for n in dict.fromkeys(names)]


def load_registry(path: str | Path | None = None) -> Registry:
    """Read a task registry file (the packaged ``tasks.yaml`` by default); every error names the file."""
    if path is None:
        text = resources.files("finesim.evaluation").joinpath("tasks.yaml").read_text(encoding="utf-8")
        source = PACKAGED
    else:
        source = str(path)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as err:
            raise DataFormatError(f"cannot read task registry: {err.strerror}", path=source) from None
        except UnicodeDecodeError as err:
            raise DataFormatError(f"task registry is not UTF-8 text ({err.reason})", path=source) from None
    try:
        raw = parse_yaml(text)
    except yaml.YAMLError as err:
        raise DataFormatError(f"not valid YAML: {' '.join(str(err).split())}", path=source) from None
    if raw is None:
        raise DataFormatError("the task registry is empty (expected tasks: and groups:)", path=source)
    if not isinstance(raw, dict):
        raise DataFormatError(
            f"a task registry must be a mapping with tasks: and groups:, got {type(raw).__name__}", path=source
        )
    unknown = sorted(set(raw) - {"tasks", "groups"})
    if unknown:
        hint = did_you_mean(unknown[0], ("tasks", "groups"))
        raise DataFormatError(
            f"unknown top-level keys {unknown}{hint}; a task registry has tasks: and groups:", path=source
        )
    tasks_spec, groups_spec = raw.get("tasks") or {}, raw.get("groups") or {}
    for key, value in (("tasks", tasks_spec), ("groups", groups_spec)):
        if not isinstance(value, dict):
            raise DataFormatError(f"{key}: must be a mapping of names, got a {type(value).__name__}", path=source)
    tasks = {str(name): _parse_task(str(name), spec, source) for name, spec in tasks_spec.items()}
    groups: dict[str, tuple[str, ...]] = {}
    for group, members in groups_spec.items():
        if not isinstance(members, list):
            raise DataFormatError(f"group {group!r} must be a list of task names, got {members!r}", path=source)
        missing = [m for m in members if m not in tasks]
        if missing:
            raise ValueError(f"{source}: group {group!r} names unknown tasks {missing}")
        groups[str(group)] = tuple(members)
    # the file as an absolute path: a record written later, from another working folder, still finds it
    return Registry(tasks=tasks, groups=groups, source=PACKAGED if path is None else str(Path(path).resolve()))


@lru_cache(maxsize=1)
def default_registry() -> Registry:
    """The packaged registry (cached)."""
    return load_registry()
