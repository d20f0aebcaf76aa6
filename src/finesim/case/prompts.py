"""Prompt formats for condition-aware encoding, loaded from ``prompts.yaml`` (data, not code branches).

Formulations (the paper's names in brackets):

* ``cond`` [f(c; I(s))]: the condition is embedded, the sentence is the instruction's context (the paper's
best).
* ``sent`` [f(s; I(c))]: the sentence is embedded, the condition is the context.
* ``conc_sc`` [CONC(s + c)] and ``conc_cs`` [CONC(c + s)]: plain concatenation for non-instruction (MLM)
encoders.

Every formulation also defines the unconditional text of the condition, f(c; I(∅)), used by "minus condition".

A :class:`PromptFormat` resolves its two template strings once, when it is made; :meth:`PromptFormat.as_dict`
records them, so a saved CASE model carries its exact prompts and editing the YAML file later cannot change it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path

import yaml

FORMULATIONS: tuple[str, ...] = ("cond", "sent", "conc_sc", "conc_cs")


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
        templates: the template strings themselves (keys as in the YAML: ``pair`` or ``conc_sc``/``conc_cs``,
            and ``single``). When given, no file is read; this is how a saved model restores its prompts.
            When None they are read from the file now, and kept.
    """

    family: str
    formulation: str
    prompts_file: str | None = None
    templates: dict[str, str] | None = field(default=None, hash=False)

    def __post_init__(self) -> None:
        if self.formulation not in FORMULATIONS:
            raise ValueError(f"unknown formulation {self.formulation!r}; choose from {list(FORMULATIONS)}")
        # the keys it needs: its conditional template (``pair`` for cond and sent), then ``single`` (f(c; I(∅)))
        needed = ("pair" if self.formulation in ("cond", "sent") else self.formulation, "single")
        if self.templates is not None:
            missing = [k for k in needed if not isinstance(self.templates.get(k), str)]
            if missing:
                raise ValueError(f"prompt templates for formulation {self.formulation!r} lack {missing}")
            object.__setattr__(self, "templates", {k: self.templates[k] for k in needed})
            return
        families = load_prompt_families(self.prompts_file)
        if self.family not in families:
            raise ValueError(f"unknown prompt family {self.family!r}; known: {sorted(families)}")
        spec = families[self.family]
        if needed[0] not in spec:
            have = [k for k in ("pair", "conc_sc", "conc_cs") if k in spec]
            raise ValueError(
                f"prompt family {self.family!r} has no {needed[0]!r} template, so it cannot run formulation "
                f"{self.formulation!r} (it has {have})"
            )
        object.__setattr__(self, "templates", {k: spec[k] for k in needed})

    @property
    def spec(self) -> dict[str, str]:
        """The resolved template strings of this format."""
        assert self.templates is not None  # set in __post_init__
        return self.templates

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

    def as_dict(self) -> dict[str, object]:
        """Family, formulation, the file they came from and the resolved template strings (JSON-able)."""
        return {
            "family": self.family,
            "formulation": self.formulation,
            "prompts_file": self.prompts_file,
            "templates": dict(self.spec),
        }
