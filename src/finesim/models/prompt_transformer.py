"""The prompt template of a decoder-LM sentence encoder, inside the model (Pcc-tuning, following PromptEOL).

Each sentence is wrapped in a manual template, encoded by the language model, and the hidden state of the
**last token of the last layer** is the embedding. Padding is on the **left**, so the last position is always a
real token; a BOS token is added and no EOS (as in the reference code).

:class:`PromptTransformer` is sentence-transformers' ``Transformer`` module with a ``preprocess`` that templates raw
sentences before tokenising them, so a model built from it (``PromptTransformer`` + ``Pooling("lasttoken")``, see
:func:`finesim.models.builders.build_prompt_lm`) takes plain sentences everywhere. The template, BOS flag and
sentence limit are saved in the module's ``sentence_bert_config.json``. Templates are data (:data:`TEMPLATES`); any
string with one ``{sentence}`` field works.

**Truncation cuts the sentence, never the template.** A templated prompt longer than the token limit would lose its
end under ordinary right truncation, so the last token (the one pooled) would be a template token in the middle of
the prompt and different sentences could give identical inputs. :func:`fit_prompts` shortens the *sentence* (token by
token, decoded back to text as the reference does) until the whole prompt fits the limit; ``sentence_max_tokens``
additionally caps the sentence (the reference uses 32 tokens in stage 1 and 64 in stage 2, before templating).

Evaluation-only option: the reference evaluation normalises punctuation (:func:`eval_normalize`: append ``.`` when a
sentence does not end in ``.?"\'``, replace ``"`` with ``\'``, turn a final ``?`` into ``.``) and training does not.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from sentence_transformers.base.modules.transformer import Transformer

TEMPLATES: dict[str, str] = {
    "eol": 'This sentence : "{sentence}" means in one word:"',
    "sth": 'This sentence : "{sentence}" means something',
    "sum": 'This sentence : "{sentence}" can be summarized as',
}
# no automatic special tokens: the BOS token is prefixed as text and no EOS is added (reference code)
_NO_SPECIAL_TOKENS = {"text": {"add_special_tokens": False}}


def resolve_template(template: str) -> str:
    """A template name (``eol``, ``sth``, ``sum``) or a custom string with exactly one ``{sentence}``
    field."""
    text = TEMPLATES.get(template, template)
    if text.count("{sentence}") != 1:
        raise ValueError(
            f"template {template!r} is neither one of {sorted(TEMPLATES)} nor a string with exactly one "
            "'{sentence}' field"
        )
    return text


def eval_normalize(sentence: str) -> str:
    """The reference evaluation's punctuation normalisation (see the module docstring)."""
    s = sentence.strip().replace('"', "'")
    if s.endswith("?"):
        s = s[:-1] + "."
    if not s.endswith((".", "?", '"', "'")):
        s += "."
    return s


def fit_prompts(
    tokenizer: Any,
    sentences: Sequence[str],
    template: str,
    *,
    max_length: int | None,
    sentence_max_tokens: int | None = None,
    bos: str = "",
) -> list[str]:
    """``bos + template`` around each sentence, the sentence shortened so the prompt has at most ``max_length``
    tokens (the template is never cut; see the module docstring).

    A sentence is cut to its first ``sentence_max_tokens`` tokens, then further while the tokenised prompt is
    longer than ``max_length`` (re-tokenising the decoded text, since tokens can merge across the template's
    boundary). ``max_length=None`` leaves the length alone.

    Raises:
        ValueError: the template with an empty sentence is already longer than ``max_length``.
    """
    text = resolve_template(template)
    if sentence_max_tokens is not None and sentence_max_tokens < 0:
        raise ValueError(f"sentence_max_tokens must be >= 0, got {sentence_max_tokens}")
    ids = tokenizer(list(sentences), add_special_tokens=False, verbose=False)["input_ids"]
    limits = [len(x) if sentence_max_tokens is None else min(len(x), sentence_max_tokens) for x in ids]

    def render(i: int) -> str:
        s = sentences[i]
        if limits[i] < len(ids[i]):
            s = tokenizer.decode(ids[i][: limits[i]], skip_special_tokens=True)
        return bos + text.replace("{sentence}", s)  # not str.format: other braces in a template stay as they are

    prompts = [render(i) for i in range(len(sentences))]
    if max_length is None:
        return prompts
    todo = list(range(len(prompts)))
    while todo:
        # verbose=False: prompts longer than the limit are expected here (that is what is being measured)
        tokens = tokenizer([prompts[i] for i in todo], add_special_tokens=False, verbose=False)["input_ids"]
        over = [(i, len(ids) - max_length) for i, ids in zip(todo, tokens) if len(ids) > max_length]
        for i, excess in over:
            if limits[i] == 0:
                raise ValueError(
                    f"the template {template!r} alone takes more than max_length={max_length} tokens; raise "
                    "max_length or shorten the template"
                )
            limits[i] = max(0, limits[i] - excess)
            prompts[i] = render(i)
        todo = [i for i, _ in over]
    return prompts


class PromptTransformer(Transformer):
    """sentence-transformers' ``Transformer`` that templates raw sentences before tokenising them.

    Left padding, no automatic special tokens, the tokenizer's BOS token prefixed (``add_bos``), the sentence
    truncated so the prompt fits the token limit (:func:`fit_prompts`). Extra configuration (saved with the
    model): ``template`` (a :data:`TEMPLATES` name or a string with one ``{sentence}``), ``add_bos``,
    ``sentence_max_tokens``.
    """

    # list[str] as sentence-transformers' Module declares it (overriding it with a ClassVar does not type-check)
    config_keys: list[str] = [*Transformer.config_keys, "template", "add_bos", "sentence_max_tokens"]  # noqa: RUF012
    accepts_text_pairs: ClassVar[bool] = False  # one {sentence} slot: C-STS tasks are skipped by the harness

    def __init__(
        self,
        model_name_or_path: str,
        *,
        template: str = "sth",
        add_bos: bool = True,
        sentence_max_tokens: int | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs["processing_kwargs"] = {**_NO_SPECIAL_TOKENS, **(kwargs.get("processing_kwargs") or {})}
        super().__init__(model_name_or_path, **kwargs)
        resolve_template(template)
        self.template = template
        self.add_bos = bool(add_bos)
        self.sentence_max_tokens = sentence_max_tokens
        tokenizer = self.tokenizer
        if tokenizer is None:
            raise ValueError(f"{model_name_or_path} has no text tokenizer; a prompt-based encoder needs one")
        tokenizer.padding_side = "left"
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token if tokenizer.eos_token is not None else tokenizer.unk_token

    def prompts(self, sentences: Sequence[str], *, max_length: int | None = None) -> list[str]:
        """The model inputs for ``sentences`` (templated, BOS-prefixed, fitted to ``max_length`` or the
        module's ``max_seq_length``)."""
        bad = [i for i, s in enumerate(sentences) if not isinstance(s, str)]
        if bad:
            raise ValueError(
                f"a prompt-based encoder takes single sentences (str); input {bad[0]} is "
                f"{type(sentences[bad[0]]).__name__} (sentence pairs or conditions are not supported)"
            )
        tokenizer = self.tokenizer
        assert tokenizer is not None  # __init__ refuses a model without a text tokenizer
        bos = tokenizer.bos_token if self.add_bos and tokenizer.bos_token else ""
        return fit_prompts(
            tokenizer,
            sentences,
            self.template,
            max_length=max_length or self.max_seq_length,
            sentence_max_tokens=self.sentence_max_tokens,
            bos=bos,
        )

    def preprocess(
        self, inputs: Sequence[Any], prompt: str | None = None, processing_kwargs: Any = None, **kwargs: Any
    ) -> dict[str, Any]:
        if prompt:
            raise ValueError(
                "a prompt-based encoder applies its own template; do not pass a sentence-transformers prompt"
            )
        # the limit the tokenizer will apply: per-call processing_kwargs win over a caller's max_length (as in
        # sentence-transformers), else the module's max_seq_length
        text_kwargs = (processing_kwargs or {}).get("text") or {}
        limit = text_kwargs.get("max_length") or kwargs.get("max_length")
        texts = self.prompts(list(inputs), max_length=limit)
        return super().preprocess(texts, processing_kwargs=processing_kwargs, **kwargs)


def find_prompt_transformer(model: Any) -> PromptTransformer:
    """The model's :class:`PromptTransformer` (its first module); a clear error otherwise."""
    first = model[0] if len(model) else None
    if not isinstance(first, PromptTransformer):
        raise ValueError(f"not a prompt-based model: its first module is {type(first).__name__}, not PromptTransformer")
    return first


def has_lora(model: Any) -> bool:
    """Whether the model carries a LoRA adapter."""
    return any("lora_" in name for name, _ in model.named_parameters())
