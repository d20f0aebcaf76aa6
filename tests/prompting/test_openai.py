"""The OpenAI-compatible backend against a local stub server on 127.0.0.1 (no network)."""

from __future__ import annotations

import csv
import json
import logging
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from datasets import Dataset

from finesim.cli.main import main
from finesim.prompting import BackendError, OpenAICompatibleBackend, ReplyCache, evaluate_prompting
from finesim.prompting.backends.openai_compat import quote_reply

SECRET = "sk-test-0123456789-secret"


class StubState:
    """What the stub server does, and what it saw."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.plans: dict[str, list[str]] = {}  # substring of the prompt -> actions for attempt 1, 2, ...
        self.attempts: Counter[str] = Counter()  # prompt -> requests received
        self.in_flight = 0
        self.max_in_flight = 0
        self.auth: list[str | None] = []
        self.paths: list[str] = []
        self.bodies: list[dict] = []

    def action(self, prompt: str) -> str:
        with self.lock:
            self.attempts[prompt] += 1
            n = self.attempts[prompt]
        for marker, actions in self.plans.items():
            if marker in prompt:
                return actions[min(n, len(actions)) - 1]
        return f"ok:The Answer is {len(prompt) % 5 + 1}.0."


def make_handler(state: StubState) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:  # keep test output quiet
            pass

        def _finish(self) -> None:
            """The request stops counting as in flight before its reply is written: a client that has the reply may
            send its next request before this handler's thread runs again, which must not count twice."""
            if getattr(self, "counted", False):
                self.counted = False
                with state.lock:
                    state.in_flight -= 1

        def _send(self, code: int, body: bytes, headers: dict[str, str] | None = None) -> None:
            self._finish()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            chat = self.path.endswith("/chat/completions")
            prompt = body["messages"][-1]["content"] if chat else body["prompt"]
            with state.lock:
                state.in_flight += 1
                state.max_in_flight = max(state.max_in_flight, state.in_flight)
                self.counted = True
                state.auth.append(self.headers.get("Authorization"))
                state.paths.append(self.path)
                state.bodies.append(body)
            try:
                action = state.action(prompt)
                kind, _, arg = action.partition(":")
                if kind == "slow":
                    seconds, _, text = arg.partition(":")
                    time.sleep(float(seconds))
                    kind, arg = "ok", text or "4"
                if kind == "ok":
                    choice = {"message": {"role": "assistant", "content": arg}} if chat else {"text": arg}
                    self._send(200, json.dumps({"choices": [choice]}).encode())
                elif kind == "truncated":  # promises 1000 bytes, sends 10, hangs up
                    self._finish()
                    self.send_response(200)
                    self.send_header("Content-Length", "1000")
                    self.end_headers()
                    self.wfile.write(b'{"choices"')
                elif kind == "malformed":
                    self._send(200, b"<html>proxy error</html>")
                elif kind == "nochoices":
                    self._send(200, json.dumps({"object": "error", "message": "overloaded"}).encode())
                elif kind == "echo":  # echo:CODE:PAD -> PAD filler bytes, then the request's Authorization header
                    code, _, pad = arg.partition(":")
                    auth = self.headers.get("Authorization") or ""
                    body = b"x" * int(pad or 0) + f"you sent Authorization: {auth}; again: {auth}".encode()
                    self._send(int(code), body)
                elif kind == "nullcontent":
                    self._send(200, json.dumps({"choices": [{"message": {"content": None}}]}).encode())
                else:  # an HTTP status code
                    headers = {"Retry-After": "0"} if kind == "429" else {}
                    self._send(int(kind), json.dumps({"error": {"message": f"stub {kind}"}}).encode(), headers)
            finally:
                self._finish()

    return Handler


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that timed out closes its socket before a slow reply is written: expected here


@pytest.fixture()
def stub():
    state = StubState()
    server = QuietServer(("127.0.0.1", 0), make_handler(state))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    state.base_url = f"http://127.0.0.1:{server.server_address[1]}/v1"  # type: ignore[attr-defined]
    yield state
    server.shutdown()
    server.server_close()


def backend(stub: StubState, **kwargs: object) -> OpenAICompatibleBackend:
    options: dict[str, object] = {
        "base_url": stub.base_url,  # type: ignore[attr-defined]
        "backoff": 0.01,
        "max_backoff": 0.05,
        "timeout": 2.0,
        "max_retries": 3,
        "show_progress": False,
    }
    options.update(kwargs)
    return OpenAICompatibleBackend("stub-model", **options)  # type: ignore[arg-type]


def test_chat_request_shape_and_key_from_env(stub, monkeypatch, caplog):
    monkeypatch.setenv("STUB_KEY", SECRET)
    stub.plans["q1"] = ["ok:The Answer is 2.0."]
    b = backend(stub, api_key_env="STUB_KEY", max_tokens=7)
    with caplog.at_level(logging.DEBUG):
        assert b.generate(["q1", "q2 x"]) == ["The Answer is 2.0.", "The Answer is 5.0."]
    assert stub.paths == ["/v1/chat/completions"] * 2
    body = stub.bodies[0]
    assert body["model"] == "stub-model" and body["temperature"] == 0 and body["max_tokens"] == 7
    assert body["messages"][-1]["role"] == "user"
    assert stub.auth == [f"Bearer {SECRET}"] * 2
    described = json.dumps(b.describe())
    assert SECRET not in described and SECRET not in repr(b) and SECRET not in caplog.text
    assert b.describe()["api_key_set"] is True and b.describe()["api_key_env"] == "STUB_KEY"


def test_no_key_no_header_and_completions_api(stub, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    b = backend(stub, api="completions")
    assert b.generate(["abc"]) == ["The Answer is 4.0."]
    assert stub.paths == ["/v1/completions"] and stub.auth == [None]
    assert stub.bodies[0]["prompt"] == "abc"


def test_retries_on_server_errors_rate_limits_and_malformed_replies(stub):
    stub.plans["p500"] = ["500", "503", "ok:3"]
    stub.plans["p429"] = ["429", "ok:2"]
    stub.plans["pbad"] = ["malformed", "nochoices", "ok:1"]
    stub.plans["ptrunc"] = ["truncated", "ok:5"]
    b = backend(stub)
    assert b.generate(["p500", "p429", "pbad", "ptrunc"]) == ["3", "2", "1", "5"]
    assert stub.attempts == Counter({"p500": 3, "p429": 2, "pbad": 3, "ptrunc": 2})
    assert b.describe()["retries"] == 6 and b.describe()["requests_sent"] == 10


def test_null_content_is_an_empty_reply(stub):
    stub.plans["pnull"] = ["nullcontent"]
    assert backend(stub).generate(["pnull"]) == [""]


def test_slow_replies_time_out_and_are_retried(stub):
    stub.plans["slow-once"] = ["slow:1.0:9", "ok:4"]
    b = backend(stub, timeout=0.3)
    start = time.perf_counter()
    assert b.generate(["slow-once"]) == ["4"]  # the late "9" is never used
    assert time.perf_counter() - start < 1.0
    assert stub.attempts["slow-once"] == 2

    stub.plans["always-slow"] = ["slow:0.6"]
    with pytest.raises(BackendError, match=r"within 0.2 s \(gave up after 2 attempts\)"):
        backend(stub, timeout=0.2, max_retries=1).generate(["always-slow"])


def test_client_errors_fail_at_once_without_leaking_the_key(stub, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    stub.plans["unauth"] = ["401"]
    with pytest.raises(BackendError) as info:
        backend(stub).generate(["unauth"])
    assert "HTTP 401" in str(info.value) and SECRET not in str(info.value)
    assert stub.attempts["unauth"] == 1  # not retried


def test_quote_reply_redacts_the_key_even_across_the_cut():
    key = "k" * 40
    assert quote_reply(b"abc" + key.encode() + b"def", 300, key) == "abc[redacted]def"
    assert quote_reply(b"abc" + key.encode(), 300, None) == "abc" + key  # no key set: nothing to hide
    # an occurrence straddling the cut goes whole; the text stays a prefix of the redacted reply
    straddling = b"x" * 290 + key.encode() + b"tail"
    assert quote_reply(straddling, 300, key) == "x" * 290 + "[redacted]"
    # positions are the original ones: the second copy starts at byte 310, past the cut, and a shorter
    # replacement of the first copy must not pull part of it into view (replace-then-cut would show 20 bytes)
    two = key.encode() + b"y" * 270 + key.encode()
    assert quote_reply(two[:340], 300, key) == "[redacted]" + "y" * 260


@pytest.mark.parametrize("code", ["401", "500", "200"])
def test_error_bodies_echoing_the_key_are_redacted(stub, monkeypatch, caplog, code):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    prefix = len("you sent Authorization: Bearer ")
    cut = 200 if code == "200" else 300  # bytes quoted from a malformed reply / from an HTTP error body
    stub.plans["echo"] = [f"echo:{code}:{cut - prefix - 5}"]  # the first copy of the key straddles the cut
    with caplog.at_level(logging.WARNING, logger="finesim.prompting"):
        with pytest.raises(BackendError) as info:
            backend(stub, max_retries=1).generate(["echo"])
    assert stub.auth[0] == f"Bearer {SECRET}"  # the server did receive (and echo) the key
    text = str(info.value) + caplog.text
    assert SECRET not in text and SECRET[:5] not in text
    if code == "200":  # malformed reply: quoted (200 bytes) in the retry warning and the final error
        assert "malformed reply" in str(info.value) and stub.attempts["echo"] == 2
    else:
        assert f"HTTP {code}" in str(info.value) and "Bearer [redacted]" in str(info.value)
        assert stub.attempts["echo"] == (2 if code == "500" else 1)


def test_unreachable_server_is_retried_then_reported():
    b = OpenAICompatibleBackend(
        "m", base_url="http://127.0.0.1:9/v1", timeout=0.5, max_retries=1, backoff=0.01, show_progress=False
    )
    with pytest.raises(BackendError, match=r"cannot reach .*gave up after 2 attempts"):
        b.generate(["x"])


def test_concurrency_limit(stub):
    stub.plans["c"] = ["slow:0.15:3"]
    prompts = [f"c{i}" for i in range(9)]
    b = backend(stub, concurrency=3)
    start = time.perf_counter()
    assert b.generate(prompts) == ["3"] * 9
    assert stub.max_in_flight == 3
    assert time.perf_counter() - start >= 0.15 * 3 - 0.05  # three waves of three
    stub.max_in_flight = 0
    backend(stub, concurrency=1).generate(["c-a", "c-b", "c-c"])
    assert stub.max_in_flight == 1


def test_on_error_invalid_scores_failures_as_invalid_and_does_not_cache_them(stub, tmp_path):
    stub.plans["BROKEN"] = ["500"]
    queries = Dataset.from_dict(
        {
            "sentence1": ["a dog", "BROKEN", "a cat", "a car"],
            "sentence2": ["a dog runs", "b", "a cat sits", "a red car"],
            "label": [5.0, 1.0, 3.0, 4.0],
        }
    )
    train = Dataset.from_dict({"sentence1": ["x", "y"], "sentence2": ["z", "w"], "label": [0.0, 5.0]})
    b = backend(stub, on_error="invalid", max_retries=1)
    cache = ReplyCache(tmp_path / "c.jsonl")
    result = evaluate_prompting(queries, train, b, task="stsb", k=0, instructions="short", cache=cache)
    assert result["metrics"]["failed_requests"] == 1 and result["requests"]["failed"] == 1
    assert result["metrics"]["invalid"] == 1
    assert result["rows"][1]["reply"] is None and result["rows"][1]["invalid"]
    assert 0.0 <= result["rows"][1]["prediction"] <= 5.0
    assert len(cache) == 3 and b.failed == [1]  # the failure is not cached: a rerun asks again
    assert stub.attempts[next(p for p in stub.attempts if "BROKEN" in p)] == 2  # first try + 1 retry


def test_interrupted_run_resumes_without_repeating_requests(stub, tmp_path):
    stub.plans["BROKEN"] = ["500"]
    rows = ["one", "two", "BROKEN three", "four", "five"]
    queries = Dataset.from_dict(
        {
            "sentence1": rows,
            "sentence2": ["s"] * 5,
            "condition": ["c"] * 5,
            "label": [1.0, 2.0, 3.0, 4.0, 5.0],
        }
    )
    train = Dataset.from_dict(
        {
            "sentence1": ["t1", "t1", "t2", "t2"],
            "sentence2": ["u1", "u1", "u2", "u2"],
            "condition": ["hi", "lo", "hi", "lo"],
            "label": [5.0, 1.0, 4.0, 2.0],
        }
    )
    path = tmp_path / "replies.jsonl"
    kwargs = {"task": "csts", "k": 2, "instructions": "none", "seed": 3}
    with pytest.raises(BackendError, match="HTTP 500"):
        evaluate_prompting(
            queries, train, backend(stub, max_retries=0, concurrency=1), cache=ReplyCache(path), **kwargs
        )
    answered = len(path.read_text().splitlines())
    assert 1 <= answered <= 4
    # simulate a crash in the middle of writing one more line
    with open(path, "a", encoding="utf-8") as fh:
        fh.write('{"key": "abc", "rep')
    del stub.plans["BROKEN"]  # the server recovers
    before = Counter(stub.attempts)
    cache = ReplyCache(path)
    assert cache.bad_lines == 1 and len(cache) == answered
    result = evaluate_prompting(queries, train, backend(stub), cache=cache, **kwargs)
    new_requests = sum((stub.attempts - before).values())
    assert new_requests == 5 - answered
    assert result["requests"]["from_cache"] == answered
    assert all(n == 1 for p, n in stub.attempts.items() if "BROKEN" not in p)  # nothing asked twice
    assert result["metrics"]["invalid"] == 0
    # the torn line did not swallow the entries appended after it
    assert len(ReplyCache(path)) == 5


def test_cli_openai_backend_end_to_end(stub, tmp_path, capsys):
    train, val = tmp_path / "train.csv", tmp_path / "val.csv"
    for path, n in ((train, 3), (val, 4)):
        with open(path, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["sentence1", "sentence2", "condition", "label"])
            for i in range(n):
                w.writerow([f"sentence {i} {path.stem}", f"other {i}", "the color", 5])
                w.writerow([f"sentence {i} {path.stem}", f"other {i}", "the size", 1 + i % 3])
    out = tmp_path / "r.json"
    argv = ["prompt-eval", "--backend", "openai", "--model", "stub-model", "--base-url", stub.base_url]
    argv += ["--k-shot", "2", "--instructions", "short", "--task", "csts", "--concurrency", "2"]
    argv += ["--eval-file", str(val), "--train-file", str(train), "--output", str(out)]
    assert main(argv) == 0
    result = json.loads(out.read_text())
    assert result["backend"]["backend"] == "openai" and result["backend"]["base_url"] == stub.base_url
    assert result["data"]["train_is_eval_file"] is False
    assert result["metrics"]["n"] == 8 and result["metrics"]["invalid"] == 0
    assert result["requests"]["generated"] == 8
    sent = len(stub.bodies)
    assert main(argv) == 0  # rerun: everything from the cache
    assert len(stub.bodies) == sent
    assert json.loads(out.read_text())["requests"]["from_cache"] == 8
    assert Path(str(out).replace(".json", ".replies.jsonl")).exists()
    assert main([*argv, "--cache-namespace", "weights-v2"]) == 0  # other weights under the same name: asked anew
    assert len(stub.bodies) == sent + 8
    assert json.loads(out.read_text())["requests"]["cache_namespace"] == "weights-v2"
    capsys.readouterr()


def test_cli_warns_when_demonstrations_come_from_the_evaluated_file(stub, tmp_path, capsys, caplog):
    val = tmp_path / "val.csv"
    with open(val, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["sentence1", "sentence2", "condition", "label"])
        for i in range(3):
            w.writerow([f"sentence {i}", f"other {i}", "the color", 5])
            w.writerow([f"sentence {i}", f"other {i}", "the size", 1 + i % 3])
    out = tmp_path / "r.json"
    argv = ["prompt-eval", "--backend", "openai", "--model", "stub-model", "--base-url", stub.base_url]
    argv += ["--k-shot", "2", "--instructions", "none", "--task", "csts", "--no-cache"]
    argv += ["--eval-file", str(val), "--train-file", str(tmp_path / "." / "val.csv"), "--output", str(out)]
    with caplog.at_level(logging.WARNING, logger="finesim.prompting"):
        assert main(argv) == 0
    assert "the demonstrations come from the evaluated file" in caplog.text
    result = json.loads(out.read_text())
    assert result["data"]["train_is_eval_file"] is True
    assert result["demonstrations"]["own_pair_excluded"]["queries"] == 6
    for body in stub.bodies:
        lines = body["messages"][-1]["content"].split("\n")
        query_s1 = lines[-1].split(" Sentence 2:")[0]
        assert all(query_s1 + " " not in line for line in lines[:-1])
    capsys.readouterr()


def test_cli_default_data_paths_stsb(stub, shared_data, tmp_path, capsys):
    argv = ["prompt-eval", "--backend", "openai", "--model", "stub-model", "--base-url", stub.base_url]
    argv += ["--task", "stsb", "--k-shot", "2", "--instructions", "none", "--data", str(shared_data)]
    argv += ["--limit", "6", "--no-cache", "--output", str(tmp_path / "r.json")]
    assert main(argv) == 0
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["data"]["eval_file"].endswith("sts-dev.csv")
    assert result["data"]["train_file"].endswith("sts-train.csv")
    assert result["metrics"]["n"] == 6 and result["label_range"] == [0.0, 5.0]
    assert result["cache"]["path"] is None
    assert not (tmp_path / "r.replies.jsonl").exists()
    assert all("Condition" not in body["messages"][-1]["content"] for body in stub.bodies)
    capsys.readouterr()


def test_cli_csts_test_split_needs_a_file(stub, shared_data):
    argv = ["prompt-eval", "--backend", "openai", "--model", "m", "--base-url", stub.base_url]
    argv += ["--task", "csts", "--split", "test", "--data", str(shared_data)]
    assert main(argv) == 1  # a clear error, no request sent
    assert stub.bodies == []
