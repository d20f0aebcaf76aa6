"""Prompt texts, example layouts and seeded demonstration sampling."""

from __future__ import annotations

import pytest
from datasets import Dataset

from finesim.prompting import DemonstrationSampler, Example, build_prompt, build_prompts, instruction_text
from finesim.prompting.prompts import format_example, format_label


def csts_train() -> Dataset:
    """Four sentence pairs, each under a high and a low condition, plus one unpaired row."""
    rows = []
    for i in range(4):
        s1, s2 = f"s1 of pair {i}", f"s2 of pair {i}"
        rows.append((s1, s2, f"low cond {i}", 1.0 + i * 0.25))
        rows.append((s1, s2, f"high cond {i}", 5.0 - i * 0.5))
    rows.append(("lonely one", "lonely two", "lonely cond", 3.0))
    return Dataset.from_dict(
        {
            "sentence1": [r[0] for r in rows],
            "sentence2": [r[1] for r in rows],
            "condition": [r[2] for r in rows],
            "label": [r[3] for r in rows],
            "row": list(range(1, len(rows) + 1)),
        }
    )


# The instruction wording is data needed for exact reproduction, typed here independently of
# src/finesim/prompting/instructions.json. C-STS: the paper's App. B (Fig. 5 short, Fig. 6 long). STS-B: the
# paper does not print its texts; these are the ones of the authors' prompting code
# (utils/fewshot/generate_in_context_dataset.py in princeton-nlp/c-sts).
CSTS_SHORT = (
    "On a scale between 1 and 5, how similar are the following two sentences with respect to the condition "
    "provided? Respond only with a score between 1 and 5."
)
CSTS_LONG = (
    "Definition: Evaluate the similarity between the two sentences, with respect to the condition. Assign the pair "
    "a score between 1 and 5 as follows: "
    "1 : The two sentences are completely dissimilar with respect to the condition. "
    "2 : The two sentences are dissimilar, but are on a similar topic with respect to the condition. "
    "3 : The two sentences are roughly equivalent, but some important information differs or is missing with "
    "respect to the condition. "
    "4 : The two sentences are mostly equivalent, but some unimportant details differ with respect to the "
    "condition. "
    "5 : The two sentences are completely equivalent with respect to the condition."
)
STSB_SHORT = (
    "On a scale between 0 and 5, how similar are the following two sentences? Respond only with a score between 0 "
    "and 5."
)
STSB_LONG = (
    "Definition: Evaluate the similarity between them and classify them into classes from 0-5 as follows: "
    "0 : The two sentences are completely dissimilar. "
    "1 : The two sentences are not equivalent, but are on the same topic. "
    "2 : The two sentences are not equivalent, but share some details. "
    "3 : The two sentences are roughly equivalent, but some important information differs/missing. "
    "4 : The two sentences are mostly equivalent, but some unimportant details differ. "
    "5 : The two sentences are completely equivalent, as they mean the same thing."
)


def test_instruction_texts_match_the_paper():
    assert instruction_text("csts", "none") is None and instruction_text("stsb", "none") is None
    assert instruction_text("csts", "short") == CSTS_SHORT
    assert instruction_text("csts", "long") == CSTS_LONG
    assert instruction_text("stsb", "short") == STSB_SHORT
    assert instruction_text("stsb", "long") == STSB_LONG
    with pytest.raises(ValueError, match="unknown instructions"):
        instruction_text("csts", "medium")
    with pytest.raises(ValueError, match="unknown task"):
        instruction_text("sick", "short")


def test_example_layouts():
    ex = Example("A dog runs.", "A cat sits.", "The animal.", 4.0)
    assert (
        format_example(ex)
        == "Input: Sentence 1: A dog runs. Sentence 2: A cat sits. Condition: The animal. Output: 4.0"
    )
    assert format_example(ex, "t5").endswith("Condition: The animal. Output:4.0")
    assert format_example(ex, "gpt") == (
        "Input:  Sentence 1:  A dog runs. Sentence 2:  A cat sits. Condition:  The animal. Output: 4.0"
    )
    query = Example(" A dog runs. ", "A cat sits.")  # STS-B: no condition; sentences stripped
    assert format_example(query) == "Input: Sentence 1: A dog runs. Sentence 2: A cat sits. Output:"
    assert format_example(query, "gpt").endswith("Output: ")
    assert format_label(3) == "3.0"
    assert format_label(3.3333333) == "3.33"


def test_build_prompt_two_shot_short_matches_figure_5_layout():
    demos = [
        Example("Blue buses parked.", "Two buses drive.", "The type of transportation.", 4.0),
        Example("Blue buses parked.", "Two buses drive.", "The number of buses.", 1.0),
    ]
    query = Example("The skater descends.", "A boy skateboards.", "The location.", 2.0)  # label never shown
    prompt = build_prompt(query, demos, instruction=instruction_text("csts", "short"))
    lines = prompt.split("\n")
    assert len(lines) == 4
    assert lines[0].startswith("On a scale between 1 and 5")
    assert lines[1].endswith("Condition: The type of transportation. Output: 4.0")
    assert lines[2].endswith("Condition: The number of buses. Output: 1.0")
    assert lines[3] == (
        "Input: Sentence 1: The skater descends. Sentence 2: A boy skateboards. Condition: The location. Output:"
    )
    assert build_prompt(query).count("\n") == 0  # zero-shot, no instruction: the query alone
    with pytest.raises(ValueError, match="needs a label"):
        build_prompt(query, [Example("a", "b", "c")])


def test_csts_sampler_pairs_high_then_low_from_train_only_and_is_seeded():
    train = csts_train()
    sampler = DemonstrationSampler(train, task="csts", k=4, seed=1)
    assert sampler.pairing_report["pairs"] == 4
    assert sampler.pairing_report["rows_in_bad_groups"] == 1  # the unpaired row is never a demonstration
    draws = [sampler.draw() for _ in range(20)]
    for demos in draws:
        assert len(demos) == 4
        for high, low in (demos[0:2], demos[2:4]):
            assert (high.sentence1, high.sentence2) == (low.sentence1, low.sentence2)
            assert high.condition.startswith("high") and low.condition.startswith("low")
            assert high.label > low.label
        assert demos[0].sentence1 != demos[2].sentence1  # two distinct pairs
    again = DemonstrationSampler(train, task="csts", k=4, seed=1)
    assert [again.draw() for _ in range(20)] == draws
    other = DemonstrationSampler(train, task="csts", k=4, seed=2)
    assert [other.draw() for _ in range(20)] != draws


def test_csts_sampler_odd_k_and_zero():
    train = csts_train()
    demos = DemonstrationSampler(train, task="csts", k=3, seed=0).draw()
    assert len(demos) == 3
    assert demos[2].condition.startswith("high") and demos[0].condition.startswith("high")
    assert DemonstrationSampler(train, task="csts", k=0).draw() == []
    with pytest.raises(ValueError, match="k=10 needs 5 training sentence pairs"):
        DemonstrationSampler(train, task="csts", k=10)


def test_stsb_sampler_draws_distinct_rows():
    train = Dataset.from_dict({"sentence1": list("abcdef"), "sentence2": list("ghijkl"), "label": [0, 1, 2, 3, 4, 5]})
    sampler = DemonstrationSampler(train, task="stsb", k=4, seed=3)
    for _ in range(10):
        demos = sampler.draw()
        assert len({d.sentence1 for d in demos}) == 4
        assert all(d.condition is None for d in demos)


def test_a_query_never_gets_its_own_pair_as_a_demonstration():
    train = csts_train()
    sampler = DemonstrationSampler(train, task="csts", k=2, seed=0)
    own = ("s1 of pair 2", "s2 of pair 2")
    for query in (own, own[::-1]):  # either order
        for _ in range(30):
            assert all((d.sentence1, d.sentence2) != own for d in sampler.draw(query))
    assert sampler.describe()["own_pair_excluded"] == {
        "queries": 60,
        "candidates": 60,
        "unit": "sentence pairs with two conditions",
    }
    # a query whose pair is not in train draws exactly as without a query
    plain, other = (
        DemonstrationSampler(train, task="csts", k=4, seed=7),
        DemonstrationSampler(train, task="csts", k=4, seed=7),
    )
    assert [plain.draw() for _ in range(5)] == [other.draw(("new", "pair")) for _ in range(5)]
    assert other.queries_with_own_pair == 0
    # k=4 needs 2 of the 4 pairs; excluding the own pair leaves 3
    with pytest.raises(ValueError, match="k=8 needs 4 training sentence pairs with two conditions other than"):
        DemonstrationSampler(train, task="csts", k=8).draw(own)
    # STS-B: every training row with the query's sentences is left out
    stsb = Dataset.from_dict(
        {"sentence1": ["a", "a", "b", "c"], "sentence2": ["x", "x", "y", "z"], "label": [1, 2, 3, 4]}
    )
    sampler = DemonstrationSampler(stsb, task="stsb", k=2, seed=0)
    for _ in range(20):
        assert {d.sentence1 for d in sampler.draw(("a", "x"))} == {"b", "c"}
    assert sampler.describe()["own_pair_excluded"] == {"queries": 20, "candidates": 40, "unit": "rows"}


def test_build_prompts_excludes_the_query_pair_when_train_is_the_eval_data(caplog):
    train = csts_train()
    queries = train.select(range(8))  # the four paired sentence pairs, both conditions
    with caplog.at_level("WARNING", logger="finesim.prompting"):
        prompts, sampler = build_prompts(queries, train, task="csts", k=2, instructions="none", seed=0)
    for prompt, s1 in zip(prompts, queries["sentence1"]):
        demos, query_line = prompt.split("\n")[:2], prompt.split("\n")[2]
        assert query_line.startswith(f"Input: Sentence 1: {s1} ")
        assert all(f"Sentence 1: {s1} " not in line for line in demos)
    assert sampler.queries_with_own_pair == 8 and sampler.excluded_candidates == 8
    assert "8 of 8 queries have their own sentence pair in the demonstration data" in caplog.text


def test_build_prompts_never_shows_the_query_label_and_uses_train():
    train = csts_train()
    queries = Dataset.from_dict(
        {"sentence1": ["q1", "q2"], "sentence2": ["r1", "r2"], "condition": ["c1", "c2"], "label": [1.0, 5.0]}
    )
    prompts, _ = build_prompts(queries, train, task="csts", k=2, instructions="long", seed=0)
    assert len(prompts) == 2
    for prompt, q in zip(prompts, ["q1", "q2"]):
        lines = prompt.split("\n")
        assert lines[0].startswith("Definition:")
        assert all("pair" in line for line in lines[1:3])  # demonstrations come from train
        assert lines[3].startswith(f"Input: Sentence 1: {q} ") and lines[3].endswith("Output:")


def test_a_limited_run_gets_the_first_prompts_of_the_full_run():
    train = csts_train()
    queries = Dataset.from_dict(
        {
            "sentence1": [f"q{i}" for i in range(6)],
            "sentence2": ["r"] * 6,
            "condition": ["c"] * 6,
            "label": [1.0] * 6,
        }
    )
    full, _ = build_prompts(queries, train, task="csts", k=2, instructions="none", seed=5)
    limited, _ = build_prompts(queries.select(range(3)), train, task="csts", k=2, instructions="none", seed=5)
    assert limited == full[:3]
    assert len(set(full)) == 6
