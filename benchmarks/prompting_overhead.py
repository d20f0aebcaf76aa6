"""Prompting baseline machinery on the real data, without a real LLM (none is reachable here).

Measures (1) prompt lengths for every task x instructions x k-shot setting (characters, whitespace words
and WordPiece tokens of the all-MiniLM-L6-v2 tokenizer as a rough token proxy), which tells which settings
exceed a 512-token encoder limit; and (2) the end-to-end cost of ``finesim prompt-eval`` against a local stub
OpenAI-compatible server on the full C-STS validation split: first run, then the resumed run answered from the
reply cache (which must send no request).

    flock /tmp/finesim-cpu.lock python benchmarks/prompting_overhead.py
"""

from __future__ import annotations

import json
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import torch

from finesim.cli.main import main as finesim_main
from finesim.data import read_csts, read_stsb
from finesim.models.hub import resolve_model_path
from finesim.paths import data_root
from finesim.prompting import DemonstrationSampler, Example, build_prompt, instruction_text
from finesim.results import environment_record, file_sha256, path_roots, portable, write_json_atomic

OUT = Path(__file__).parent / "results" / "prompting_overhead.json"


def length_stats(prompts: list[str], tokenizer) -> dict[str, float]:
    tokens = [len(ids) for ids in tokenizer(prompts, add_special_tokens=False)["input_ids"]]
    words = [len(p.split()) for p in prompts]
    return {
        "chars_mean": float(np.mean([len(p) for p in prompts])),
        "words_mean": float(np.mean(words)),
        "words_max": int(np.max(words)),
        "wordpiece_tokens_mean": float(np.mean(tokens)),
        "wordpiece_tokens_p95": float(np.percentile(tokens, 95)),
        "wordpiece_tokens_max": int(np.max(tokens)),
        "share_over_512_tokens": float(np.mean(np.array(tokens) > 512)),
    }


def prompt_lengths(root: Path, tokenizer) -> dict[str, dict]:
    files = {
        "csts": (read_csts, root / "csts" / "validation.csv", root / "csts" / "train.csv"),
        "stsb": (
            read_stsb,
            root / "sts" / "STSBenchmark" / "sts-dev.csv",
            root / "sts" / "STSBenchmark" / "sts-train.csv",
        ),
    }
    out: dict[str, dict] = {}
    for task, (reader, eval_file, train_file) in files.items():
        queries = reader(eval_file)[0].to_dict()
        train = reader(train_file)[0]
        conditions = queries["condition"] if task == "csts" else [None] * len(queries["sentence1"])
        for k in (0, 2, 4):
            t0 = time.perf_counter()
            sampler = DemonstrationSampler(train, task=task, k=k, seed=42)
            demos = [sampler.draw() for _ in conditions]
            setup = time.perf_counter() - t0
            for name in ("none", "short", "long"):
                instruction = instruction_text(task, name)
                prompts = [
                    build_prompt(Example(s1, s2, c), d, instruction=instruction)
                    for s1, s2, c, d in zip(queries["sentence1"], queries["sentence2"], conditions, demos)
                ]
                out[f"{task}/k{k}/{name}"] = {"prompts": len(prompts), **length_stats(prompts, tokenizer)}
            out[f"{task}/k{k}/sampler_setup_seconds"] = round(setup, 2)
            print(task, k, "done", flush=True)
    return out


class _Handler(BaseHTTPRequestHandler):
    count = 0
    lock = threading.Lock()

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with _Handler.lock:
            _Handler.count += 1
        prompt = body["messages"][-1]["content"]
        data = json.dumps({"choices": [{"message": {"content": f"{len(prompt) % 5 + 1}.0"}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def stub_run(root: Path) -> dict:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run.json"
        argv = ["prompt-eval", "--backend", "openai", "--model", "stub", "--base-url", url, "--task", "csts"]
        argv += ["--k-shot", "4", "--instructions", "long", "--data", str(root), "--concurrency", "8"]
        argv += ["--output", str(out)]
        for attempt in ("first run", "resumed run"):
            before = _Handler.count
            t0 = time.perf_counter()
            assert finesim_main(argv) == 0
            result = json.loads(out.read_text())
            runs.append(
                {
                    "run": attempt,
                    "wall_seconds": round(time.perf_counter() - t0, 2),
                    "requests_sent": _Handler.count - before,
                    "requests": result["requests"],
                    "rows": result["metrics"]["n"],
                }
            )
    server.shutdown()
    return {"setting": "csts validation, k=4, long, stub server, concurrency 8", "runs": runs}


def main() -> int:
    torch.set_num_threads(2)
    from transformers import AutoTokenizer

    root = data_root()
    tokenizer = AutoTokenizer.from_pretrained(str(resolve_model_path("sentence-transformers/all-MiniLM-L6-v2")))
    payload = {
        "benchmark": "prompting_overhead",
        "what": __doc__.strip().split("\n\n")[0],
        "token_proxy": "all-MiniLM-L6-v2 WordPiece (uncased BERT vocabulary); T5/Llama tokenizers differ",
        "data": {
            "csts_validation_sha256": file_sha256(root / "csts" / "validation.csv"),
            "stsb_dev_sha256": file_sha256(root / "sts" / "STSBenchmark" / "sts-dev.csv"),
        },
        "prompt_lengths": prompt_lengths(root, tokenizer),
        "stub_server": stub_run(root),
        "environment": environment_record(),
    }
    write_json_atomic(OUT, portable(payload, path_roots(root)))
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
