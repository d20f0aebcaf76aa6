"""Prompt formats for condition-aware encoding, loaded from ``prompts.yaml`` (data, not code branches).

Formulations (the paper's names in brackets):

* ``cond`` [f(c; I(s))]: the condition is embedded, the sentence is the instruction's context (the paper's
best).
* ``sent`` [f(s; I(c))]: the sentence is embedded, the condition is the context.
* ``conc_sc`` [CONC(s + c)] and ``conc_cs`` [CONC(c + s)]: plain concatenation for non-instruction (MLM)
encoders.

Every formulation also defines the unconditional text of the condition, f(c; I(∅)), used by "minus condition".
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Literal

import yaml

Formulation = Literal["cond", "sent", "conc_sc", "conc_cs"]
FORMULATIONS: tuple[str, ...] = ("cond", "sent", "conc_sc", "conc_cs")
INSTRUCTION_FORMULATIONS = ("cond", "sent")
CONCAT_FORMULATIONS = ("conc_sc", "conc_cs")


@lru_cache(maxsize=8)
def load_prompt_families(path: str | None = None) -> dict[str, dict[str, str]]:
    """Read the prompt families (the packaged ``prompts.yaml`` unless ``path`` is given)."""
    if path is None:
        text = resources.files("finesim.case").joinpath("prompts.yaml").read_text(encoding="utf-8")
        source = "finesim/case/prompts.yaml"
    else:
        text = Path(path).read_text(encoding="utf-8")
        source = path
    data = yaml.safe_load(text) or {}
    families = data.get("families")
    if not isinstance(families, dict) or not families:
        raise ValueError(f"{source}: expected a top-level 'families' mapping")
    for name, spec in families.items():
        if not isinstance(spec, dict) or "single" not in spec:
            raise ValueError(f"{source}: family {name!r} needs at least a 'single' template")
    return families


@dataclass(frozen=True)
class PromptFormat:
    """How one model family turns (sentence, condition) into encoder input strings.

    Args:
        family: a key of ``prompts.yaml`` (``case-instruct``, ``nv-embed``, ``mlm``).
        formulation: ``cond``, ``sent``, ``conc_sc`` or ``conc_cs``.
        prompts_file: an alternative YAML file with the same layout.
    """

    family: str
    formulation: str
    prompts_file: str | None = None

    def __post_init__(self) -> None:
        families = load_prompt_families(self.prompts_file)
        if self.family not in families:
            raise ValueError(f"unknown prompt family {self.family!r}; known: {sorted(families)}")
        if self.formulation not in FORMULATIONS:
            raise ValueError(f"unknown formulation {self.formulation!r}; choose from {list(FORMULATIONS)}")
        spec = families[self.family]
        needed = "pair" if self.formulation in INSTRUCTION_FORMULATIONS else self.formulation
        if needed not in spec:
            have = [k for k in ("pair", *CONCAT_FORMULATIONS) if k in spec]
            raise ValueError(
                f"prompt family {self.family!r} has no {needed!r} template, so it cannot run formulation "
                f"{self.formulation!r} (it has {have})"
            )

    @property
    def spec(self) -> dict[str, str]:
        return load_prompt_families(self.prompts_file)[self.family]

    def conditional(self, sentence: str, condition: str) -> str:
        """The encoder input for a sentence under a condition."""
        if self.formulation == "cond":
            return self.spec["pair"].format(query=condition, context=sentence)
        if self.formulation == "sent":
            return self.spec["pair"].format(query=sentence, context=condition)
        return self.spec[self.formulation].format(sentence=sentence, condition=condition)

    def unconditional(self, condition: str) -> str:
        """The encoder input for the condition alone, f(c; I(∅)) (the vector "minus condition" subtracts)."""
        return self.spec["single"].format(query=condition)

    def as_dict(self) -> dict[str, str | None]:
        return {"family": self.family, "formulation": self.formulation, "prompts_file": self.prompts_file}
