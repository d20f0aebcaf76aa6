"""``finesim index build|add|search|info`` end to end on tiny models, and its errors (one line naming the file)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from index_helpers import assert_matches_brute_force, build_model_dirs, make_corpus

from conftest import import_or_skip
from finesim.cli.main import main


@pytest.fixture(scope="module")
def model_dirs(tiny_bert_dir, tmp_path_factory) -> dict[str, Path]:
    return build_model_dirs(tiny_bert_dir, tmp_path_factory)


def write_csv(path: Path, texts: list[str], column: str = "text") -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", column])
        writer.writerows([i, t] for i, t in enumerate(texts))
    return path


def write_jsonl(path: Path, texts: list[str], column: str = "text") -> Path:
    path.write_text("".join(json.dumps({column: t, "n": i}) + "\n" for i, t in enumerate(texts)), encoding="utf-8")
    return path


def search_json(capsys, *argv: str) -> list[dict]:
    capsys.readouterr()
    assert main(["index", "search", *argv, "--json", "-q"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("name", ["tri-hadamard", "tri-concat"])
def test_build_search_add_info(name, model_dirs, tmp_path, capsys):
    texts = make_corpus(80, seed=11)
    out = tmp_path / "index"
    corpus = write_csv(tmp_path / "corpus.csv", texts[:50])
    assert main(["index", "build", "--model", str(model_dirs[name]), "--corpus", str(corpus), "-o", str(out)]) == 0
    assert "indexed 50 texts with a tri-encoder" in capsys.readouterr().err
    results = search_json(capsys, str(out), "--query", "a man plays guitar", "--condition", "the sport", "-k", "6")
    assert_matches_brute_force(results, model_dirs[name], "a man plays guitar", texts[:50], "the sport", 6)

    more = write_jsonl(tmp_path / "more.jsonl", texts[50:])
    assert main(["index", "add", str(out), "--corpus", str(more), "-q"]) == 0
    results = search_json(capsys, str(out), "--query", "a dog", "--condition", "the animal", "-k", "8")
    assert_matches_brute_force(results, model_dirs[name], "a dog", texts, "the animal", 8)
    assert any(r["index"] >= 50 for r in search_json(capsys, str(out), "--query", "x", "--condition", "y", "-k", "80"))

    assert main(["index", "search", str(out), "--query", "a dog", "--condition", "the animal", "-k", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and lines[0].strip().startswith("1  ")

    assert main(["index", "info", str(out), "--verify"]) == 0
    text = capsys.readouterr().out
    assert "80 x 32 float32 in 2 part(s)" in text and "corpus.csv (50 rows" in text and "more.jsonl (30 rows" in text
    assert "verified" in text
    assert main(["index", "info", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["count"] == 80 and [c["rows"] for c in info["corpus"]] == [50, 30]
    assert len(info["corpus"][0]["sha256"]) == 64 and info["encoder"]["type"] == "tri"
    # a recorded path that names nothing here now (a moved corpus file) is said to be gone; the others are not
    corpus.rename(tmp_path / "elsewhere.csv")
    assert main(["index", "info", str(out)]) == 0
    text = capsys.readouterr().out
    assert "corpus.csv (not found here) (50 rows" in text and "more.jsonl (30 rows" in text
    assert "(not found here)" not in next(line for line in text.splitlines() if line.startswith("model "))


def test_bi_encoder_conditions_file_and_approximate(model_dirs, tmp_path, capsys):
    import_or_skip("faiss")
    texts = make_corpus(300, seed=12)
    conditions = tmp_path / "conditions.txt"
    conditions.write_text("the sport\n\nthe animal\nthe sport\n", encoding="utf-8")
    out = tmp_path / "index"
    argv = ["index", "build", "--model", str(model_dirs["bi"]), "--corpus", str(write_csv(tmp_path / "c.csv", texts))]
    assert main([*argv, "-o", str(out), "--conditions", str(conditions), "--approximate", "hnsw", "-q"]) == 0
    assert main(["index", "info", str(out)]) == 0
    text = capsys.readouterr().out
    assert "condition  'the sport' (1/1 parts embedded)" in text and "'the animal'" in text and "hnsw" in text
    capsys.readouterr()
    code = main(
        ["index", "search", str(out), "--query", "a dog", "--condition", "the sport", "--approximate", "--recall"]
    )
    assert code == 0
    captured = capsys.readouterr()
    assert "recall@10 of hnsw against exact search:" in captured.err and len(captured.out.splitlines()) == 10
    exact = search_json(capsys, str(out), "--query", "a dog", "--condition", "the sport")
    assert_matches_brute_force(exact, model_dirs["bi"], "a dog", texts, "the sport", 10)


def test_bi_encoder_two_stage_search_on_the_command_line(model_dirs, tmp_path, capsys):
    texts = make_corpus(60, seed=13)
    out = tmp_path / "index"
    argv = ["index", "build", "--model", str(model_dirs["bi"]), "--corpus", str(write_csv(tmp_path / "c.csv", texts))]
    assert main([*argv, "-o", str(out), "-q"]) == 0
    found = search_json(capsys, str(out), "--query", "a dog", "--condition", "the sport", "--candidates", "60")
    assert_matches_brute_force(found, model_dirs["bi"], "a dog", texts, "the sport", 10)
    assert main(["index", "info", str(out)]) == 0
    shown = capsys.readouterr().out.splitlines()  # two-stage: nothing embedded for the condition on disk
    assert not any(line.startswith("condition") for line in shown) and "1st stage  self (query conditioned" in shown[-2]
    code = main(["index", "search", str(out), "--query", "a dog", "--condition", "the sport", "--strategy",
                 "two-stage", "--candidates", "12", "--recall", "-k", "5"])  # fmt: skip
    assert code == 0 and "recall@5 of two-stage search against exact search:" in capsys.readouterr().err
    assert main([*argv, "-o", str(tmp_path / "plain"), "-q", "--first-stage", "none"]) == 0
    assert main(["index", "search", str(tmp_path / "plain"), "--query", "a", "--condition", "b", "--strategy",
                 "two-stage"]) == 1  # fmt: skip
    assert "has no first stage" in capsys.readouterr().err


def test_the_mapped_first_stage_on_the_command_line(model_dirs, tmp_path, capsys):
    texts = make_corpus(60, seed=17)
    out = tmp_path / "index"
    argv = ["index", "build", "--model", str(model_dirs["bi"]), "--corpus", str(write_csv(tmp_path / "c.csv", texts))]
    assert main([*argv, "-o", str(out), "-q", "--first-stage-query", "mapped"]) == 0
    assert main(["index", "info", str(out)]) == 0
    assert "1st stage  self (query mapped" in capsys.readouterr().out
    search = [str(out), "--query", "a dog", "--condition", "the sport"]
    found = search_json(capsys, *search, "--candidates", "60", "--map-sample", "20", "--map-ridge", "0.5")
    assert_matches_brute_force(found, model_dirs["bi"], "a dog", texts, "the sport", 10)  # every candidate re-ranked
    # with few candidates the options decide them: the command line searches as the API with the same options
    from finesim import ConditionalIndex

    index = ConditionalIndex.open(out)
    rows = {}
    for sample, ridge in ((20, 0.5), (2048, 0.1)):
        index.map_sample, index.map_ridge = sample, ridge
        rows[sample] = index.search_rows("a dog", "the sport", k=6, candidates=6, strategy="two-stage")[0].tolist()
    assert rows[20] != rows[2048]  # the options matter here, so the comparison below can fail
    found = search_json(capsys, *search, "-k", "6", "--candidates", "6", "--map-sample", "20", "--map-ridge", "0.5")
    assert [r["index"] for r in found] == rows[20]
    with pytest.raises(SystemExit) as exit_info:  # argparse: not a positive number
        main(["index", "search", *search, "--map-sample", "0"])
    assert exit_info.value.code == 2 and "--map-sample" in capsys.readouterr().err
    # the options of a mapped first stage on an index without one: refused, saying why
    assert main([*argv, "-o", str(tmp_path / "conditioned"), "-q"]) == 0
    with pytest.raises(SystemExit) as exit_info:
        main(["index", "search", str(tmp_path / "conditioned"), *search[1:], "--map-sample", "20"])
    assert exit_info.value.code == 2 and "this index's first stage query is conditioned" in capsys.readouterr().err
    # a new condition's fit shows a progress bar over its sample (totals included); the next search reads the kept map
    weather = ["index", "search", str(out), "--query", "a cat", "--condition", "the weather", "--map-sample", "20"]
    capsys.readouterr()
    assert main(weather) == 0
    assert "map for condition 'the weather'" in (err := capsys.readouterr().err) and "20/20" in err
    assert main(weather) == 0 and "map for condition" not in capsys.readouterr().err
    colour = ["index", "search", str(out), "--query", "a", "--condition", "the colour", "--map-sample", "20"]
    assert main([*colour, "-q"]) == 0 and "map for condition" not in capsys.readouterr().err  # -q: no bar


def test_rerank_depth_on_the_command_line(model_dirs, tmp_path, capsys):
    """``--rerank-depth`` searches as the API with the same depth, ``all`` as without it; a bad value is a usage
    error that says what is expected."""
    from finesim import ConditionalIndex
    from finesim.index.rerank_depth import RerankDepth

    texts = make_corpus(60, seed=19)
    out = tmp_path / "index"
    argv = ["index", "build", "--model", str(model_dirs["bi"]), "--corpus", str(write_csv(tmp_path / "c.csv", texts))]
    assert main([*argv, "-o", str(out), "-q"]) == 0
    search = [str(out), "--query", "a dog", "--condition", "the sport", "-k", "3", "--candidates", "40"]
    index = ConditionalIndex.open(out)
    index.rerank_depth = RerankDepth(1, 1, 1)
    shallow = index.search_rows("a dog", "the sport", k=3, candidates=40, strategy="two-stage")[0].tolist()
    index.rerank_depth = None
    everything = index.search_rows("a dog", "the sport", k=3, candidates=40, strategy="two-stage")[0].tolist()
    assert shallow != everything  # the depth matters here, so the comparisons below can fail
    assert [r["index"] for r in search_json(capsys, *search, "--rerank-depth", "1,1,1")] == shallow
    assert [r["index"] for r in search_json(capsys, *search, "--rerank-depth", "all")] == everything
    with pytest.raises(SystemExit) as exit_info:
        main(["index", "search", *search, "--rerank-depth", "25,25"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "expected 'all' or three whole numbers FIRST,STEP,PATIENCE" in err
    assert main([*argv, "-o", str(tmp_path / "plain"), "-q", "--first-stage", "none"]) == 0
    with pytest.raises(SystemExit) as exit_info:  # no first stage: an exact search, nothing to re-rank
        main(["index", "search", str(tmp_path / "plain"), *search[1:], "--rerank-depth", "1,1,1"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "this index has no first stage (it searches exactly)" in err


def test_rerank_feedback_on_the_command_line(model_dirs, tmp_path, capsys):
    """``--rerank-feedback`` searches as the API with the same setting (``local-map`` is the default, ``none`` the
    first stage's top N); a bad value, or an index whose first stage is not ``self``, is a usage error saying why."""
    from finesim import ConditionalIndex

    texts = make_corpus(80, seed=23)
    out = tmp_path / "index"
    argv = ["index", "build", "--model", str(model_dirs["bi"]), "--corpus", str(write_csv(tmp_path / "c.csv", texts))]
    assert main([*argv, "-o", str(out), "-q"]) == 0
    search = [str(out), "--query", "a red car", "--condition", "color", "-k", "3", "--candidates", "8"]
    index = ConditionalIndex.open(out)
    steered = index.search_rows("a red car", "color", k=3, candidates=8, strategy="two-stage")[0].tolist()
    index.rerank_feedback = None
    top_n = index.search_rows("a red car", "color", k=3, candidates=8, strategy="two-stage")[0].tolist()
    assert steered != top_n  # feedback matters here, so the comparisons below can fail
    assert [r["index"] for r in search_json(capsys, *search)] == steered
    assert [r["index"] for r in search_json(capsys, *search, "--rerank-feedback", "local-map:4,0.1,10")] == steered
    assert [r["index"] for r in search_json(capsys, *search, "--rerank-feedback", "none")] == top_n
    with pytest.raises(SystemExit) as exit_info:
        main(["index", "search", *search, "--rerank-feedback", "local-map:4,0,10"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "RIDGE must be a finite number > 0, got 0.0" in err
    assert main([*argv, "-o", str(tmp_path / "plain"), "-q", "--first-stage", "none"]) == 0
    with pytest.raises(SystemExit) as exit_info:  # no first stage: nothing to steer
        main(["index", "search", str(tmp_path / "plain"), *search[1:], "--rerank-feedback", "local-map"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "this index's first stage is none (it searches exactly): drop it" in err
    assert main([*argv, "-o", str(tmp_path / "plain-query"), "-q", "--first-stage-query", "plain"]) == 0
    with pytest.raises(SystemExit) as exit_info:  # the plain query ranks in another space than the re-ranker's
        main(["index", "search", str(tmp_path / "plain-query"), *search[1:], "--rerank-feedback", "none"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "this index's first stage is self (query 'plain'): drop it" in err


def test_errors_are_one_line_naming_the_file(model_dirs, tmp_path, capsys):
    model = str(model_dirs["tri-hadamard"])
    wrong_column = write_csv(tmp_path / "c.csv", ["a dog", "a cat"], column="sentence")
    assert main(["index", "build", "--model", model, "--corpus", str(wrong_column), "-o", str(tmp_path / "a")]) == 1
    err = capsys.readouterr().err
    assert f"{wrong_column}, column 'text': no column 'text'; the columns are: 'id', 'sentence'" in err
    assert len(err.strip().splitlines()) == 1

    empty = write_csv(tmp_path / "empty.csv", [])
    assert main(["index", "build", "--model", model, "--corpus", str(empty), "-o", str(tmp_path / "b")]) == 1
    assert f"{empty}: no rows: the corpus is empty" in capsys.readouterr().err

    blank = write_jsonl(tmp_path / "blank.jsonl", ["a dog", "  "])
    assert main(["index", "build", "--model", model, "--corpus", str(blank), "-o", str(tmp_path / "c")]) == 1
    assert "blank.jsonl, row 2, column 'text': text is empty" in capsys.readouterr().err

    out = tmp_path / "index"
    corpus = write_csv(tmp_path / "ok.csv", ["a dog runs", "a cat sits", "the boy walks"])
    assert main(["index", "build", "--model", model, "--corpus", str(corpus), "-o", str(out), "-q"]) == 0
    assert main(["index", "build", "--model", model, "--corpus", str(corpus), "-o", str(out), "-q"]) == 1
    assert "already holds an index" in capsys.readouterr().err

    other = str(model_dirs["tri-hadamard-2"])
    search = ["index", "search", str(out), "--query", "a dog", "--condition", "the animal"]
    assert main([*search, "--model", other]) == 1
    err = capsys.readouterr().err
    assert "manifest.json: the index was built with" in err and "tri-hadamard-2" in err

    with pytest.raises(SystemExit) as exit_info:  # a usage error: the command's usage line, exit code 2
        main([*search, "--recall"])
    assert exit_info.value.code == 2
    assert "--recall compares approximate or two-stage with exact search" in capsys.readouterr().err

    array = next((out / "parts").glob("*/sentences.npy"))
    array.write_bytes(array.read_bytes()[:-4])
    assert main(search) == 1
    err = capsys.readouterr().err
    assert f"{array}: truncated" in err and len(err.strip().splitlines()) == 1
    assert main(["index", "info", str(out)]) == 1
    assert "truncated" in capsys.readouterr().err

    assert main(["index", "info", str(tmp_path / "nowhere")]) == 1
    assert "no such index folder" in capsys.readouterr().err


def write_rows(path: Path, rows: list[dict]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def test_ids_metadata_and_where(model_dirs, tmp_path, capsys):
    texts = make_corpus(40, seed=14)
    rows = [{"doc": f"d{i}", "text": t, "lang": ("en", "de")[i % 2], "src": "web"} for i, t in enumerate(texts)]
    out = tmp_path / "index"
    model = str(model_dirs["tri-hadamard"])
    build = ["index", "build", "--model", model, "--corpus", str(write_rows(tmp_path / "c.csv", rows[:30]))]
    assert main([*build, "-o", str(out), "--id-column", "doc", "--metadata-columns", "lang, src", "-q"]) == 0
    query = ["--query", "a dog", "--condition", "the animal"]
    results = search_json(capsys, str(out), *query, "-k", "30")
    assert [r["id"] for r in results] == [f"d{r['index']}" for r in results]
    assert results[0]["metadata"] == {"lang": rows[results[0]["index"]]["lang"], "src": "web"}
    german = search_json(capsys, str(out), *query, "-k", "30", "--where", "lang=de", "--where", "src=web")
    assert {r["index"] for r in german} == {i for i in range(30) if i % 2}
    # a space after '=' matched nothing, silently; a value no row has says so (the answer is still empty)
    assert search_json(capsys, str(out), *query, "-k", "30", "--where", " lang = de", "--where", "src=web") == german
    assert main(["index", "search", str(out), *query, "--where", "lang=es", "--json"]) == 0
    out_err = capsys.readouterr()
    assert json.loads(out_err.out) == [] and "no row matches --where lang='es' (values match exactly)" in out_err.err
    assert main(["index", "search", str(out), *query, "-k", "1"]) == 0
    assert f"[{results[0]['index']}] id=d{results[0]['index']}  " in capsys.readouterr().out

    # add: the ID and metadata columns default to the build's
    more = write_rows(tmp_path / "more.csv", rows[30:])
    assert main(["index", "add", str(out), "--corpus", str(more), "-q"]) == 0
    assert search_json(capsys, str(out), *query, "-k", "40", "--where", "lang=en")[0]["id"].startswith("d")
    clash = write_rows(tmp_path / "clash.csv", [{**rows[0], "text": "a new text", "doc": "d9"}])
    assert main(["index", "add", str(out), "--corpus", str(clash)]) == 1
    err = capsys.readouterr().err
    assert "clash.csv, row 1, column 'doc': ID 'd9' is already in the index (row 9)" in err

    # usage errors
    with pytest.raises(SystemExit):
        main(["index", "search", str(out), *query, "--where", "lang"])
    assert "--where 'lang': write KEY=VALUE" in capsys.readouterr().err
    assert main(["index", "search", str(out), *query, "--where", "lnag=de"]) == 1
    assert "no row has the metadata key 'lnag'" in capsys.readouterr().err
    assert main(["index", "info", str(out), "--no-progress"]) == 0
    assert "rows carry id and metadata (lang, src)" in capsys.readouterr().out


def test_adding_the_same_file_twice_adds_nothing(model_dirs, tmp_path, capsys):
    texts = make_corpus(30, seed=15)
    out = tmp_path / "index"
    model = str(model_dirs["tri-hadamard"])
    assert main(["index", "build", "--model", model, "--corpus", str(write_csv(tmp_path / "a.csv", texts[:20])),
                 "-o", str(out), "-q"]) == 0  # fmt: skip
    more = write_csv(tmp_path / "more.csv", texts[20:])
    assert main(["index", "add", str(out), "--corpus", str(more)]) == 0
    part = json.loads((out / "manifest.json").read_text())["parts"][1]["id"]
    capsys.readouterr()
    assert main(["index", "add", str(out), "--corpus", str(more)]) == 0
    assert f"more.csv is already in the index (part {part}, rows 20..29): nothing added" in capsys.readouterr().err
    copy = write_jsonl(tmp_path / "copy.jsonl", texts[20:])  # the same rows in another file
    assert main(["index", "add", str(out), "--corpus", str(copy)]) == 0
    assert f"these 10 texts are already in the index (part {part}, rows 20..29)" in capsys.readouterr().err
    assert main(["index", "info", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["count"] == 30


def test_damaged_vectors_are_an_error_naming_the_file(model_dirs, tmp_path, capsys):
    from index_helpers import overwrite_with_garbage

    texts = make_corpus(40, seed=16)
    conditions = tmp_path / "conditions.txt"
    conditions.write_text("the sport\n", encoding="utf-8")
    out = tmp_path / "index"
    argv = ["index", "build", "--model", str(model_dirs["bi"]), "--corpus", str(write_csv(tmp_path / "c.csv", texts))]
    assert main([*argv, "-o", str(out), "--conditions", str(conditions), "-q"]) == 0
    assert main(["index", "info", str(out), "--verify"]) == 0
    assert "verified   4 files match their recorded SHA-256" in capsys.readouterr().out
    (cached,) = (out / "conditions").glob("*/*.npy")
    overwrite_with_garbage(cached)
    assert main(["index", "search", str(out), "--query", "a dog", "--condition", "the sport", "--json"]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and f"{cached}: row 0 holds NaN or infinite values" in captured.err
    assert main(["index", "info", str(out), "--verify", "--no-progress"]) == 1
    assert f"{cached}: content differs from the SHA-256 recorded in" in capsys.readouterr().err


def test_a_tri_encoder_first_stage_on_the_command_line(model_dirs, tmp_path, capsys):
    """--first-stage PATH of a tri-encoder picks query mode 'tri' and says so; info shows it; with every row a
    candidate the two-stage search is exact; a bi-encoder folder with --first-stage-query tri is refused."""
    texts = make_corpus(60, seed=14)
    out, tri = tmp_path / "index", str(model_dirs["tri-hadamard"])
    argv = ["index", "build", "--model", str(model_dirs["bi"]), "--corpus", str(write_csv(tmp_path / "c.csv", texts))]
    capsys.readouterr()
    assert main([*argv, "-o", str(out), "--first-stage", tri]) == 0
    err = capsys.readouterr().err
    assert f"first stage: {tri} is a tri-encoder: its own top N under each condition are the candidates" in err
    found = search_json(capsys, str(out), "--query", "a dog", "--condition", "the sport", "--candidates", "60")
    assert_matches_brute_force(found, model_dirs["bi"], "a dog", texts, "the sport", 10)
    assert main(["index", "info", str(out)]) == 0
    assert f"1st stage  {tri} (tri-encoder, its top N, head hadamard; 32 dims, sha256 " in capsys.readouterr().out
    assert main(["index", "info", str(out), "--json"]) == 0
    stage = json.loads(capsys.readouterr().out)["first_stage"]
    assert stage["query"] == "tri" and stage["head"] == "hadamard" and stage["model"] == tri
    # the bi-encoder's own first stage is shown too
    assert main([*argv, "-o", str(tmp_path / "self"), "-q"]) == 0
    assert main(["index", "info", str(tmp_path / "self")]) == 0
    assert "1st stage  self (query conditioned; 32 dims)" in capsys.readouterr().out
    bi = str(model_dirs["bi"])
    code = main([*argv, "-o", str(tmp_path / "bad"), "--first-stage", bi, "--first-stage-query", "tri"])
    err = capsys.readouterr().err
    assert code == 1 and "first-stage query 'tri' needs a finesim tri-encoder folder" in err
    assert len(err.strip().splitlines()) == 1


def test_search_without_a_condition(model_dirs, tmp_path, capsys, monkeypatch):
    from finesim import ConditionalIndex

    texts = make_corpus(40, seed=16)
    rows = [{"doc": f"d{i}", "text": t, "lang": ("en", "de")[i % 2]} for i, t in enumerate(texts)]
    out = tmp_path / "index"
    corpus = str(write_rows(tmp_path / "c.csv", rows))
    build = ["index", "build", "--model", str(model_dirs["bi"]), "--corpus", corpus, "-q"]
    assert main([*build, "-o", str(out), "--id-column", "doc", "--metadata-columns", "lang"]) == 0
    index = ConditionalIndex.open(out)
    found = search_json(capsys, str(out), "--query", "a dog", "--no-condition", "-k", "5", "--where", "lang=de")
    assert found == index.search("a dog", None, k=5, where={"lang": "de"})
    assert len(found) == 5 and all(r["condition"] is None and r["metadata"] == {"lang": "de"} for r in found)
    assert [r["id"] for r in found] == [f"d{r['index']}" for r in found]

    assert main(["index", "search", str(out), "--query", "a dog", "--no-condition", "-k", "2"]) == 0
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 2 and captured.out.lstrip().startswith("1  ")
    assert "no condition: ranked by the model's similarity of the query and the texts alone" in captured.err

    # one of the two flags, never both
    for argv in (["--condition", "the sport", "--no-condition"], []):
        with pytest.raises(SystemExit) as exit_info:
            main(["index", "search", str(out), "--query", "a dog", *argv])
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert (
            "argument --no-condition: not allowed with argument --condition" in err
            if argv
            else "one of the arguments --condition --no-condition is required" in err
        )
    with pytest.raises(SystemExit):
        main(["index", "search", str(out), "--query", "a dog", "--no-condition", "--strategy", "two-stage"])
    assert "--no-condition ranks the stored embeddings of the texts alone: drop --strategy two-stage" in (
        capsys.readouterr().err
    )

    # an index that cannot search without a condition says why and what to do, before the model loads
    none = tmp_path / "no-first-stage"
    assert main([*build, "-o", str(none), "--first-stage", "none"]) == 0

    def no_model(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr("finesim.index.conditional_index.load_index_model", no_model)
    assert main(["index", "search", str(none), "--query", "a dog", "--no-condition"]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "this bi-encoder index stores no embeddings of the texts alone (built with first_stage=None" in err
    assert "build it again with first_stage='self'" in err


def test_a_split_of_a_saved_dataset_dict_is_indexed_and_added(model_dirs, tmp_path, capsys):
    """A save_to_disk folder of several splits (a corpus search.md lists) needs --split, which the error names;
    the split read is the one indexed, recorded in the manifest; --ray, which reads files only, refuses it."""
    from datasets import Dataset, DatasetDict

    texts = make_corpus(40, seed=12)
    folder = tmp_path / "dd"
    DatasetDict(
        {"train": Dataset.from_dict({"text": texts[:30]}), "test": Dataset.from_dict({"text": texts[30:]})}
    ).save_to_disk(str(folder))
    out = tmp_path / "index"
    base = ["index", "build", "--model", str(model_dirs["tri-hadamard"]), "--corpus", str(folder), "-o", str(out)]
    assert main(base) == 1
    wanted = "holds a DatasetDict with splits ['train', 'test']: choose one with split= (--split on the command line)"
    assert wanted in capsys.readouterr().err
    assert main([*base, "--split", "train", "-q"]) == 0
    assert main(["index", "add", str(out), "--corpus", str(folder), "--split", "test", "-q"]) == 0
    assert main(["index", "info", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert [(c["rows"], c["split"]) for c in info["corpus"]] == [(30, "train"), (10, "test")]
    results = search_json(capsys, str(out), "--query", "a dog", "--condition", "the animal", "-k", "5")
    assert_matches_brute_force(results, model_dirs["tri-hadamard"], "a dog", texts, "the animal", 5)
    with pytest.raises(SystemExit) as stop:
        main([*base[:-2], "-o", str(tmp_path / "ray"), "--split", "train", "--ray"])
    assert stop.value.code == 2
    assert "--split picks a split of a dataset folder, which --ray does not read" in capsys.readouterr().err


def test_candidates_for_a_search_that_is_exact_is_refused(model_dirs, tmp_path, capsys):
    """A tri-encoder index without --approximate searches exactly: --candidates would be ignored (it was, silently)."""
    out = tmp_path / "index"
    corpus = write_csv(tmp_path / "corpus.csv", make_corpus(30, seed=13))
    assert (
        main(["index", "build", "--model", str(model_dirs["tri-hadamard"]), "--corpus", str(corpus), "-o", str(out)])
        == 0
    )
    search = [str(out), "--query", "a dog", "--condition", "the animal", "-k", "3", "--candidates", "5"]
    with pytest.raises(SystemExit) as stop:
        main(["index", "search", *search])
    assert stop.value.code == 2
    assert (
        "--candidates sets how many candidates an approximate or two-stage search re-scores" in capsys.readouterr().err
    )
    assert len(search_json(capsys, *search, "--approximate")) == 3  # with faiss: the candidates it re-scores


def test_a_build_whose_model_cannot_load_leaves_no_folder(model_dirs, tmp_path, capsys):
    corpus = write_csv(tmp_path / "c.csv", ["a dog", "a cat"])
    out = tmp_path / "deep" / "index"
    argv = ["index", "build", "--model", str(model_dirs["bi"]), "--corpus", str(corpus), "-o", str(out)]
    missing = ["index", "build", "--model", str(tmp_path / "nowhere"), *argv[4:]]
    assert main(missing) == 1
    assert "nowhere" in capsys.readouterr().err
    assert not (tmp_path / "deep").exists()
    # a folder that cannot be made is still refused before the model loads (the command line checks it first too)
    from finesim import ConditionalIndex

    with pytest.raises(PermissionError, match=r"index: cannot make the index folder here \(.*c\.csv is not a writable"):
        ConditionalIndex.build(str(tmp_path / "nowhere"), ["a dog"], corpus / "index")
    assert main([*argv, "-q"]) == 0 and (out / "manifest.json").is_file()


def test_blank_lines_of_a_corpus_are_counted_and_said(model_dirs, tmp_path, capsys):
    """A blank line of a one-column corpus was skipped without a word, so the file's later texts came back with
    other row numbers than their lines suggest: it is counted, said, and recorded in the manifest."""
    corpus = tmp_path / "oc.csv"
    corpus.write_text("text\nA red shirt.\n\nA blue jumper.\nA red scarf.\n", encoding="utf-8")
    out = tmp_path / "index"
    assert (
        main(["index", "build", "--model", str(model_dirs["tri-hadamard"]), "--corpus", str(corpus), "-o", str(out)])
        == 0
    )
    err = capsys.readouterr().err
    assert "oc.csv: 1 blank line skipped (no record; result rows count the 3 records, not the file's lines)" in err
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["corpus"][0]["rows"] == 3 and manifest["corpus"][0]["blank_lines_skipped"] == 1
    assert main(["index", "add", str(out), "--corpus", str(corpus)]) == 0  # the same file again: found, not added
    assert "already" in capsys.readouterr().err and len(json.loads((out / "manifest.json").read_text())["corpus"]) == 1


def test_search_says_when_it_searched_in_two_stages(model_dirs, tmp_path, capsys):
    """The command line never said whether a search re-ranked a first stage's candidates (the server's header did)."""
    corpus = write_csv(tmp_path / "c.csv", make_corpus(30, seed=3))
    out = tmp_path / "index"
    assert (
        main(["index", "build", "--model", str(model_dirs["bi"]), "--corpus", str(corpus), "-o", str(out), "-q"]) == 0
    )
    query = ["index", "search", str(out), "--query", "a dog", "--condition", "the animal", "-k", "3"]
    capsys.readouterr()
    assert main(query) == 0
    assert "two-stage search: the conditioned first stage's candidates re-ranked under the condition" in (
        capsys.readouterr().err
    )
    assert main([*query, "--strategy", "exact"]) == 0
    assert "two-stage" not in capsys.readouterr().err


def test_an_empty_filtered_approximate_search_says_so_when_rows_match(model_dirs, tmp_path, capsys):
    """'no row matches --where' was said whenever a filtered search came back empty, also where rows match but an
    approximate search's candidates held none of them."""
    import_or_skip("faiss")
    from finesim import ConditionalIndex

    texts = make_corpus(60, seed=5)
    model = str(model_dirs["bi"])
    probe = ConditionalIndex.build(model, texts, tmp_path / "probe", conditions=["the sport"])
    far = probe.search("a dog", "the sport", k=60, strategy="exact")[-1]["index"]  # the row ranked last
    metadata = [{"lang": "de" if i == far else "en"} for i in range(len(texts))]
    out = tmp_path / "index"
    index = ConditionalIndex.build(model, texts, out, conditions=["the sport"], metadata=metadata, approximate="hnsw")
    assert index.count_where({"lang": "de"}) == 1 and index.count_where(None) == 60 and index.count_where({}) == 60
    search = ["index", "search", str(out), "--query", "a dog", "--condition", "the sport", "-k", "1", "--json"]
    capsys.readouterr()
    assert main([*search, "--approximate", "hnsw", "--candidates", "1", "--where", "lang=de"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out) == []  # the one matching row, ranked last, is not the one candidate
    assert "none of the 1 rows matching --where lang='de' was among the candidates" in captured.err
    assert "no row matches" not in captured.err
    assert main([*search, "--where", "lang=fr"]) == 0
    assert "no row matches --where lang='fr'" in capsys.readouterr().err


def test_add_takes_the_model_where_it_is_now(model_dirs, tmp_path, capsys, monkeypatch):
    """The error for a moved model folder said to pass --model, which index add did not take."""
    import shutil

    monkeypatch.chdir(tmp_path)
    shutil.copytree(model_dirs["tri-hadamard"], tmp_path / "mymodel")
    corpus = write_csv(tmp_path / "c.csv", make_corpus(12, seed=2))
    assert main(["index", "build", "--model", "mymodel", "--corpus", str(corpus), "-o", "idx", "-q"]) == 0
    shutil.move(tmp_path / "mymodel", tmp_path / "moved")
    more = write_csv(tmp_path / "more.csv", make_corpus(20, seed=9)[12:])
    assert main(["index", "add", "idx", "--corpus", str(more)]) == 1
    assert "which is gone" in capsys.readouterr().err
    assert main(["index", "add", "idx", "--corpus", str(more), "--model", "moved", "-q"]) == 0
    assert main(["index", "info", "idx", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["count"] == 20
