"""CCL with tiny models: bi- and tri-encoder losses, the projection head, a few training steps."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from datasets import Dataset

from finesim.evaluation.metrics import spearman
from finesim.losses.ccl import CCLLoss
from finesim.models.io import load_with_finesim_modules
from finesim.models.projection_head import ProjectionHead, add_projection_head

SUBJECTS = ["man", "woman", "dog", "cat", "boy", "girl"]
ACTIONS = ["plays guitar", "eats food", "runs in the park", "sits on the car", "walks on the street"]
CONDITIONS = ["the color", "the animal", "the sport", "the person", "the location", "the music", "the size"]


def synthetic_pairs(n: int = 16, seed: int = 0) -> Dataset:
    """C-STS-like pairs layout for the bi-encoder: 4 text-pair columns + [label_high, label_low] on [0, 1]."""
    rng = random.Random(seed)
    rows: dict[str, list] = {"s1_high": [], "s2_high": [], "s1_low": [], "s2_low": [], "label": []}
    for _ in range(n):
        s1 = f"a {rng.choice(SUBJECTS)} {rng.choice(ACTIONS)}"
        s2 = f"the {rng.choice(SUBJECTS)} {rng.choice(ACTIONS)}"
        hi, lo = rng.sample(CONDITIONS, 2)
        high = rng.choice([0.75, 1.0])
        low = rng.choice([0.0, 0.25, 0.5])
        rows["s1_high"].append([s1, hi])
        rows["s2_high"].append([s2, hi])
        rows["s1_low"].append([s1, lo])
        rows["s2_low"].append([s2, lo])
        rows["label"].append([high, low])
    return Dataset.from_dict(rows)


def batch_features(model, data: Dataset) -> tuple[list[dict], torch.Tensor]:
    features = []
    for column in ("s1_high", "s2_high", "s1_low", "s2_low"):
        f = model.preprocess(data[column])
        features.append({k: v for k, v in f.items() if isinstance(v, torch.Tensor)})
    return features, torch.tensor(data["label"])


def train_rows_spearman(model, data: Dataset) -> float:
    s1 = [p[0] for p in data["s1_high"]] + [p[0] for p in data["s1_low"]]
    s2 = [p[0] for p in data["s2_high"]] + [p[0] for p in data["s2_low"]]
    c = [p[1] for p in data["s1_high"]] + [p[1] for p in data["s1_low"]]
    labels = [lab[0] for lab in data["label"]] + [lab[1] for lab in data["label"]]
    a = model.encode([[x, y] for x, y in zip(s1, c)], convert_to_tensor=True)
    b = model.encode([[x, y] for x, y in zip(s2, c)], convert_to_tensor=True)
    return spearman(torch.nn.functional.cosine_similarity(a, b).numpy(), labels)


def test_projection_head_keeps_sentence_embedding_and_reloads(tiny_model, tmp_path: Path) -> None:
    before = tiny_model.encode(["a dog runs"], convert_to_tensor=True)
    head = add_projection_head(tiny_model, seed=0)
    assert add_projection_head(tiny_model) is head
    assert any(isinstance(m, ProjectionHead) for m in tiny_model.children())
    tiny_model.eval()
    out = tiny_model({k: v for k, v in tiny_model.preprocess(["a dog runs"]).items() if k != "modality"})
    assert torch.allclose(out["sentence_embedding"], before, atol=1e-6)
    with torch.no_grad():
        expected = torch.tanh(head.linear(before.clone()))
    assert torch.allclose(out["projected_embedding"], expected, atol=1e-6)
    tiny_model.save(str(tmp_path / "m"))
    again = load_with_finesim_modules(str(tmp_path / "m"))
    heads = [m for m in again.children() if isinstance(m, ProjectionHead)]
    assert len(heads) == 1 and torch.equal(heads[0].linear.weight, head.linear.weight)
    assert torch.allclose(again.encode(["a dog runs"], convert_to_tensor=True), before, atol=1e-6)
    with pytest.raises(ValueError, match="activation"):
        ProjectionHead(4, activation="softmax")


def test_ccl_parts_ablation_and_errors(tiny_model) -> None:
    data = synthetic_pairs(4)
    features, labels = batch_features(tiny_model, data)
    with pytest.raises(KeyError, match="add_projection_head"):
        CCLLoss(tiny_model)(features, labels)
    only_mse = CCLLoss(tiny_model, lambda_wacl=0, lambda_bcl=0, lambda_cmse=0)
    assert set(only_mse(features, labels)) == {"mse"}  # no projection head needed
    add_projection_head(tiny_model, seed=0)
    tiny_model.train()
    parts = CCLLoss(tiny_model, lambda_bcl=2.0)(features, labels)
    assert set(parts) == {"w_acl", "mse", "c_mse", "bcl"}
    assert all(torch.isfinite(v) and v.requires_grad for v in parts.values())
    no_bcl = CCLLoss(tiny_model, lambda_bcl=0)(features, labels)
    assert set(no_bcl) == {"w_acl", "mse", "c_mse"}
    total = CCLLoss(tiny_model, return_dict=False)(features, labels)
    assert total.dim() == 0
    config = CCLLoss(tiny_model, lambda_cmse=0.5, sigma=0.25).get_config_dict()
    assert config["lambda_wacl"] == 1.0 and config["lambda_cmse"] == 0.5 and config["sigma"] == 0.25
    with pytest.raises(ValueError, match=r"shape \(batch, 2\)"):
        CCLLoss(tiny_model)(features, labels[:, 0])
    with pytest.raises(ValueError, match="not all 0"):
        CCLLoss(tiny_model, lambda_wacl=0, lambda_bcl=0, lambda_mse=0, lambda_cmse=0)
    with pytest.raises(ValueError, match="4 condition-pair columns"):
        CCLLoss(tiny_model)(features[:2], labels)


def test_ccl_mse_part_is_cosine_mse_over_both_rows(tiny_model) -> None:
    data = synthetic_pairs(3)
    features, labels = batch_features(tiny_model, data)
    tiny_model.eval()
    got = CCLLoss(tiny_model, lambda_wacl=0, lambda_bcl=0, lambda_cmse=0)(features, labels)["mse"]
    h = [tiny_model(dict(f))["sentence_embedding"] for f in features]
    cos = torch.nn.functional.cosine_similarity
    ref = torch.cat([(cos(h[0], h[1]) - labels[:, 0]) ** 2, (cos(h[2], h[3]) - labels[:, 1]) ** 2]).mean()
    assert float(got.detach()) == pytest.approx(float(ref.detach()), rel=1e-5)


def test_ccl_trains_bi_encoder_and_logs_each_part(tiny_model, tmp_path: Path) -> None:
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments

    torch.manual_seed(0)
    data = synthetic_pairs(8)
    add_projection_head(tiny_model, seed=0)
    loss = CCLLoss(tiny_model, sigma=0.5, temperature=0.1)
    before = train_rows_spearman(tiny_model, data)
    args = SentenceTransformerTrainingArguments(
        output_dir=str(tmp_path / "out"),
        max_steps=16,
        per_device_train_batch_size=4,
        learning_rate=5e-3,
        warmup_ratio=0.0,
        logging_steps=4,
        save_strategy="no",
        report_to="none",
        seed=0,
        use_cpu=True,
    )
    trainer = SentenceTransformerTrainer(model=tiny_model, args=args, train_dataset=data, loss=loss)
    trainer.train()
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert logged and all({"w_acl", "bcl", "mse", "c_mse"} <= set(entry) for entry in logged)
    first, last = logged[0], logged[-1]
    assert last["loss"] < first["loss"]
    after = train_rows_spearman(tiny_model, data)
    assert after > before + 10, (before, after)


def test_ccl_on_tri_encoder_hadamard(tiny_bert_dir: Path) -> None:
    from finesim.models.builders import build_tri_encoder

    torch.manual_seed(0)
    model = build_tri_encoder(str(tiny_bert_dir), head="hadamard", max_length=64)
    add_projection_head(model, seed=0)
    data = synthetic_pairs(8)
    s1 = [p[0] for p in data["s1_high"]]
    s2 = [p[0] for p in data["s2_high"]]
    c_hi = [p[1] for p in data["s1_high"]]
    c_lo = [p[1] for p in data["s1_low"]]

    def feats(texts: list[str]) -> dict:
        return {k: v for k, v in model.preprocess(texts).items() if isinstance(v, torch.Tensor)}

    features = [feats(s1), feats(s2), feats(c_hi), feats(c_lo)]
    labels = torch.tensor(data["label"])
    loss = CCLLoss(model, temperature=0.1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
    model.train()
    totals = []
    for _ in range(15):
        parts = loss(features, labels)
        total = torch.stack(list(parts.values())).sum()
        optimizer.zero_grad()
        total.backward()
        totals.append(float(total.detach()))
        optimizer.step()
    assert set(parts) == {"w_acl", "bcl", "mse", "c_mse"}
    condition_head = model[2]
    assert condition_head.condition_transform[1].weight.grad.abs().sum() > 0
    assert model[3].linear.weight.grad.abs().sum() > 0
    assert totals[-1] < totals[0]


def test_single_part_modules_match_ccl_parts(tiny_model) -> None:
    from finesim.losses.acl import ACLLoss
    from finesim.losses.bcl import BCLLoss
    from finesim.losses.cmse import CMSELoss
    from finesim.losses.fdl import FDLLoss
    from finesim.losses.rdl import RDLLoss
    from finesim.losses.wacl import WACLLoss

    data = synthetic_pairs(5)
    features, labels = batch_features(tiny_model, data)
    add_projection_head(tiny_model, seed=0)
    tiny_model.eval()  # no dropout: every module sees the same embeddings
    parts = CCLLoss(tiny_model, sigma=0.5, temperature=0.1)(features, labels)
    with torch.no_grad():
        assert float(WACLLoss(tiny_model)(features, labels)) == pytest.approx(float(parts["w_acl"]), rel=1e-5)
        bcl = BCLLoss(tiny_model, sigma=0.5, temperature=0.1)(features, labels)
        assert float(bcl) == pytest.approx(float(parts["bcl"]), rel=1e-5)
        assert float(CMSELoss(tiny_model)(features, labels)) == pytest.approx(float(parts["c_mse"]), rel=1e-5)
        mse = CMSELoss(tiny_model, space="embedding")(features, labels)
        assert float(mse) == pytest.approx(float(parts["mse"]), rel=1e-5)
        fdl, rdl = FDLLoss(tiny_model)(features, labels), RDLLoss(tiny_model)(features, labels)
        assert float(ACLLoss(tiny_model)(features, labels)) == pytest.approx(float(fdl + rdl), rel=1e-5)


@pytest.mark.parametrize("loss_kind", ["bcl", "ccl"])
def test_partner_negative_mask_reaches_bcl(tiny_model, loss_kind: str) -> None:
    """partner_negative="mask" drops each anchor's other-condition row from its negatives (BCLLoss and CCLLoss)."""
    from finesim.losses.bcl import BCLLoss, balanced_contrastive_loss, pair_batch_partners

    data = synthetic_pairs(3)
    features, labels = batch_features(tiny_model, data)
    add_projection_head(tiny_model, seed=0)
    tiny_model.eval()  # no dropout: the positive is the anchor itself, so the reference is exact

    def loss(partner_negative: str) -> float:
        kw = {"sigma": 0.5, "temperature": 0.1, "partner_negative": partner_negative}
        if loss_kind == "bcl":
            return float(BCLLoss(tiny_model, **kw)(features, labels))
        only_bcl = {"lambda_wacl": 0, "lambda_mse": 0, "lambda_cmse": 0}
        return float(CCLLoss(tiny_model, **only_bcl, **kw)(features, labels)["bcl"])

    with torch.no_grad():
        z = [tiny_model(dict(f))["projected_embedding"] for f in features]
        anchors, negatives = torch.cat([z[0], z[2]]), torch.cat([z[1], z[3]])
        rows = torch.cat([labels[:, 0], labels[:, 1]])
        common = {"sigma": 0.5, "temperature": 0.1}
        keep = balanced_contrastive_loss(anchors, anchors, negatives, rows, **common)
        mask = balanced_contrastive_loss(anchors, anchors, negatives, rows, partner=pair_batch_partners(6), **common)
        assert loss("keep") == pytest.approx(float(keep), rel=1e-5)
        assert loss("mask") == pytest.approx(float(mask), rel=1e-5)
    # one negative fewer per anchor can only lower the loss
    assert float(mask) < float(keep)
    with pytest.raises(ValueError, match="partner_negative must be one of"):
        CCLLoss(tiny_model, partner_negative="drop")


def test_build_loss_checks_the_values_before_it_touches_the_model(tiny_model) -> None:
    """Outside a recipe, a CCL temperature of 0 was refused by the loss only after the projection head had been
    added to the caller's model."""
    from finesim.training.objectives import build_loss

    modules = len(tiny_model)
    with pytest.raises(ValueError, match="temperature must be > 0, got 0"):
        build_loss("ccl", tiny_model, {"temperature": 0})
    assert len(tiny_model) == modules and not any(isinstance(m, ProjectionHead) for m in tiny_model.children())
