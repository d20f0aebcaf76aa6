"""Prompt-based last-token embeddings for decoder LMs (Pcc-tuning), on the tiny random causal LM."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from datasets import Dataset

from finesim.models.builders import QLoRAUnavailableError, add_lora, build_prompt_lm
from finesim.models.prompt_lm import PromptConfig, PromptLMEncoder, load_prompt_lm
from finesim.models.prompt_transformer import (
    TEMPLATES,
    PromptTransformer,
    eval_normalize,
    fit_prompts,
    resolve_template,
)

S1 = ["a man plays guitar", "a dog runs in the park", "the cat eats food", "a girl walks", "two boys sit"]
S2 = ["a man plays piano", "a cat sits", "the dog eats", "a boy runs on the street", "two girls sit"]
Y = [4.0, 1.0, 3.0, 0.5, 2.0]


@pytest.fixture()
def prompt_model(tiny_causal_lm_dir: Path):
    return build_prompt_lm(str(tiny_causal_lm_dir), max_length=64)


def test_templates_are_the_papers() -> None:
    assert TEMPLATES["eol"].format(sentence="X") == 'This sentence : "X" means in one word:"'
    assert TEMPLATES["sth"].format(sentence="X") == 'This sentence : "X" means something'
    assert TEMPLATES["sum"].format(sentence="X") == 'This sentence : "X" can be summarized as'
    assert resolve_template("Q: {sentence} A:") == "Q: {sentence} A:"
    with pytest.raises(ValueError, match="exactly one"):
        resolve_template("no field here")


def test_eval_normalize() -> None:
    assert eval_normalize('He said "hi"') == "He said 'hi'"
    assert eval_normalize("Is it raining?") == "Is it raining."
    assert eval_normalize("a dog runs") == "a dog runs."
    assert eval_normalize("done.") == "done."


def test_left_padding_bos_and_no_eos(prompt_model) -> None:
    enc = PromptLMEncoder(prompt_model, PromptConfig(template="eol"))
    tok = prompt_model[0].tokenizer
    prompts = enc.prompts(["a dog", "a man plays guitar in the park"])
    assert prompts[0] == tok.bos_token + 'This sentence : "a dog" means in one word:"'
    feats = prompt_model.preprocess(["a dog", "a man plays guitar in the park"])
    assert feats["input_ids"].tolist() == tok(prompts, add_special_tokens=False, padding=True)["input_ids"]
    ids, mask = feats["input_ids"], feats["attention_mask"]
    assert mask[0, 0] == 0 and mask[0, -1] == 1  # the short one is padded on the left
    assert (ids[:, mask[0].argmax()] == tok.bos_token_id).any()
    assert tok.eos_token_id not in ids[1].tolist()


def test_embedding_is_last_token_of_last_layer(prompt_model) -> None:
    enc = PromptLMEncoder(prompt_model)
    texts = ["a dog", "a man plays guitar in the park"]
    emb = enc.encode(texts, convert_to_tensor=True)
    assert torch.allclose(prompt_model.encode(texts, convert_to_tensor=True), emb)  # the model templates itself
    feats = prompt_model.preprocess(texts)
    with torch.no_grad():
        hidden = (
            prompt_model[0]
            .auto_model(input_ids=feats["input_ids"], attention_mask=feats["attention_mask"])
            .last_hidden_state
        )
    assert torch.allclose(emb, hidden[:, -1, :], atol=1e-5)


def test_sentence_truncation(prompt_model) -> None:
    enc = PromptLMEncoder(prompt_model, PromptConfig(template="sth", sentence_max_tokens=2))
    assert enc.prompts(["a man plays guitar"])[0].endswith('"a man" means something')


LONG = [
    "a man plays guitar in the park with a dog while the sun sets over the old town and the river",
    "the woman is slicing an onion on the kitchen table for dinner with her sister and two friends",
]


@pytest.mark.parametrize("template", ["eol", "sth", "sum"])
def test_long_sentences_keep_the_whole_template(tiny_causal_lm_dir: Path, template: str) -> None:
    """Under a tight token limit the sentence is cut, never the template: the last input token is the
    template's last token, the input fits the limit, and different sentences stay different."""
    model = build_prompt_lm(str(tiny_causal_lm_dir), max_length=40, template=template)  # templates: 29-32 tokens
    tok = model[0].tokenizer
    end = tok(TEMPLATES[template].split("{sentence}")[1], add_special_tokens=False)["input_ids"]
    feats = model.preprocess(LONG)
    ids, mask = feats["input_ids"], feats["attention_mask"]
    assert ids.shape[1] <= 40
    for row, m in zip(ids.tolist(), mask.tolist()):
        real = [t for t, keep in zip(row, m) if keep]
        assert real[0] == tok.bos_token_id
        assert real[-len(end) :] == end  # the pooled last token is the template's last token
    assert ids[0].tolist() != ids[1].tolist()
    full = [TEMPLATES[template].format(sentence=x) for x in LONG]
    assert min(len(x) for x in tok(full, add_special_tokens=False)["input_ids"]) > 40  # untruncated: too long
    # a per-call limit (the trainer's max_length, or processing_kwargs) is fitted the same way
    for call in ({"max_length": 36}, {"processing_kwargs": {"text": {"max_length": 36}}}):
        ids = model.preprocess(LONG, **call)["input_ids"]
        assert ids.shape[1] <= 36
        assert all([t for t in row if t != tok.pad_token_id][-len(end) :] == end for row in ids.tolist())


def test_template_with_other_braces(tiny_causal_lm_dir: Path) -> None:
    model = build_prompt_lm(str(tiny_causal_lm_dir), max_length=64, template='Text {x}: "{sentence}" {means}')
    assert model[0].prompts(["hi"]) == [model[0].tokenizer.bos_token + 'Text {x}: "hi" {means}']


def test_fit_prompts_limits(tiny_causal_lm_dir: Path) -> None:
    model = build_prompt_lm(str(tiny_causal_lm_dir), max_length=None)
    tok = model[0].tokenizer
    short = fit_prompts(tok, ["a dog"], "sth", max_length=64)
    assert short == ['This sentence : "a dog" means something']
    capped = fit_prompts(tok, ["a man plays guitar"], "sth", max_length=64, sentence_max_tokens=2)
    assert capped == ['This sentence : "a man" means something']
    template_only = len(tok('This sentence : "" means something', add_special_tokens=False)["input_ids"])
    empty = fit_prompts(tok, [LONG[0]], "sth", max_length=template_only)
    assert empty == ['This sentence : "" means something']
    with pytest.raises(ValueError, match="alone takes more than max_length"):
        fit_prompts(tok, [LONG[0]], "sth", max_length=template_only - 1)
    with pytest.raises(ValueError, match="single sentences"):
        model.preprocess([("a", "b")])


def test_qlora_without_gpu_is_a_clear_error(tiny_causal_lm_dir: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(QLoRAUnavailableError, match="CUDA GPU"):
        build_prompt_lm(str(tiny_causal_lm_dir), quantize="4bit")
    with pytest.raises(ValueError, match="'4bit'"):
        build_prompt_lm(str(tiny_causal_lm_dir), quantize="8bit")


def _fit(model, loss, ds, tmp_path: Path, epochs: int = 4, lr: float = 5e-3) -> None:
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments

    args = SentenceTransformerTrainingArguments(
        output_dir=str(tmp_path / "out"),
        num_train_epochs=epochs,
        per_device_train_batch_size=len(ds),
        learning_rate=lr,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        seed=0,
        disable_tqdm=True,
    )
    SentenceTransformerTrainer(model=model, args=args, train_dataset=ds, loss=loss).train()


def test_lora_two_stage_pcc_tuning(prompt_model, tmp_path: Path) -> None:
    """Stage 1: InfoNCE with hard negatives (sentence-transformers MNRL); stage 2: Pearson. LoRA only."""
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    from finesim.losses.pearson import PearsonLoss, pearson_loss

    add_lora(prompt_model, r=4, alpha=8, dropout=0.0)
    trainable = {n for n, p in prompt_model.named_parameters() if p.requires_grad}
    assert trainable and all("lora" in n for n in trainable)
    base_before = {n: p.detach().clone() for n, p in prompt_model.named_parameters() if not p.requires_grad}
    enc = PromptLMEncoder(prompt_model)

    triplets = Dataset.from_dict({"anchor": S1, "positive": S2, "negative": S2[1:] + S2[:1]})
    _fit(prompt_model, MultipleNegativesRankingLoss(prompt_model, scale=20.0), triplets, tmp_path / "s1", epochs=1)

    pairs = Dataset.from_dict({"s1": S1, "s2": S2, "label": Y})  # raw sentences: the model templates them

    def current_loss() -> float:
        a = enc.encode(S1, convert_to_tensor=True)
        b = enc.encode(S2, convert_to_tensor=True)
        return pearson_loss(torch.nn.functional.cosine_similarity(a, b), torch.tensor(Y)).item()

    start = current_loss()
    _fit(prompt_model, PearsonLoss(prompt_model), pairs, tmp_path / "s2", epochs=8)
    assert current_loss() < start - 0.1
    for n, p in prompt_model.named_parameters():
        if n in base_before:
            assert torch.equal(p, base_before[n]), f"base weight {n} changed under LoRA"


def test_not_a_prompt_model_is_a_clear_error(tiny_model) -> None:
    with pytest.raises(ValueError, match="not a prompt-based model"):
        PromptLMEncoder(tiny_model)


def test_works_with_the_embedding_scorer(prompt_model) -> None:
    from finesim.evaluation.scoring import EmbeddingScorer

    scores = EmbeddingScorer(PromptLMEncoder(prompt_model)).score(S1, S2)
    assert scores.shape == (5,)


def test_save_and_load_round_trip(prompt_model, tmp_path: Path) -> None:
    config = PromptConfig(template="eol", sentence_max_tokens=16)
    base = PromptLMEncoder(prompt_model, config).encode(S1[:2], convert_to_tensor=True)
    add_lora(prompt_model, r=4, alpha=8, dropout=0.0)
    with torch.no_grad():  # LoRA B starts at zero; make the adapter change the output
        for name, p in prompt_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    enc = PromptLMEncoder(prompt_model, config)
    before = enc.encode(S1[:2], convert_to_tensor=True)
    enc.save(tmp_path / "enc")
    loaded = PromptLMEncoder.load(tmp_path / "enc")
    assert loaded.config == enc.config
    assert isinstance(loaded.model[0], PromptTransformer)
    plain = load_prompt_lm(tmp_path / "enc")  # the template is saved with the model itself
    assert (plain[0].template, plain[0].sentence_max_tokens) == ("eol", 16)
    assert torch.allclose(plain.encode(S1[:2], convert_to_tensor=True), before, atol=1e-5)
    assert not torch.allclose(before, base, atol=1e-3)  # the adapter matters
    assert torch.allclose(loaded.encode(S1[:2], convert_to_tensor=True), before, atol=1e-5)
    with pytest.raises(FileNotFoundError, match=r"PromptLMEncoder\.save"):
        PromptLMEncoder.load(tmp_path)


def test_reload_keeps_saved_options_and_trains_the_adapter(
    tiny_causal_lm_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    """Stage 2 reloads the stage-1 folder: options left unset keep the saved ones; the adapter stays trainable,
    also after the k-bit preparation (which freezes every weight; faked here, 4-bit needs CUDA)."""
    import peft

    import finesim.models.builders as prompt_lm

    model = build_prompt_lm(str(tiny_causal_lm_dir), max_length=48, template="eol", sentence_max_tokens=16)
    add_lora(model, r=4, alpha=8, dropout=0.0)
    model.save(str(tmp_path / "stage1"))

    kept = build_prompt_lm(str(tmp_path / "stage1"))
    assert (kept[0].template, kept[0].sentence_max_tokens, kept[0].max_seq_length) == ("eol", 16, 48)
    replaced = build_prompt_lm(str(tmp_path / "stage1"), template="sum", max_length=40)
    assert (replaced[0].template, replaced[0].max_seq_length) == ("sum", 40)

    def freeze_all(module):
        for p in module.parameters():
            p.requires_grad = False
        return module

    monkeypatch.setattr(prompt_lm, "_quantization_kwargs", lambda quantize: {})
    monkeypatch.setattr(peft, "prepare_model_for_kbit_training", freeze_all)
    quantized = build_prompt_lm(str(tmp_path / "stage1"), quantize="4bit")
    trainable = {n for n, p in quantized.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    assert len(trainable) == sum("lora_" in n for n, _ in quantized.named_parameters())
