"""Local transformers models: encoder-decoder (Flan-T5, UL2, Tk-Instruct) or decoder-only, greedy, batched.

Choices (see docs/prompting.md):

* Greedy decoding (``do_sample=False, num_beams=1``), at most ``max_new_tokens`` (20, the paper's limit).
* Decoder-only models are padded on the left (pad = eos when the tokenizer has no pad token) and the reply is
  the text after the prompt; encoder-decoder models are padded on the right and the reply is the decoder
  output.
* Special tokens: added for encoder-decoder models (T5 needs its ``</s>``), not for decoder-only ones (as the
  reference code does); override with ``add_special_tokens``. With ``chat_template=True`` the prompt is
  wrapped as one user turn by the tokenizer's chat template, which places its own special tokens.
* dtype: ``auto`` is fp32 on CPU and bf16 on a GPU that supports it (else fp32). fp16 is available but the
  C-STS authors report that it degrades Flan-T5, so it is never chosen automatically.
* Prompts are sorted by length before batching (less padding) and replies are returned in the original order.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Literal, cast

from finesim.prompting.backends.base import ReplyCallback

logger = logging.getLogger("finesim.prompting")

ModelKind = Literal["auto", "causal", "seq2seq"]
DTYPES = ("auto", "fp32", "bf16", "fp16")


def _torch_dtype(name: str, device: str) -> Any:
    import torch

    if name == "auto":
        if device.startswith("cuda") and torch.cuda.is_available() and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    table = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    if name not in table:
        raise ValueError(f"unknown dtype {name!r}; choose from {list(DTYPES)}")
    return table[name]


class HFBackend:
    """Generate replies with a local (or Hub-cached) transformers model.

    Args:
        model: a local checkpoint folder or a Hugging Face Hub id, resolved like every finesim model
            (:func:`finesim.models.hub.resolve_model_path`: the local Hugging Face cache when the Hub is unreachable;
            a missing folder or an unreachable, uncached id is a ``ModelResolutionError`` saying what to do).
        kind: ``"causal"``, ``"seq2seq"`` or ``"auto"`` (from ``config.is_encoder_decoder``).
        dtype: ``"auto"``, ``"fp32"``, ``"bf16"`` or ``"fp16"``.
        device: ``"auto"`` (cuda when available, else cpu), or a torch device string; ignored with
        ``device_map``. device_map: passed to ``from_pretrained`` (e.g. ``"auto"`` to spread a large model
        over GPUs). batch_size: prompts per ``generate`` call.
        max_new_tokens: generation limit per reply.
        add_special_tokens: None = by kind (see module docstring).
        chat_template: wrap each prompt as a user turn with the tokenizer's chat template.
        trust_remote_code: passed to ``from_pretrained``.
    """

    name = "hf"

    def __init__(
        self,
        model: str,
        *,
        kind: ModelKind = "auto",
        dtype: str = "auto",
        device: str = "auto",
        device_map: str | None = None,
        batch_size: int = 8,
        max_new_tokens: int = 20,
        add_special_tokens: bool | None = None,
        chat_template: bool = False,
        trust_remote_code: bool = False,
        show_progress: bool = True,
    ) -> None:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

        from finesim.models.hub import resolve_model_path

        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if kind not in ("auto", "causal", "seq2seq"):
            raise ValueError(f"unknown model kind {kind!r}; choose 'auto', 'causal' or 'seq2seq'")
        self.model = model  # the name given (part of the reply cache key), not where it was found
        source = resolve_model_path(model)  # a folder, an offline copy or a reachable Hub id; else a clear error
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        torch_dtype = _torch_dtype(dtype, device)
        config = AutoConfig.from_pretrained(source, trust_remote_code=trust_remote_code)
        if kind == "auto":
            kind = "seq2seq" if getattr(config, "is_encoder_decoder", False) else "causal"
        self.kind = kind
        self.batch_size = batch_size
        self.max_new_tokens = max_new_tokens
        self.add_special_tokens = (kind == "seq2seq") if add_special_tokens is None else add_special_tokens
        self.chat_template = chat_template
        self.show_progress = show_progress
        self.tokenizer = AutoTokenizer.from_pretrained(
            source, padding_side="left" if kind == "causal" else "right", trust_remote_code=trust_remote_code
        )
        if self.tokenizer.pad_token is None:
            if self.tokenizer.eos_token is None:
                raise ValueError(f"the tokenizer of {model!r} has neither a pad nor an eos token; cannot batch")
            self.tokenizer.pad_token = self.tokenizer.eos_token
        if chat_template and not getattr(self.tokenizer, "chat_template", None):
            raise ValueError(f"the tokenizer of {model!r} has no chat template; drop --chat-template")
        cls = AutoModelForSeq2SeqLM if kind == "seq2seq" else AutoModelForCausalLM
        kwargs: dict[str, Any] = {"dtype": torch_dtype, "trust_remote_code": trust_remote_code}
        if device_map is not None:
            kwargs["device_map"] = device_map
        # Any: transformers types the loaded model so that `.to(device)` (a functools.wraps-wrapped method) and
        # `.generate(...)` (GenerationMixin's self type) do not type-check, though both are the documented calls
        self.lm: Any = cast(Any, cls.from_pretrained(source, **kwargs))
        if device_map is None:
            self.lm.to(device)
        self.lm.eval()
        self.torch_dtype = str(torch_dtype).replace("torch.", "")
        limit = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
        self.max_positions: int | None = int(limit) if isinstance(limit, int) else None
        self.too_long = 0

    def settings(self) -> dict[str, Any]:
        """Options that shape the replies (part of the cache key)."""
        return {
            "kind": self.kind,
            "dtype": self.torch_dtype,
            "decoding": "greedy",
            "max_new_tokens": self.max_new_tokens,
            "add_special_tokens": self.add_special_tokens,
            "chat_template": self.chat_template,
        }

    def describe(self) -> dict[str, Any]:
        """Backend facts for a results file."""
        return {
            "backend": self.name,
            "model": self.model,
            **self.settings(),
            "device": str(self.lm.device),
            "batch_size": self.batch_size,
            "padding_side": self.tokenizer.padding_side,
            "prompts_over_max_positions": self.too_long,
        }

    def _render(self, prompt: str) -> str:
        if not self.chat_template:
            return prompt
        # with tokenize=False the template renders to one string; transformers annotates every return form at once
        rendered = self.tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
        )
        return cast(str, rendered)

    def generate(self, prompts: Sequence[str], on_reply: ReplyCallback | None = None) -> list[str | None]:
        """Greedy replies in prompt order; ``on_reply`` is called after each batch for its prompts."""
        import torch
        from tqdm.auto import tqdm

        texts = [self._render(p) for p in prompts]
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]), reverse=True)
        replies: list[str | None] = [None] * len(texts)
        batches = [order[i : i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        special = self.add_special_tokens and not self.chat_template
        for batch in tqdm(batches, desc="generate", unit="batch", disable=not self.show_progress or not batches):
            enc = self.tokenizer(
                [texts[i] for i in batch],
                return_tensors="pt",
                padding=True,
                add_special_tokens=special,
                return_token_type_ids=False,
            ).to(self.lm.device)
            if self.kind == "causal" and self.max_positions is not None:
                lengths = enc["attention_mask"].sum(dim=1) + self.max_new_tokens
                over = int((lengths > self.max_positions).sum())
                if over:
                    self.too_long += over
                    logger.warning(
                        "%d prompts + %d new tokens exceed the model's %d positions (not truncated)",
                        over,
                        self.max_new_tokens,
                        self.max_positions,
                    )
            with torch.inference_mode():
                out = self.lm.generate(
                    **enc,
                    do_sample=False,
                    num_beams=1,
                    max_new_tokens=self.max_new_tokens,
                    pad_token_id=self.tokenizer.pad_token_id,
                )
            if self.kind == "causal":
                out = out[:, enc["input_ids"].shape[1] :]
            decoded = self.tokenizer.batch_decode(out, skip_special_tokens=True)
            for i, text in zip(batch, decoded):
                replies[i] = text.strip()
                if on_reply is not None:
                    on_reply(i, replies[i])
        return replies
