"""A real ``finesim serve`` process on 127.0.0.1: health, auth, 413 before the body arrives, and SIGTERM during a
request in flight (the request is answered, new connections are refused, the process exits 0)."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from serving_support import S1, S2, C, saved_models, time_limit  # noqa: F401

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")

KEY_VAR = "FINESIM_TEST_SERVE_KEY"
KEY = "process-test-key-1234"
SLOW_S = 3.0

# The CLI as ``finesim`` runs it, with one test hook: a text containing "slowdown" makes the model take SLOW_S
# seconds, so that a request is certainly in flight when SIGTERM arrives.
LAUNCHER = f"""
import sys, time
from finesim.evaluation import scoring
original = scoring.ConditionalScorer.embed
def embed(self, sentences, conditions=None):
    if any("slowdown" in s for s in sentences):
        time.sleep({SLOW_S})
    return original(self, sentences, conditions)
scoring.ConditionalScorer.embed = embed
from finesim.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def _lines(stream, out: queue.Queue) -> None:
    for line in iter(stream.readline, ""):
        out.put(line)
    out.put(None)


def _port(lines: queue.Queue, seen: list[str], timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            break
        if line is None:
            break
        seen.append(line)
        found = re.search(r"on http://127\.0\.0\.1:(\d+)", line)
        if found:
            return int(found.group(1))
    raise AssertionError("the server did not announce its address:\n" + "".join(seen))


def test_real_server_process_answers_and_stops_gracefully_on_sigterm(saved_models, tmp_path: Path) -> None:  # noqa: F811
    launcher = tmp_path / "launch.py"
    launcher.write_text(LAUNCHER, encoding="utf-8")
    env = {**os.environ, KEY_VAR: KEY, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    command = [sys.executable, str(launcher), "serve", "--model", str(saved_models["bi"]), "--host", "127.0.0.1"]
    command += ["--port", "0", "--api-key-env", KEY_VAR, "--max-request-bytes", "4096", "--batch-wait-ms", "2"]
    command += ["--max-batch-inputs", "1"]  # one pair per micro-batch: a request of 4 pairs is scored in 4 pieces
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: queue.Queue = queue.Queue()
    seen: list[str] = []
    threading.Thread(target=_lines, args=(proc.stdout, lines), daemon=True).start()
    try:
        port = _port(lines, seen, timeout=90)
        base = f"http://127.0.0.1:{port}"
        auth = {"Authorization": f"Bearer {KEY}"}
        with httpx.Client(base_url=base, timeout=30) as client:
            deadline = time.monotonic() + 90
            while True:
                try:
                    if client.get("/health").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "the model did not load in time"
                time.sleep(0.1)
            body = {"sentence1": S1, "sentence2": S2, "condition": C}
            assert client.post("/similarity", json=body).status_code == 401
            scored = client.post("/similarity", json=body, headers=auth)
            assert scored.status_code == 200 and len(scored.json()["scores"]) == len(S1)
            assert client.get("/info").json()["encoder"] == "bi"

            # 413 from the header alone: the 100 MB body is never sent, the answer comes at once
            with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
                raw.sendall(
                    b"POST /similarity HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    + f"Authorization: Bearer {KEY}\r\nContent-Length: 100000000\r\n\r\n".encode()
                )
                answer = b""
                while chunk := raw.recv(4096):  # the server closes the connection after its answer
                    answer += chunk
            text = answer.decode("latin-1")
            assert text.startswith("HTTP/1.1 413") and '"error_type":"PayloadTooLarge"' in text, text
            streamed = client.post("/similarity", content=iter([b"[" * 3000, b"[" * 3000]), headers=auth)
            assert streamed.status_code == 413 and streamed.json()["error_type"] == "PayloadTooLarge"

            # a client that closes the connection mid-body: counted as 499 (client closed request), no 5xx
            with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
                raw.sendall(
                    b"POST /similarity HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    + f"Authorization: Bearer {KEY}\r\nContent-Length: 1000\r\n\r\n".encode()
                    + b'{"sentence1": ["a'
                )
            closed = 'finesim_requests_total{endpoint="/similarity",status="499"} 1.0'
            deadline = time.monotonic() + 30
            while closed not in (exposition := client.get("/metrics").text):
                assert time.monotonic() < deadline, exposition
                time.sleep(0.05)
            assert 'endpoint="/similarity",status="5' not in exposition, exposition

            # a client that disconnects while its request is being scored: the handler is cancelled (uvicorn does not
            # cancel it), the request counts as 499 at once, and its pieces not yet scored are dropped
            calls = re.compile(r"^finesim_model_calls_total ([0-9.e+]+)$", re.M)
            before = float(calls.search(client.get("/metrics").text).group(1))  # type: ignore[union-attr]
            body_bytes = json.dumps({"sentence1": ["slowdown " + s for s in S1[:4]], "sentence2": S2[:4],
                                     "condition": C}).encode()  # fmt: skip
            with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
                raw.sendall(
                    b"POST /similarity HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    + f"Authorization: Bearer {KEY}\r\nContent-Length: {len(body_bytes)}\r\n\r\n".encode()
                    + body_bytes
                )
                deadline = time.monotonic() + 30
                while "finesim_requests_in_flight 1.0" not in client.get("/metrics").text:
                    assert time.monotonic() < deadline, "the request never arrived"
                    time.sleep(0.02)
                time.sleep(0.3)  # its first piece is in the model (SLOW_S seconds)
            left = time.monotonic()
            closed = 'finesim_requests_total{endpoint="/similarity",status="499"} 2.0'
            while closed not in (exposition := client.get("/metrics").text):
                assert time.monotonic() < left + SLOW_S, exposition  # at once, not after its 4 pieces (4 x SLOW_S)
                time.sleep(0.05)
            time.sleep(SLOW_S + 1)  # the piece in the model when the client left ends; no other starts
            after = float(calls.search(client.get("/metrics").text).group(1))  # type: ignore[union-attr]
            assert after - before <= 1, (before, after)

            # SIGTERM while a request is in flight: it is still answered, then the process exits 0
            result: dict[str, object] = {}

            def slow() -> None:
                slow_body = {"sentence1": ["slowdown now"], "sentence2": ["a dog"], "condition": "the animal"}
                response = httpx.post(f"{base}/similarity", json=slow_body, headers=auth, timeout=60)
                result["status"], result["body"] = response.status_code, response.json()

            worker = threading.Thread(target=slow, daemon=True)
            worker.start()
            deadline = time.monotonic() + 30
            while "finesim_requests_in_flight 1.0" not in client.get("/metrics").text:
                assert time.monotonic() < deadline, "the slow request never arrived"
                time.sleep(0.02)
            sent = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            time.sleep(0.5)
            with pytest.raises(httpx.TransportError):  # no longer accepting connections
                httpx.get(f"{base}/health", timeout=2)
            worker.join(60)
            assert result.get("status") == 200, result
            assert len(result["body"]["scores"]) == 1  # type: ignore[index]
            assert time.monotonic() - sent < SLOW_S + 10
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    while (line := lines.get(timeout=10)) is not None:
        seen.append(line)
    output = "".join(seen)
    assert "model ready" in output, output
    assert KEY not in output


@contextlib.contextmanager
def _two_workers(model: Path) -> Iterator[tuple[subprocess.Popen, int, list[str]]]:
    """``finesim serve --workers 2 --threads 1`` of ``model`` on a free port: the supervisor's process, the port and
    the lines it printed up to the address; the supervisor and its workers are killed (their process group) after."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    command = [sys.executable, "-m", "finesim.cli.main", "serve", "--model", str(model), "--port", "0"]
    command += ["--workers", "2", "--threads", "1"]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)  # fmt: skip
    lines: queue.Queue = queue.Queue()
    seen: list[str] = []
    threading.Thread(target=_lines, args=(proc.stdout, lines), daemon=True).start()
    try:
        yield proc, _port(lines, seen, timeout=90), seen
    finally:  # the supervisor and its workers: a killed supervisor would leave the workers running
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _both_worker_pids(port: int, on_ready: Callable[[Any, dict], None] = lambda client, info: None) -> set[int]:
    """The pids of the workers that answered ``/info`` ready, a new connection each time (either worker answers),
    until both have (at most 120 s); ``on_ready(client, info)`` runs for each ready answer."""
    pids: set[int] = set()
    deadline = time.monotonic() + 120
    while len(pids) < 2 and time.monotonic() < deadline:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            try:
                info = client.get("/info").json()
            except httpx.TransportError:  # the workers are still starting
                info = {"status": "starting"}
            if info["status"] != "ready":
                time.sleep(0.5)
                continue
            on_ready(client, info)
            pids.add(info["worker_pid"])
    return pids


@pytest.mark.slow
def test_two_worker_processes_share_the_port_and_stop_on_sigterm(saved_models, tmp_path: Path) -> None:  # noqa: F811
    """``--workers 2``: two processes answer on one port (each connection goes to one of them), both score as the
    Python API does, and SIGTERM stops the supervisor and its workers with exit status 0."""
    from finesim import ConditionalScorer

    body = {"sentence1": S1, "sentence2": S2, "condition": C}
    expected = ConditionalScorer(str(saved_models["bi"])).score(S1, S2, C)

    def scores_as_the_api(client: Any, info: dict) -> None:
        answer = client.post("/similarity", json=body)
        assert answer.status_code == 200, answer.text
        np.testing.assert_allclose(answer.json()["scores"], expected, atol=1e-5)
        assert info["workers"] == 2

    with _two_workers(saved_models["bi"]) as (proc, port, seen):
        assert "with 2 worker processes (1 torch thread(s) each)" in "".join(seen)
        pids = _both_worker_pids(port, scores_as_the_api)
        assert len(pids) == 2, f"one worker answered every connection: {pids}"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, exited and not yet reaped by whoever adopted it, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z"


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the workers follow their supervisor on Linux")
def test_workers_stop_when_their_supervisor_is_killed(saved_models, tmp_path: Path) -> None:  # noqa: F811
    """SIGKILL of the ``--workers 2`` supervisor (no graceful stop possible): its workers stop too, instead of serving
    the port on as orphans, so that a new server can take it."""
    with _two_workers(saved_models["bi"]) as (proc, port, _):
        pids = _both_worker_pids(port)
        assert len(pids) == 2, f"both workers did not answer: {pids}"
        proc.kill()
        proc.wait(timeout=30)
        deadline = time.monotonic() + 60
        while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(_alive(pid) for pid in pids), "a worker outlived its killed supervisor"


@pytest.mark.slow
def test_a_worker_that_cannot_load_the_model_stops_the_server(tmp_path: Path) -> None:
    """``--workers 2`` with a model that cannot load: the workers fail their start-up, the supervisor stops, and the
    command exits 1 naming the model (it does not serve 503 forever)."""
    missing = tmp_path / "no-such-model"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    command = [sys.executable, "-m", "finesim.cli.main", "serve", "--model", str(missing), "--port", "0"]
    done = subprocess.run([*command, "--workers", "2", "--threads", "1"], env=env, capture_output=True, text=True,
                          timeout=180)  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"could not serve {missing}: a worker failed to start" in done.stderr
