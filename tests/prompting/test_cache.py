"""The JSONL reply cache, and prompt building on the real data files."""

from __future__ import annotations

import hashlib
import json
import threading

import pytest
from datasets import Dataset

from finesim.prompting import ReplyCache, build_prompts, cache_key, evaluate_prompting


def test_round_trip_unicode_and_meta(tmp_path):
    path = tmp_path / "sub" / "replies.jsonl"
    cache = ReplyCache(path)
    assert len(cache) == 0 and not path.exists()
    key = cache_key("openai", "m", {"max_tokens": 5}, "Wie ähnlich? “quotes”\nnew line")
    cache.put(key, "Die Antwort ist 3,5 — ok", backend="openai", model="m")
    entry = json.loads(path.read_text(encoding="utf-8"))
    assert entry == {"key": key, "reply": "Die Antwort ist 3,5 — ok", "backend": "openai", "model": "m"}
    again = ReplyCache(path)
    assert again.get(key) == "Die Antwort ist 3,5 — ok" and key in again
    assert again.describe() == {"path": str(path), "reused": 1, "written": 0, "unreadable_lines": 0}


def test_keys_separate_backend_model_settings_and_prompt():
    base = cache_key("hf", "m", {"max_new_tokens": 20}, "p")
    assert base == cache_key("hf", "m", {"max_new_tokens": 20}, "p")
    assert (
        len(
            {
                base,
                cache_key("openai", "m", {"max_new_tokens": 20}, "p"),
                cache_key("hf", "m2", {"max_new_tokens": 20}, "p"),
                cache_key("hf", "m", {"max_new_tokens": 5}, "p"),
                cache_key("hf", "m", {"max_new_tokens": 20}, "p "),
            }
        )
        == 5
    )


def test_namespace_separates_keys_and_its_absence_keeps_the_old_key():
    blob = '{"backend": "openai", "model": "m", "prompt": "p", "settings": {"max_tokens": 5}}'
    old_key = hashlib.sha256(blob.encode("utf-8")).hexdigest()  # the key before namespaces existed
    assert cache_key("openai", "m", {"max_tokens": 5}, "p") == old_key
    assert cache_key("openai", "m", {"max_tokens": 5}, "p", namespace=None) == old_key
    keys = {cache_key("openai", "m", {"max_tokens": 5}, "p", namespace=ns) for ns in ("rev-a", "rev-b", "")}
    assert len(keys) == 3 and old_key not in keys


class CountingBackend:
    """A backend whose replies depend on which weights it "serves"; counts the prompts it is sent."""

    name = "openai"
    model = "served-name"

    def __init__(self, weights: str) -> None:
        self.weights = weights
        self.sent = 0

    def settings(self) -> dict:
        return {"max_tokens": 5}

    def describe(self) -> dict:
        return {"backend": self.name, "model": self.model}

    def generate(self, prompts, on_reply=None):
        replies = []
        for i in range(len(prompts)):
            self.sent += 1
            reply = "5" if self.weights == "a" else "1"
            replies.append(reply)
            if on_reply is not None:
                on_reply(i, reply)
        return replies


def test_cache_namespace_keeps_two_weights_under_one_model_name_apart(tmp_path):
    queries = Dataset.from_dict({"sentence1": ["a", "b", "c"], "sentence2": ["x", "y", "z"], "label": [1.0, 3.0, 5.0]})
    train = Dataset.from_dict({"sentence1": ["t"], "sentence2": ["u"], "label": [2.0]})
    path = tmp_path / "replies.jsonl"

    def run(weights: str, namespace: str | None) -> tuple[dict, int]:
        backend = CountingBackend(weights)
        cache = ReplyCache(path)
        kw = {"task": "stsb", "k": 0, "instructions": "short", "cache": cache, "cache_namespace": namespace}
        result = evaluate_prompting(queries, train, backend, **kw)
        return result, backend.sent

    first, sent = run("a", "rev-a")
    assert sent == 3 and [r["reply"] for r in first["rows"]] == ["5"] * 3
    assert first["requests"]["cache_namespace"] == "rev-a"
    second, sent = run("b", "rev-b")  # other weights, same name: asked again, its own replies
    assert sent == 3 and [r["reply"] for r in second["rows"]] == ["1"] * 3
    again, sent = run("b", "rev-a")  # same namespace: every reply from the cache (those of rev-a)
    assert sent == 0 and again["requests"]["from_cache"] == 3 and [r["reply"] for r in again["rows"]] == ["5"] * 3
    _, sent = run("b", None)  # no namespace: its own keys, as before namespaces existed
    assert sent == 3
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line.get("namespace") for line in lines] == ["rev-a"] * 3 + ["rev-b"] * 3 + [None] * 3


def test_torn_and_bad_lines_are_skipped_and_new_entries_stay_readable(tmp_path, caplog):
    path = tmp_path / "replies.jsonl"
    good = json.dumps({"key": "k1", "reply": "1"})
    path.write_text(good + "\n" + "not json\n" + json.dumps({"key": "k2"}) + "\n" + '{"key": "k3", "re', "utf-8")
    cache = ReplyCache(path)
    assert cache.bad_lines == 3 and len(cache) == 1
    assert "line 2 is unreadable" in caplog.text
    cache.put("k4", "4")
    cache.put("k5", "5")
    reopened = ReplyCache(path)
    assert {k: reopened.get(k) for k in ("k1", "k4", "k5")} == {"k1": "1", "k4": "4", "k5": "5"}
    assert reopened.bad_lines == 3


def test_concurrent_puts_write_whole_lines(tmp_path):
    path = tmp_path / "replies.jsonl"
    cache = ReplyCache(path)

    def worker(t: int) -> None:
        for i in range(25):
            cache.put(f"{t}-{i}", "x" * 500)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    lines = path.read_text().splitlines()
    assert len(lines) == 100 and all(json.loads(line)["reply"] == "x" * 500 for line in lines)
    assert len(ReplyCache(path)) == 100


def test_in_memory_cache_writes_nothing(tmp_path):
    cache = ReplyCache(None)
    cache.put("k", "v")
    assert cache.get("k") == "v" and cache.describe()["path"] is None
    assert list(tmp_path.iterdir()) == []


def test_real_csts_prompts_draw_demonstrations_from_train_only(shared_data):
    from finesim.data import read_csts

    train, _ = read_csts(shared_data / "csts" / "train.csv")
    train = train.select(range(1000))  # pairing all 11k rows takes ~15 s (finesim.data.pair_conditions)
    validation, report = read_csts(shared_data / "csts" / "validation.csv")
    assert report.skipped.get("unlabeled (-1) rows") == 160
    queries = validation.select(range(30))
    prompts, sampler = build_prompts(queries, train, task="csts", k=4, instructions="short", seed=42)
    pairing = sampler.describe()["pairing"]
    assert pairing["pairs"] >= 450 and pairing["pairs"] * 2 + pairing["rows_in_bad_groups"] == 1000
    train_sentences = {s.strip() for s in train["sentence1"]}
    for prompt, row in zip(prompts, queries):
        lines = prompt.split("\n")
        assert len(lines) == 6
        demos, query = lines[1:5], lines[5]
        assert all(
            line.split(" Sentence 2: ")[0].removeprefix("Input: Sentence 1: ") in train_sentences for line in demos
        )
        assert demos[0].split(" Condition: ")[0] == demos[1].split(" Condition: ")[0]  # a contrasting pair
        assert query.endswith(f"Condition: {row['condition']} Output:")
    again, _ = build_prompts(queries, train, task="csts", k=4, instructions="short", seed=42)
    assert again == prompts


@pytest.mark.parametrize("instructions", ["none", "long"])
def test_real_stsb_prompts(shared_data, instructions):
    from finesim.data import read_stsb

    folder = shared_data / "sts" / "STSBenchmark"
    train, _ = read_stsb(folder / "sts-train.csv")
    dev, _ = read_stsb(folder / "sts-dev.csv")
    prompts, _ = build_prompts(dev.select(range(5)), train, task="stsb", k=2, instructions=instructions, seed=0)
    for prompt in prompts:
        assert "Condition" not in prompt
        assert prompt.count("Input: ") == 3
        assert prompt.startswith("Definition:") == (instructions == "long")
