"""Prompt texts and prompt assembly for the C-STS / STS-B prompting baselines.

A prompt has up to three parts, joined by newlines: the instruction (none, short or long), ``k`` in-context
examples with their gold score, and the query with no score. The instruction texts are data
(``instructions.json``), verbatim from the C-STS paper (Fig. 5-6) and its reference code for the STS-B
variants.

Example layout (``ExampleFormat``):

* ``"plain"`` (default): ``Input: Sentence 1: s1 Sentence 2: s2 Condition: c Output:`` with single spaces, and
  a demonstration's score after one space (``Output: 4.0``), as printed in the paper's figures.
* ``"t5"``: the reference code's T5 layout, the same keys but the score glued to the key (``Output:4.0``).
* ``"gpt"``: the reference code's GPT layout, each key followed by a space and then joined with spaces, which
  gives double spaces (``Input:  Sentence 1:  s1 ...``) and a trailing space after the final ``Output:``.

STS-B examples have no ``Condition`` field.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any, Literal

ExampleFormat = Literal["plain", "t5", "gpt"]

TASKS: tuple[str, ...] = ("csts", "stsb")
INSTRUCTION_NAMES: tuple[str, ...] = ("none", "short", "long")
EXAMPLE_FORMATS: tuple[str, ...] = ("plain", "t5", "gpt")
# prompting task -> split -> evaluation task of finesim/evaluation/tasks.yaml (its file, score range and
# demonstrations file are read from there)
REGISTRY_TASKS: dict[str, dict[str, str]] = {
    "csts": {"validation": "CSTS-validation"},
    "stsb": {"validation": "STSBenchmark-dev", "test": "STSBenchmark"},
}


def registry_task(task: str, split: str = "validation") -> Any:
    """The evaluation task (:class:`finesim.evaluation.tasks.Task`) behind a prompting task and split."""
    from finesim.evaluation.tasks import default_registry

    if task not in REGISTRY_TASKS:
        raise ValueError(f"unknown task {task!r}; choose from {sorted(REGISTRY_TASKS)}")
    if split not in REGISTRY_TASKS[task]:
        raise ValueError(
            f"no {split} split for task {task!r} (labels not public); choose from {sorted(REGISTRY_TASKS[task])}"
        )
    return default_registry().tasks[REGISTRY_TASKS[task][split]]


def label_range(task: str) -> tuple[float, float]:
    """The score range of a prompting task's labels (the ``score_range`` of its evaluation task)."""
    return registry_task(task).score_range


@lru_cache(maxsize=1)
def _instruction_table() -> dict[str, dict[str, str | None]]:
    text = resources.files("finesim.prompting").joinpath("instructions.json").read_text(encoding="utf-8")
    table = json.loads(text)
    table.pop("_about", None)
    return table


def instruction_text(task: str, name: str) -> str | None:
    """The instruction line for ``task`` ("csts" or "stsb") and ``name`` ("none", "short", "long").

    Returns ``None`` for ``"none"``. Surrounding spaces and colons are stripped, as the reference code does.
    """
    table = _instruction_table()
    if task not in table:
        raise ValueError(f"unknown task {task!r}; choose from {sorted(table)}")
    if name not in table[task]:
        raise ValueError(f"unknown instructions {name!r}; choose from {sorted(table[task])}")
    text = table[task][name]
    return None if text is None else text.strip(" :")


@dataclass(frozen=True)
class Example:
    """One sentence pair to show or to ask about; ``condition`` is None for STS-B, ``label`` None for a
    query."""

    sentence1: str
    sentence2: str
    condition: str | None = None
    label: float | None = None


def format_label(label: float) -> str:
    """Write a gold score the way demonstrations show it: ``4.0``; non-integers rounded to 2 decimals
    (``3.33``).

    The reference code prints ``float(label)``; the re-annotated C-STS release has fractional labels such as
    3.3333333, which are rounded here so a demonstration does not teach the model to print long decimals.
    """
    return repr(round(float(label), 2))


def format_example(example: Example, style: ExampleFormat = "plain") -> str:
    """Render one example; its score follows ``Output:`` when it has a label."""
    if style not in EXAMPLE_FORMATS:
        raise ValueError(f"unknown example format {style!r}; choose from {list(EXAMPLE_FORMATS)}")
    fields = [("Sentence 1", example.sentence1.strip()), ("Sentence 2", example.sentence2.strip())]
    if example.condition is not None:
        fields.append(("Condition", example.condition))
    if style == "gpt":
        parts = ["Input: ", *(f"{key}:  {value}" for key, value in fields), "Output: "]
    else:
        parts = ["Input:", *(f"{key}: {value}" for key, value in fields), "Output:"]
    text = " ".join(parts)
    if example.label is None:
        return text
    sep = " " if style == "plain" else ""
    return f"{text}{sep}{format_label(example.label)}"


def build_prompt(
    query: Example,
    demonstrations: Sequence[Example] = (),
    *,
    instruction: str | None = None,
    style: ExampleFormat = "plain",
) -> str:
    """Join instruction, labelled demonstrations and the unlabelled query with newlines."""
    parts: list[str] = [] if instruction is None else [instruction]
    for demo in demonstrations:
        if demo.label is None:
            raise ValueError("a demonstration needs a label")
        parts.append(format_example(demo, style))
    parts.append(format_example(Example(query.sentence1, query.sentence2, query.condition), style))
    return "\n".join(parts)
