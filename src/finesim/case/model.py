"""A saved CASE model: frozen encoder + prompt + "minus condition" + trained projection, scoring like any
scorer.

Folder layout written by :meth:`CaseModel.save`:

* ``case_model.json``: format version, the encoder description (name, pooling, maximum length), the prompt
  format with its resolved template strings, ``subtract_condition``, ``normalize_before_subtract``, the
  projection config and any training summary;
* ``projection.safetensors``: the projection weights (absent for an unsupervised model);
* ``finesim_model.json``: ``{"encoder": "case", ...}``, so :func:`finesim.evaluation.loading.load_scorer` (and
  ``finesim evaluate --model DIR``) loads the folder as a :class:`CaseModel`.

The encoder weights are not copied: they are loaded again by name (or path) with
:func:`finesim.models.io.load_sentence_model`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from finesim.case.encoding import ConditionAwareEncoder
from finesim.case.projection import CaseProjection
from finesim.case.prompts import PromptFormat
from finesim.case.training import projected_cosine
from finesim.evaluation.inputs import ScorerBase
from finesim.models.card import CardInfo, Citation, placeholder_path, write_card
from finesim.models.io import write_marker
from finesim.results import write_json_atomic

logger = logging.getLogger("finesim.case")

CONFIG_NAME = "case_model.json"
ENCODER = "case"  # the encoder type the marker and the model card name
WEIGHTS_NAME = "projection.safetensors"
FORMAT_VERSION = 2  # 2: normalize_before_subtract and the resolved prompt templates are stored
# the CASE paper, which a CASE model's card cites (with C-STS's, the task and data); BibTeX fields from its title page
CITATION = Citation(
    "CASE",
    "@misc{zhang2026case,\n"
    "  title = {{CASE}: Condition-Aware Sentence Embeddings for Conditional Semantic Textual Similarity"
    " Measurement},\n"
    "  author = {Zhang, Gaifan and Zhou, Yi and Bollegala, Danushka},\n"
    "  year = {2026}\n}",
)


class CaseModel(ScorerBase):
    """CASE(s, c) = g(f(c; I(s)) - f(c; I(∅)); θ) and its cosine score; implements ``PairScorer``.

    Args:
        encoder: the condition-aware encoder (frozen model + prompt format + "minus condition").
        projection: the trained projection g; None scores the raw condition-aware embeddings (unsupervised).
        metadata: anything to store with the model (training summary, data description).
    """

    # finesim evaluate skips tasks without conditions (STS, unconditional C-STS) for such scorers
    requires_condition: bool = True
    # scores are cosines, compared with labels on [0, 1] as they are (finesim.evaluation.scoring.PairScorer)
    prediction_range: tuple[float, float] = (0.0, 1.0)

    def __init__(
        self,
        encoder: ConditionAwareEncoder,
        projection: CaseProjection | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        if projection is not None and encoder.description.get("dimension") not in (None, projection.in_dim):
            raise ValueError(
                f"projection expects {projection.in_dim}-dimensional inputs but the encoder produces "
                f"{encoder.description['dimension']}"
            )
        self.encoder = encoder
        self.projection = projection.eval() if projection is not None else None
        self.metadata = dict(metadata or {})
        self.last_encoded = 0

    def embed(self, sentences: Sequence[str], conditions: Sequence[str]) -> np.ndarray:
        """CASE embeddings (projected when a projection is present)."""
        x = self.encoder.embed(sentences, conditions)
        if self.projection is None:
            return x
        with torch.no_grad():
            return self.projection.project(torch.as_tensor(x)).numpy()

    def _score(self, sentences1: list[str], sentences2: list[str], conditions: list[str] | None) -> np.ndarray:
        """cos(CASE(s1, c), CASE(s2, c)) per pair (conditions are checked present by :class:`ScorerBase`)."""
        assert conditions is not None
        n = len(sentences1)
        before = self.encoder.encoded
        x = self.encoder.embed(list(sentences1) + list(sentences2), list(conditions) + list(conditions))
        self.last_encoded = self.encoder.encoded - before
        return projected_cosine(self.projection, x[:n], x[n:])

    def save(self, path: str | Path, *, card: CardInfo | None = None) -> Path:
        """Write the model folder (see the module docstring) and its model card (``README.md``; ``card`` adds
        facts the model does not hold, e.g. the recipe and evaluation scores)."""
        from safetensors.torch import save_file

        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        config = {
            "format": "finesim-case",
            "format_version": FORMAT_VERSION,
            **self.encoder.config(),
            "projection": self.projection.config() if self.projection is not None else None,
            "metadata": self.metadata,
        }
        weights = folder / WEIGHTS_NAME
        if self.projection is not None:
            state = {k: v.detach().contiguous() for k, v in self.projection.state_dict().items()}
            save_file(state, str(weights))
        else:
            weights.unlink(missing_ok=True)
        write_json_atomic(folder / CONFIG_NAME, config)
        info = card if card is not None else self.card_info()
        write_marker(folder, ENCODER, config=CONFIG_NAME, card=info.to_dict())
        try:
            write_card(folder, info, model_path=placeholder_path(folder))  # no machine path in the card
        except Exception as err:  # the model is saved; a card failure must not lose it
            logger.warning("could not write the model card of %s: %s", folder, err)
        return folder

    def card_info(self) -> CardInfo:
        """The model card's facts this model holds: its encoder, prompt, projection, data and training summary; the
        CASE and C-STS papers to cite."""
        from finesim.training.objectives.csts import CITATION as CSTS

        described = self.encoder.description
        config = self.encoder.config()
        prompt = config.get("prompt") or {}
        details: dict[str, Any] = {
            "Encoder": f"`{described.get('model')}` (frozen; pooling {described.get('pooling')}, "
            f"max length {described.get('max_seq_length')})",
            "Prompt": f"{prompt.get('family')} / {prompt.get('formulation')}",
            "Minus condition": str(bool(config.get("subtract_condition"))),
            "Projection": "none (unsupervised)"
            if self.projection is None
            else ", ".join(f"{k} {v}" for k, v in self.projection.config().items()),
        }
        training = self.metadata.get("training") or {}
        metrics: dict[str, dict[str, float]] = {}
        if training.get("best_dev_spearman") is not None:
            details["Training"] = f"best epoch {training.get('best_epoch')} of {len(training.get('history') or [])}"
            metrics["dev (epoch selection)"] = {"spearman": float(training["best_dev_spearman"])}
        for name, value in (self.metadata.get("eval_spearman") or {}).items():
            metrics[str(name)] = {"spearman": float(value)}
        data = [
            {"split": split, "file": d.get("source"), "format": "csts", "rows": d["rows"], "rows_used": d["rows"]}
            | ({"sha256": d["sha256"]} if d.get("sha256") else {})  # the teacher check compares the train file's
            for split, entry in (self.metadata.get("data") or {}).items()
            for d in (entry.values() if split == "eval" and isinstance(entry, dict) else [entry])
            if isinstance(d, dict) and "rows" in d
        ]
        return CardInfo(
            encoder=ENCODER,
            base_model=described.get("model"),
            objective="case",
            recipe=self.metadata.get("options"),
            data=data,
            metrics=metrics,
            citations=[CITATION, CSTS],
            details=details,
        )

    @classmethod
    def load(
        cls,
        path: str | Path,
        *,
        model: Any | None = None,
        cache_dir: str | Path | None = None,
        device: str | None = None,
        batch_size: int = 64,
    ) -> CaseModel:
        """Load a saved model; the encoder is loaded by its recorded name unless ``model`` is given."""
        from safetensors.torch import load_file

        folder = Path(path)
        config_file = folder / CONFIG_NAME
        if not config_file.is_file():
            raise FileNotFoundError(f"{folder} is not a CASE model folder (no {CONFIG_NAME})")
        config = json.loads(config_file.read_text(encoding="utf-8"))
        if config.get("format") != "finesim-case":
            raise ValueError(f"{config_file}: not a finesim CASE model (format={config.get('format')!r})")
        if config.get("format_version", 0) > FORMAT_VERSION:
            raise ValueError(f"{config_file}: format version {config['format_version']} is newer than this finesim")
        described = config["encoder"]
        if model is None:
            from finesim.models.io import load_sentence_model

            model = load_sentence_model(
                described["model"],
                device=device,
                pooling=described.get("pooling"),
                max_length=described.get("max_seq_length"),
            )
        prompt = PromptFormat(**config["prompt"])
        # Version-1 folders predate the option: they used the pipeline's output as it came, i.e. normalised
        # exactly when the encoder ends in Normalize.
        legacy_normalized = (described.get("modules") or [None])[-1] == "Normalize"
        encoder = ConditionAwareEncoder(
            model,
            prompt,
            subtract_condition=bool(config["subtract_condition"]),
            normalize_before_subtract=bool(config.get("normalize_before_subtract", legacy_normalized)),
            cache_dir=cache_dir,
            model_name=described["model"],
            batch_size=batch_size,
        )
        trained_with, now = described.get("weights_sha256"), encoder.description["weights_sha256"]
        # another model under the recorded name (or the folder's model replaced, or the same weights in another dtype
        # or saved by another library version): told, since the projection may then be misapplied
        if trained_with is not None and now is not None and trained_with != now:
            logger.warning(
                "%s: the projection was trained on the encoder %r with weights sha256 %s, but the encoder loaded%s has "
                "%s: if it is another model, its scores are wrong (load the encoder it was trained with: model=...)",
                config_file, described["model"], trained_with[:16], "" if model is None else " (given)", now[:16],
            )  # fmt: skip
        projection = None
        if config.get("projection") is not None:
            projection = CaseProjection.from_config(config["projection"])
            weights = folder / WEIGHTS_NAME
            if not weights.is_file():
                raise FileNotFoundError(f"{weights} is missing (the config names a projection)")
            projection.load_state_dict(load_file(str(weights)))
        return cls(encoder, projection, config.get("metadata"))
