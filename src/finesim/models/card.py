"""Model cards: the ``README.md`` of every model folder finesim writes (trained, CASE, exported).

A card says what a conditional model is and how to use it: the base model as the recipe gave it, the training data
files with their row counts, the recipe as YAML, the validation metrics, the method's citation, finesim's version
and a **conditional** usage example that runs: what to install (finesim is not on the package index; a bi-, tri- or
cross-encoder needs only sentence-transformers), plain sentence-transformers code (``(sentence, condition)`` text
pairs for a bi-encoder, with a warning against joining them into one string; the condition head's ``similarity``
for a tri-encoder, loaded with ``trust_remote_code=True`` from the head's code saved in the folder; the
``(s1, s2 [SEP] c)`` pair for a cross-encoder), then the finesim one-liner for every model type; a bi- or
cross-encoder trained without conditions (STS data) gets the plain sentence-pair example instead. The examples load
the model from ``path/to/<folder name>`` (:func:`placeholder_path`) and say to put the folder's path or the Hub id
there, not from the absolute path the folder was saved to.

For sentence-transformers models (bi-, tri- and cross-encoders) the card is sentence-transformers' own, rendered
from ``model.model_card_data`` (``SentenceTransformerModelCardData`` / ``CrossEncoderModelCardData``): finesim fills
the fields the trainer cannot know (base model, language, license, dataset names, model name, tags, citations) and
replaces its unconditional usage snippet, and adds a "finesim" section before the citations. The training details
the trainer recorded (loss, hyperparameters, logs, framework versions) stay. A CASE model, or a model whose card
sentence-transformers cannot render, gets a card written by finesim alone with the same finesim content.

What a card needs is a :class:`CardInfo`, also stored in the marker (``finesim_model.json``, key ``card``) so an
export of the model can write its card again. The papers it cites (:class:`Citation`) are declared by the objective
that trained the model (:attr:`finesim.training.objectives.Objective.citations`) or by CASE, not here. The card is
written after the model (``save_pretrained`` with ``create_model_card=False``), so nothing overwrites it.
"""

from __future__ import annotations

import json
import logging
import re
import shlex
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

logger = logging.getLogger("finesim.models")

CARD_FILE = "README.md"
CARD_KEY = "card"  # the marker's entry holding the CardInfo

# older finesim (before the marker stored a card's citations) named the papers it cited by these headings of its
# README's BibTeX blocks; a folder saved then keeps its citations only there (CardInfo.from_marker finds them again)
LEGACY_CITATION_NAMES = ("C-STS", "CCL", "CASE", "STS regression (Translated ReLU, Smooth K2)", "Pcc-tuning")
BIBTEX_BLOCK = re.compile(r"^#### ([^\n]+)\n```bibtex\n(.*?)\n```", re.M | re.S)
BIBTEX_KEY = re.compile(r"@\w+\{([^,\s]+),")
ENCODER_NAMES = {"bi": "bi-encoder", "tri": "tri-encoder", "cross": "cross-encoder", "case": "CASE model"}

# the conditional usage example: one sentence pair under two conditions
EXAMPLE_S1 = "A man is playing a guitar on a small stage."
EXAMPLE_S2 = "A woman is singing into a microphone at a concert."
EXAMPLE_CONDITIONS = ("the kind of performance", "the gender of the performer")
EXAMPLE_LINES = (
    f"sentence1 = {EXAMPLE_S1!r}",
    f"sentence2 = {EXAMPLE_S2!r}",
    f"conditions = {list(EXAMPLE_CONDITIONS)!r}",
)
# where a card's examples load the model from: path/to/<folder name>, or the Hub id your-name/<folder name>
PLACEHOLDER_PARENT = "path/to"
HUB_PLACEHOLDER = "your-name"
FINESIM_INSTALL = (
    "finesim is not on the Python package index: install it from its git repository (in a checkout, "
    "`pip install -e .`; the repository's README lists the extras)."
)
FINESIM_INSTALL_SHORT = "finesim is not on the Python package index: `pip install -e .` in a checkout of its repository"
# sentence-transformers' card template's own install line, replaced by the usage section's (a model may need more)
TEMPLATE_INSTALL = re.compile(
    r"First install the Sentence Transformers library:\n+```bash\npip install -U sentence-transformers\n```\n"
    r"(Then you can load this model and run inference\.\n)?"
)
CASE_BLOCKED = "a CASE model (a frozen encoder loaded by name plus a projection) is not a sentence-transformers model"
PAIR_WARNING = (
    "Pass each input as the tuple `(sentence, condition)`, as above: sentence-transformers tokenises it as a text "
    "pair, with the tokenizer's separator between sentence and condition (`[CLS] sentence [SEP] condition [SEP]` "
    "for BERT-style models), the input the model was trained on. The shortcut "
    '`f"{sentence} {condition}"` is one sequence without that separator: it gives other embeddings and other '
    "scores."
)


@dataclass(frozen=True)
class Citation:
    """A paper a model card cites: the name the card shows and one BibTeX entry.

    Objectives declare theirs (:attr:`finesim.training.objectives.Objective.citations`), CASE its own; the card
    cites what its :class:`CardInfo` holds.
    """

    name: str
    bibtex: str

    def __post_init__(self) -> None:
        if BIBTEX_KEY.match(self.bibtex) is None or self.bibtex.count("{") != self.bibtex.count("}"):
            raise ValueError(
                f"citation {self.name!r}: not one BibTeX entry of the form '@type{{key, ...}}' with balanced braces: "
                f"{self.bibtex[:60]!r}"
            )

    @property
    def key(self) -> str:
        """The BibTeX key (``deshpande2023csts``)."""
        match = BIBTEX_KEY.match(self.bibtex)
        assert match is not None  # checked in __post_init__
        return match.group(1)


@dataclass
class CardInfo:
    """Everything a model card says beyond the model itself (JSON-able; stored in the marker).

    Attributes:
        encoder: ``bi``, ``tri``, ``cross`` or ``case``.
        base_model: the backbone as the recipe gives it (a Hub id or a path).
        objective: the training objective's name (None: not trained by finesim).
        recipe_name: the recipe's name.
        recipe: the recipe actually used (defaults filled in), written as YAML.
        data: one entry per data file: ``split``, ``file`` (as the recipe names it), ``format``, ``rows`` (read),
            ``rows_used`` (rows in the training examples), ``skipped`` (rows the reader left out), ``sha256`` (the
            file's, when recorded).
        metrics: named metric groups, e.g. ``{"validation": {"spearman": 68.4, "pearson": 68.9}}`` (x100).
        conditional: whether the model compares sentences under a condition.
        language, license: the card's metadata (None: taken from the base model's card when it is local).
        citations: the papers the card cites, in order (:class:`Citation`; the trainer passes the objective's and
            C-STS's for conditional data, CASE its paper and C-STS's).
        details: extra facts listed in the finesim section (e.g. a CASE prompt).
        export: the ``runtime`` entry of an exported model.
    """

    encoder: str
    base_model: str | None = None
    objective: str | None = None
    recipe_name: str | None = None
    recipe: dict[str, Any] | None = None
    data: list[dict[str, Any]] = field(default_factory=list)
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)
    conditional: bool = True
    language: list[str] | None = None
    license: str | None = None
    citations: list[Citation] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    export: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form stored in the marker (the export entry lives in the marker's ``runtime``)."""
        out = asdict(self)
        out.pop("export")
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CardInfo:
        """Rebuild from :meth:`to_dict`'s output (unknown keys are ignored)."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["citations"] = [c if isinstance(c, Citation) else Citation(**c) for c in values.get("citations") or []]
        return cls(**values)

    @classmethod
    def from_marker(cls, marker: dict[str, Any] | None, *, encoder: str, folder: str | Path | None = None) -> CardInfo:
        """The card info a marker stores, or a bare one for ``encoder``.

        A marker written by an older finesim stores no citations: its card's are then read back from the BibTeX
        blocks of ``folder``'s ``README.md`` that finesim wrote (:data:`LEGACY_CITATION_NAMES`)."""
        stored = (marker or {}).get(CARD_KEY)
        if not isinstance(stored, dict):
            return cls(encoder=encoder)
        info = cls.from_dict(stored)
        info.encoder = encoder
        if "citations" not in stored and folder is not None:
            info.citations = legacy_citations(folder)
        return info


def legacy_citations(folder: str | Path) -> list[Citation]:
    """The citations an older finesim wrote into ``folder/README.md`` (its marker does not store them); a warning
    when there are none to find."""
    readme = Path(folder) / CARD_FILE
    text = readme.read_text(encoding="utf-8") if readme.is_file() else ""
    found = [Citation(name, bibtex) for name, bibtex in BIBTEX_BLOCK.findall(text) if name in LEGACY_CITATION_NAMES]
    if not found:
        logger.warning(
            "%s: saved by an older finesim whose marker does not store the card's citations, and no citation of "
            "finesim's is in %s: the new card cites none",
            folder,
            readme,
        )
    return found


# ---------------------------------------------------------------- writing


def write_card(folder: str | Path, info: CardInfo, *, model: Any = None, model_path: str | Path | None = None) -> Path:
    """Write ``folder/README.md`` for the model saved there; returns its path.

    Args:
        folder: the saved model folder.
        info: what the card says.
        model: the model object when it is a ``SentenceTransformer`` or ``CrossEncoder``: its card data renders
            the card; None writes finesim's own card.
        model_path: the path the usage examples load the model from. :func:`finesim.models.io.save_model` and
            ``finesim export`` pass :func:`placeholder_path` (``path/to/<folder name>``: a card must not name the
            machine it was saved on); the default, ``folder`` as an absolute path, is for callers that run the
            examples where the folder lies.
    """
    from finesim.results import atomic_write

    path = str(model_path) if model_path is not None else str(Path(folder).resolve())
    fill_base_metadata(info)
    plain = plain_loading(folder, info, model)
    text = None
    if model is not None and hasattr(model, "model_card_data"):
        try:
            text = sentence_transformers_card(model, info, path, plain)
        except Exception as err:  # a card must never cost the saved model: fall back to finesim's own card
            logger.warning("sentence-transformers could not render the model card (%s); writing finesim's own", err)
    if text is None:
        text = finesim_card(info, path, plain)
    return atomic_write(Path(folder) / CARD_FILE, lambda fh: fh.write(text), mode="w")


def placeholder_path(folder: str | Path) -> str:
    """The path a card's examples load the model from: ``path/to/<folder name>``, to be replaced by the folder's
    path or the model's Hub id."""
    return f"{PLACEHOLDER_PARENT}/{Path(folder).name}"


@dataclass
class PlainLoading:
    """How plain sentence-transformers (no finesim) loads a saved folder, read from its files.

    Attributes:
        blocked: why it cannot (None: it can).
        remote_code: it needs ``trust_remote_code=True`` (module code saved in the folder).
        files: the module code files in the folder.
        head_index: a tri-encoder's condition head's position in the model (None: unknown or none).
    """

    blocked: str | None = None
    remote_code: bool = False
    files: list[str] = field(default_factory=list)
    head_index: int | None = None


def plain_loading(folder: str | Path, info: CardInfo, model: Any = None) -> PlainLoading:
    """What :class:`PlainLoading` says about ``folder`` (saved with ``info``; ``model`` the saved model object)."""
    from finesim.models.portable import foreign_module_types, needs_remote_code

    if info.encoder == "case":
        return PlainLoading(blocked=CASE_BLOCKED)
    head_index = None
    if model is not None:
        try:
            head_index = next((i for i, m in enumerate(model) if type(m).__name__ == "ConditionHead"), None)
        except TypeError:
            head_index = None
    files = sorted(p.name for p in Path(folder).glob("*.py"))
    plain = PlainLoading(remote_code=needs_remote_code(folder), files=files, head_index=head_index)
    foreign = foreign_module_types(folder)
    if info.export and str(info.export.get("format")) == "onnx":
        plain.blocked = (
            "this export keeps no torch weights for its transformer (finesim's loader runs it from the ONNX file), "
            "so plain sentence-transformers cannot load it: load the model it was exported from instead"
        )
    elif foreign:
        plain.blocked = (
            f"its `modules.json` names module classes whose code is not in the folder ({', '.join(foreign)})"
        )
    return plain


def fill_base_metadata(info: CardInfo) -> None:
    """Language and license from the base model's own card when it is available locally (``en`` otherwise:
    finesim's data sets are English)."""
    if info.language is not None and info.license is not None:
        return
    meta = _base_card_metadata(info.base_model)
    if info.language is None:
        lang = meta.get("language") or ["en"]
        info.language = [lang] if isinstance(lang, str) else [str(x) for x in lang]
    if info.license is None and meta.get("license"):
        info.license = str(meta["license"])


def _base_card_metadata(base_model: str | None) -> dict[str, Any]:
    if not base_model:
        return {}
    try:
        import yaml

        from finesim.models.hub import resolve_model_path

        readme = Path(resolve_model_path(base_model)) / CARD_FILE
        text = readme.read_text(encoding="utf-8") if readme.is_file() else ""
        match = re.match(r"^---\s*\n(.*?)\n---", text, re.S)
        data = yaml.safe_load(match.group(1)) if match else None
        return data if isinstance(data, dict) else {}
    except Exception:  # an unresolvable or unreadable base model only means less metadata
        return {}


def hub_id(name: str | None) -> str | None:
    """``name`` as a Hugging Face Hub id (an alias resolved), or None for a local path or nothing."""
    if not name:
        return None
    from finesim.models.hub import ALIASES

    name = ALIASES.get(name, name)
    if Path(name).exists() or name.startswith((".", "/", "~")) or name.count("/") != 1:
        return None
    return name


# ---------------------------------------------------------------- the sentence-transformers card


def sentence_transformers_card(model: Any, info: CardInfo, path: str, plain: PlainLoading | None = None) -> str:
    """sentence-transformers' card for ``model`` with finesim's fields, usage and section (see the module
    docstring). The model's card data keeps the filled fields; the usage override is removed afterwards."""
    from sentence_transformers.base.model_card import generate_model_card

    data = model.model_card_data
    base = hub_id(info.base_model)
    if base:
        data.base_model = base
    data.local_files_only = True  # never look the base model or data sets up on the Hub while saving
    data.generate_widget_examples = False  # its examples would be encoded without conditions
    data.language = list(info.language or [])
    if info.license:
        data.license = info.license
    data.model_name = title(info)
    data.add_tags(["finesim", f"finesim-{info.encoder}"] + (["conditional-sts"] if info.conditional else []))
    # the trainer's one training set holds data.train's rows and any auxiliary pairs appended to them
    mixed_in = "".join(f" + {_dataset_name(d)}" for d in info.data if d.get("split") == "auxiliary")
    names = [_dataset_name(d) + mixed_in for d in info.data if d.get("split") == "train"]
    for entry, name in zip(data.train_datasets, names):
        entry["name"] = name
    for citation in info.citations:
        data.citations[citation.name] = citation.bibtex
    if info.conditional:
        data.task_name = (
            "conditional semantic textual similarity: how similar two sentences are with respect to a condition"
        )
    data.generate_usage_snippet = lambda: "\n" + usage_snippet(info, path, plain)
    try:
        text = generate_model_card(model)
    finally:
        del data.generate_usage_snippet
    text = TEMPLATE_INSTALL.sub("", text, count=1)  # the usage section says what to install, model by model
    section = finesim_section(info, path)
    anchor = text.find("\n## Citation")
    return text + "\n" + section if anchor < 0 else text[:anchor] + "\n" + section + text[anchor:]


# ---------------------------------------------------------------- finesim's own card


def finesim_card(info: CardInfo, path: str, plain: PlainLoading | None = None) -> str:
    """A complete card without sentence-transformers' card data (CASE models, and the fallback)."""
    import yaml

    given = {"language": info.language, "license": info.license, "base_model": hub_id(info.base_model)}
    meta: dict[str, Any] = {key: value for key, value in given.items() if value}
    meta["library_name"] = "finesim"
    meta["pipeline_tag"] = "sentence-similarity"
    meta["tags"] = ["finesim", f"finesim-{info.encoder}"] + (["conditional-sts"] if info.conditional else [])
    parts = [
        "---\n" + yaml.safe_dump(meta, sort_keys=False).strip() + "\n---",
        f"# {title(info)}",
        summary(info),
        "## Usage\n\n" + usage_snippet(info, path, plain),
        finesim_section(info, path),
        "## Citation\n\n" + "\n\n".join(f"#### {c.name}\n```bibtex\n{c.bibtex}\n```" for c in info.citations),
    ]
    return "\n\n".join(p for p in parts if p.strip()) + "\n"


def title(info: CardInfo) -> str:
    """The card's title: what the model is and what it was built from."""
    kind = ENCODER_NAMES.get(info.encoder, info.encoder)
    # "C-STS" for a model trained on C-STS (or saved without a data record); "Conditional" for one trained on
    # other conditional data, which the title called C-STS too
    trained_on = {d.get("format") for d in info.data or [] if isinstance(d, dict) and d.get("split") == "train"}
    task = "C-STS" if not trained_on or "csts" in trained_on else "Conditional"
    what = f"{task} {kind}" if info.conditional else kind[0].upper() + kind[1:]
    trained = f" ({info.objective})" if info.objective else ""
    base = f" based on {info.base_model}" if info.base_model else ""
    return f"{what}{trained}{base}"


def summary(info: CardInfo) -> str:
    """One paragraph: what the model computes."""
    if info.encoder == "case":
        return (
            "A CASE model saved by finesim: a frozen encoder embeds each sentence under its condition (the "
            "condition's own embedding subtracted when configured), a small trained projection maps the result, and "
            "the score of a sentence pair under a condition is the cosine of the two projections."
        )
    if not info.conditional and info.encoder in ("bi", "cross"):
        how = {
            "bi": "each sentence is encoded on its own and the score is the cosine of the two embeddings (trained "
            "without conditions: a plain sentence-similarity model)",
            "cross": "the pair `(sentence1, sentence2)` is read in one pass and the score is the model's regression "
            "output (trained without conditions)",
        }[info.encoder]
        return f"A {ENCODER_NAMES[info.encoder]} saved by finesim: {how}."
    how = {
        "bi": "each sentence is encoded together with the condition as a text pair `(sentence, condition)` and the "
        "score is the cosine of the two embeddings",
        "tri": "the sentences and the condition are encoded separately by one backbone and fused by a condition "
        "head; the score is the cosine of the two fused embeddings",
        "cross": "the pair is read in one pass as `(sentence1, sentence2 [SEP] condition)` and the score is the "
        "model's regression output",
    }[info.encoder]
    return f"A {ENCODER_NAMES[info.encoder]} saved by finesim: {how}."


# ---------------------------------------------------------------- usage


def usage_snippet(info: CardInfo, path: str, plain: PlainLoading | None = None) -> str:
    """The usage section: where the model is, what to install, plain sentence-transformers code for the model types
    it loads (bi-, tri- and cross-encoders), then finesim's code for every model type and the command line."""
    plain = plain or PlainLoading(blocked=CASE_BLOCKED if info.encoder == "case" else None)
    blocks = [_where(path)]
    st_code = None
    if plain.blocked is None:
        codes = {"bi": _bi_code, "tri": _tri_code, "cross": _cross_code}
        if not info.conditional:
            codes = {"bi": _bi_code_plain, "cross": _cross_code_plain}
        st_code = codes.get(info.encoder)
    if st_code is not None:
        blocks.append(_install_plain(plain))
        blocks.append(st_code(path, plain))
        if info.encoder == "bi" and info.conditional:
            blocks.append(PAIR_WARNING)
    else:
        why = f": {plain.blocked}" if plain.blocked else ""
        blocks.append(f"**Install:** this model needs finesim{why}. {FINESIM_INSTALL}")
    runtime = ""
    if info.export:
        runtime = f" The finesim loader runs this export's {_runtime_name(info.export)} runtime" + (
            "; plain sentence-transformers ignores it and runs the fp32 torch weights kept beside it."
            if st_code is not None
            else "."
        )
    lead = f"With finesim, for any model type ({FINESIM_INSTALL_SHORT}):" if st_code is not None else "With finesim:"
    blocks.append(f"{lead}{runtime}\n\n" + (_finesim_code(path) if info.conditional else _finesim_code_plain(path)))
    tasks, what = ("csts", "C-STS validation Spearman") if info.conditional else ("sts", "Spearman on 7 STS tasks")
    command = f"finesim evaluate --model {shlex.quote(path)} --tasks {tasks}"
    blocks.append(f"From the command line: `{command}` ({what}).")
    return "\n\n".join(blocks)


def _where(path: str) -> str:
    name = path.rsplit("/", 1)[-1]
    if not path.startswith(PLACEHOLDER_PARENT + "/"):
        return f"The examples load the model from `{path}`."
    return (
        f"Replace `{path}` in the examples with the path of this folder, or with the model's Hub id "
        f"(`{HUB_PLACEHOLDER}/{name}`) once it is uploaded."
    )


def _install_plain(plain: PlainLoading) -> str:
    text = "**Install:** `pip install sentence-transformers` is all the next example needs"
    if plain.remote_code:
        files = ", ".join(f"`{f}`" for f in plain.files) or "module files"
        text += (
            f". The code of finesim's module{'s' if len(plain.files) > 1 else ''} in this model is saved in the "
            f"folder ({files}; it imports only torch and sentence-transformers), and `trust_remote_code=True` lets "
            "sentence-transformers import it: read it first, as for any model that ships code"
        )
    return text + "."


def _loading(cls: str, path: str, plain: PlainLoading) -> tuple[str, str, str]:
    """The lines every plain sentence-transformers example starts with: the import and the model's loading."""
    remote = ", trust_remote_code=True" if plain.remote_code else ""
    return f"from sentence_transformers import {cls}", "", f"model = {cls}({path!r}{remote})"


def _python(*lines: str) -> str:
    return "\n".join(["```python", *lines, "```"])


def _bi_code(path: str, plain: PlainLoading) -> str:
    code = _python(
        *_loading("SentenceTransformer", path, plain),
        *EXAMPLE_LINES,
        "# each input is a (sentence, condition) text pair: one input, the tokenizer's separator between the two",
        "a = model.encode([(sentence1, c) for c in conditions], normalize_embeddings=True)",
        "b = model.encode([(sentence2, c) for c in conditions], normalize_embeddings=True)",
        "scores = (a * b).sum(axis=1)  # cosine similarity under each condition",
        "for condition, score in zip(conditions, scores):",
        '    print(f"{condition}: {score:.4f}")',
    )
    return (
        "Each sentence is encoded **together with the condition**, as a text pair; the score is the cosine of the "
        "two embeddings:\n\n" + code
    )


def _bi_code_plain(path: str, plain: PlainLoading) -> str:
    code = _python(
        *_loading("SentenceTransformer", path, plain),
        *EXAMPLE_LINES[:2],
        "a, b = model.encode([sentence1, sentence2], normalize_embeddings=True)",
        'print(f"{(a * b).sum():.4f}")  # cosine similarity',
    )
    return (
        "The model was trained without conditions: each sentence is encoded on its own and the score is the cosine "
        "of the two embeddings:\n\n" + code
    )


def _tri_code(path: str, plain: PlainLoading) -> str:
    head = (
        f"model[{plain.head_index}]  # the condition head (ConditionHead)"
        if plain.head_index is not None
        else 'next(m for m in model if type(m).__name__ == "ConditionHead")'
    )
    code = _python(
        *_loading("SentenceTransformer", path, plain),
        f"head = {head}",
        *EXAMPLE_LINES,
        "# each sentence and the condition are encoded alone, then the head fuses them; the score is the cosine",
        "scores = head.similarity(model, [sentence1] * 2, [sentence2] * 2, conditions)",
        "for condition, score in zip(conditions, scores.tolist()):",
        '    print(f"{condition}: {score:.4f}")',
    )
    return (
        "The sentences and the condition are encoded separately and the condition head fuses them; "
        "`head.similarity` returns the cosine of the two fused embeddings:\n\n"
        + code
        + "\n\n`model.encode(texts)` alone is **not** a conditional embedding: no condition reaches the head there, "
        "so it passes each text's embedding through unfused. `head.embed(model, sentences, conditions)` gives the "
        "conditional embeddings (one row per sentence; `conditions` one per sentence or one string)."
    )


def _cross_code(path: str, plain: PlainLoading) -> str:
    code = _python(
        *_loading("CrossEncoder", path, plain),
        *EXAMPLE_LINES,
        "sep = model.tokenizer.sep_token",
        "# the pair (sentence1, sentence2 [SEP] condition), read in one pass; the score is the raw output",
        'scores = model.predict([(sentence1, f"{sentence2} {sep} {c}") for c in conditions])',
        "for condition, score in zip(conditions, scores):",
        '    print(f"{condition}: {score:.4f}")',
    )
    return "The cross-encoder reads the pair `(sentence1, sentence2 [SEP] condition)` in one pass:\n\n" + code


def _cross_code_plain(path: str, plain: PlainLoading) -> str:
    code = _python(
        *_loading("CrossEncoder", path, plain),
        *EXAMPLE_LINES[:2],
        'print(f"{model.predict([(sentence1, sentence2)])[0]:.4f}")  # the raw regression output',
    )
    return (
        "The model was trained without conditions: the cross-encoder reads the pair `(sentence1, sentence2)` in one "
        "pass:\n\n" + code
    )


def _finesim_code_plain(path: str) -> str:
    return _python(
        "import finesim",
        "",
        f"scorer = finesim.ConditionalScorer({path!r})",
        f"score = scorer.similarity([{EXAMPLE_S1!r}], [{EXAMPLE_S2!r}])[0]  # no condition: a plain similarity model",
        'print(f"{score:.4f}")',
    )


def _finesim_code(path: str) -> str:
    return _python(
        "import finesim",
        "",
        f"scorer = finesim.ConditionalScorer({path!r})",
        f"conditions = {list(EXAMPLE_CONDITIONS)!r}",
        f"scores = scorer.similarity([{EXAMPLE_S1!r}] * 2, [{EXAMPLE_S2!r}] * 2, conditions)",
        "for condition, score in zip(conditions, scores):",
        '    print(f"{condition}: {score:.4f}")',
    )


# ---------------------------------------------------------------- the finesim section


def finesim_section(info: CardInfo, path: str) -> str:
    """The finesim facts: model, data with row counts, metrics, export, recipe, version."""
    from finesim._version import __version__

    lines = ["## finesim", ""]
    lines.append(f"- **Model type:** {ENCODER_NAMES.get(info.encoder, info.encoder)} (`finesim_model.json`)")
    lines.append(f"- **Base model:** {_base_model_text(info.base_model)}")
    if info.objective:
        lines.append(f"- **Objective:** `{info.objective}`")
    if info.recipe_name:
        lines.append(f"- **Recipe:** `{info.recipe_name}`")
    if info.license:
        lines.append(f"- **License:** {info.license} (the base model's; the training data may carry its own terms)")
    for key, value in info.details.items():
        lines.append(f"- **{key}:** {value}")
    lines.append(f"- **finesim version:** {__version__}")
    cite = ", ".join(c.name for c in info.citations)
    if cite:
        lines.append(f"- **Method:** {cite} (BibTeX below)")
    if info.data:
        lines += ["", "### Data", "", "| split | file | format | rows read | rows used | rows skipped |"]
        lines.append("|:--|:--|:--|--:|--:|--:|")
        for d in info.data:
            lines.append(
                f"| {d.get('split', '')} | `{d.get('file', '')}` | {d.get('format') or ''} | {_count(d.get('rows'))} "
                f"| {_count(d.get('rows_used'))} | {_count(d.get('skipped'))} |"
            )
    if info.metrics:
        lines += ["", "### Metrics", "", "| split | metric | value |", "|:--|:--|--:|"]
        for split, values in info.metrics.items():
            for name, value in values.items():
                shown = f"{value:.2f}" if isinstance(value, (int, float)) else str(value)
                lines.append(f"| {split} | {name} | {shown} |")
        lines += ["", "Correlations are x100."]
    if info.export:
        lines += ["", "### Export", "", _export_text(info.export)]
    if info.recipe:
        import yaml

        plain = json.loads(json.dumps(info.recipe, default=str))  # tuples, paths: plain YAML values
        lines += ["", "### Recipe", "", "```yaml", yaml.safe_dump(plain, sort_keys=False).strip(), "```"]
    return "\n".join(lines) + "\n"


def _base_model_text(base: str | None) -> str:
    if not base:
        return "unknown"
    hub = hub_id(base)
    return f"[{hub}](https://huggingface.co/{hub})" if hub else f"`{base}` (a local model)"


def _count(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) else ("" if value is None else str(value))


def _dataset_name(d: dict[str, Any]) -> str:
    rows = f", {d['rows_used']:,} rows" if isinstance(d.get("rows_used"), int) else ""
    kind = {"csts": "C-STS", "sts": "STS"}.get(str(d.get("format")), str(d.get("format") or "data"))
    return f"{kind} {d.get('split', '')} ({d.get('file', '')}{rows})"


def _runtime_name(spec: dict[str, Any]) -> str:
    fmt = {"onnx": "ONNX Runtime", "torch": "torch"}.get(str(spec.get("format")), str(spec.get("format")))
    quant = {"none": "fp32", "int8": "int8", "bf16": "bf16"}.get(str(spec.get("quantize")), str(spec.get("quantize")))
    return f"{fmt} {quant}"


def _export_text(spec: dict[str, Any]) -> str:
    out = [f"Exported with `finesim export` for fast CPU inference: **{_runtime_name(spec)}**"]
    if spec.get("file"):
        out.append(f"(`{spec['file']}`, {spec.get('bytes', 0) / 2**20:.1f} MiB)")
    text = " ".join(out) + f", from `{spec.get('exported_from')}`."
    check = spec.get("check") or {}
    if check:
        text += (
            f" Agreement with the torch model on {check.get('inputs')} probe inputs: largest difference "
            f"{check.get('max_abs_diff', float('nan')):.2g}"
        )
        if check.get("min_cosine") is not None:
            text += f", lowest embedding cosine {check['min_cosine']:.4f}"
        text += "."
    text += (
        " Only the transformer runs in the exported runtime; pooling, normalisation and any head are the torch "
        "modules of the original (docs/fast-inference.md)."
    )
    return text
