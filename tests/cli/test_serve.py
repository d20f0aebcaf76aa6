"""``finesim serve``: its options and defaults, the API key variable checked before anything starts, and a model
that cannot be loaded ending the server with one error line (exit 1)."""

from __future__ import annotations

import pytest

from finesim.cli.main import build_parser, main


def test_defaults() -> None:
    args = build_parser().parse_args(["serve", "--model", "minilm"])
    assert (args.host, args.port, args.encoder, args.api_key_env) == ("127.0.0.1", 8080, None, None)
    assert (args.max_batch_inputs, args.old_batch_size, args.batch_wait_ms, args.cache_size) == (None, None, 5, 10_000)
    from finesim.cli.serve import max_batch_inputs

    assert max_batch_inputs(args) == 64
    assert (args.max_batch_tokens, args.max_batch_requests) == (None, None)
    assert (args.max_request_bytes, args.max_items, args.max_concurrent, args.max_text_chars) == (
        1 << 20,
        256,
        64,
        4096,
    )


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--port", "70000"], "must be <= 65535"),
        (["--max-batch-inputs", "0"], "must be >= 1"),
        (["--batch-size", "0"], "must be >= 1"),
        (["--encoder", "quad"], "invalid choice"),
        (["--batch-wait-ms", "-1"], "must be >= 0"),
        (["--max-batch-tokens", "0"], "must be >= 1"),
        (["--max-batch-requests", "0"], "must be >= 1"),
    ],
)
def test_bad_options(argv, says, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--model", "minilm", *argv])
    assert exit_.value.code == 2 and says in capsys.readouterr().err


def test_unset_or_empty_api_key_variable_is_a_usage_error(monkeypatch, capsys) -> None:
    for value in (None, "  "):
        if value is None:
            monkeypatch.delenv("FINESIM_TEST_KEY", raising=False)
        else:
            monkeypatch.setenv("FINESIM_TEST_KEY", value)
        with pytest.raises(SystemExit) as exit_:
            main(["serve", "--model", "minilm", "--api-key-env", "FINESIM_TEST_KEY"])
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert "--api-key-env FINESIM_TEST_KEY: the environment variable is unset or empty" in err


def test_a_model_that_cannot_load_ends_the_server_with_one_line(tmp_path, capsys) -> None:
    pytest.importorskip("uvicorn")
    missing = tmp_path / "no-such-model"
    assert main(["serve", "--model", str(missing), "--port", "0", "--encoder", "tri"]) == 1
    err = capsys.readouterr().err
    assert f"finesim serve: error: could not load the model {missing}" in err
    assert "Traceback" not in err and "ERROR" not in err  # one line: no log record of the same failure before it


def test_a_port_in_use_is_one_error_line(capsys) -> None:
    import socket

    pytest.importorskip("uvicorn")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", "--model", "minilm", "--port", str(port)]) == 1
    err = capsys.readouterr().err
    # one line, with the reason uvicorn found (it logged it on a line of its own before)
    assert f"finesim serve: error: cannot listen on 127.0.0.1:{port}: [Errno " in err and "already in use" in err
    assert "ERROR" not in err


def test_the_token_budget_reaches_the_settings_and_the_help(monkeypatch, capsys) -> None:
    import finesim.serving.server as server

    given = {}
    monkeypatch.setattr(server, "serve", lambda settings, **kw: given.setdefault("settings", settings) and 0)
    main(
        [
            "serve",
            "--model",
            "minilm",
            "--max-batch-tokens",
            "16384",
            "--max-batch-inputs",
            "256",
            "--max-batch-requests",
            "1",
            "--inference-batch-size",
            "16",
        ]
    )
    settings = given["settings"]
    assert (settings.max_batch_tokens, settings.max_batch_inputs, settings.max_batch_requests) == (16384, 256, 1)
    assert settings.inference_batch_size == 16
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--max-batch-tokens N also bound a micro-batch by tokens" in help_text
    assert "a request larger than what is left is split over several batches" in help_text
    assert "--inference-batch-size N the model's forward batch inside one micro-batch" in help_text
    assert "--batch-size" not in help_text  # the old name is read, not offered


def test_settings_read_the_old_keyword_batch_size_with_a_warning() -> None:
    from finesim.serving import ServeSettings

    with pytest.warns(FutureWarning, match=r"ServeSettings\(batch_size=...\) is now max_batch_inputs"):
        settings = ServeSettings(model="m", batch_size=8)
    assert settings.max_batch_inputs == 8 and "batch_size" not in settings.describe()
    assert ServeSettings.from_environment(settings.to_environment()).max_batch_inputs == 8
    with pytest.raises(ValueError, match="batch_size 8 and max_batch_inputs 16: batch_size is max_batch_inputs's old"):
        ServeSettings(model="m", batch_size=8, max_batch_inputs=16)


def test_first_stage_needs_an_index_and_reaches_the_settings(monkeypatch, capsys) -> None:

    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--model", "minilm", "--first-stage", "elsewhere/tri"])
    assert exit_.value.code == 2 and "--first-stage needs --index" in capsys.readouterr().err
    from finesim.serving import ServeSettings

    assert ServeSettings(model="m", index="i", first_stage="elsewhere/tri").first_stage == "elsewhere/tri"


def test_the_old_name_batch_size_is_read_with_a_warning(monkeypatch, capsys) -> None:
    """``--batch-size`` was ``--max-batch-inputs``'s name: a command that gives it serves as before and is told the
    new name; both names at once with different values is a usage error (exit 2)."""
    import finesim.serving.server as server

    given: dict = {}
    monkeypatch.setattr(server, "serve", lambda settings, **kw: given.update(settings=settings) or 0)
    assert main(["serve", "--model", "minilm", "--batch-size", "256"]) == 0
    assert given["settings"].max_batch_inputs == 256
    assert "--batch-size is now --max-batch-inputs (the micro-batch's most inputs); read as --max-batch-inputs 256" in (
        capsys.readouterr().err
    )
    assert main(["serve", "--model", "minilm", "--batch-size", "8", "--max-batch-inputs", "8"]) == 0
    assert given["settings"].max_batch_inputs == 8
    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--model", "minilm", "--batch-size", "8", "--max-batch-inputs", "16"])
    assert exit_.value.code == 2
    assert "--batch-size 8 and --max-batch-inputs 16: --batch-size is its old name; give one" in capsys.readouterr().err


def test_no_map_wait_reaches_the_settings(monkeypatch, tmp_path, capsys) -> None:
    """``--no-map-wait`` turns ``ServeSettings.map_wait`` off (on by default); without an index, or with one whose
    first stage fits no maps, it is a usage error (it would do nothing); the help says what it does."""
    from types import SimpleNamespace

    import finesim.serving.server as server
    from finesim.index.store import IndexStore

    given: list = []
    monkeypatch.setattr(server, "serve", lambda settings, **kw: given.append(settings) or 0)
    first_stage = {"query": "mapped"}

    store = SimpleNamespace(manifest={"first_stage": first_stage})  # what the command reads of the index
    monkeypatch.setattr(IndexStore, "open", lambda path: store)
    main(["serve", "--model", "minilm", "--index", str(tmp_path)])
    main(["serve", "--model", "minilm", "--index", str(tmp_path), "--no-map-wait"])
    assert [settings.map_wait for settings in given] == [True, False]
    first_stage["query"] = "conditioned"  # an index that fits no maps: the flag would do nothing, so it is refused
    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--model", "minilm", "--index", str(tmp_path), "--no-map-wait"])
    assert exit_.value.code == 2
    assert "--no-map-wait: the index" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--model", "minilm", "--no-map-wait"])
    assert exit_.value.code == 2 and "--no-map-wait needs --index" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--no-map-wait a 'mapped' index (--first-stage-query mapped): answer a new condition's searches" in help_text


def test_no_map_borrow_reaches_the_settings_and_needs_no_map_wait(monkeypatch, tmp_path, capsys) -> None:
    """``--no-map-borrow`` turns ``ServeSettings.map_borrow`` off (on by default); without ``--no-map-wait`` it would
    do nothing (a waiting search has its own map), so it is a usage error naming both flags."""
    from types import SimpleNamespace

    import finesim.serving.server as server
    from finesim.index.store import IndexStore

    given: list = []
    monkeypatch.setattr(server, "serve", lambda settings, **kw: given.append(settings) or 0)
    monkeypatch.setattr(IndexStore, "open", lambda path: SimpleNamespace(manifest={"first_stage": {"query": "mapped"}}))
    main(["serve", "--model", "minilm", "--index", str(tmp_path), "--no-map-wait"])
    main(["serve", "--model", "minilm", "--index", str(tmp_path), "--no-map-wait", "--no-map-borrow"])
    assert [(s.map_wait, s.map_borrow) for s in given] == [(False, True), (False, False)]
    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--model", "minilm", "--index", str(tmp_path), "--no-map-borrow"])
    assert exit_.value.code == 2 and "--no-map-borrow needs --no-map-wait" in capsys.readouterr().err


def test_map_fit_yield_reaches_the_settings_needs_no_map_wait_and_refuses_a_bad_value(
    monkeypatch, tmp_path, capsys
) -> None:
    """``--map-fit-yield`` is passed as seconds (None without it: the index's default); without ``--no-map-wait``
    it would do nothing (no fit runs in the background), so it is a usage error; a negative, infinite or non-number
    value is refused by argparse."""
    from types import SimpleNamespace

    import finesim.serving.server as server
    from finesim.index.store import IndexStore

    given: list = []
    monkeypatch.setattr(server, "serve", lambda settings, **kw: given.append(settings) or 0)
    monkeypatch.setattr(IndexStore, "open", lambda path: SimpleNamespace(manifest={"first_stage": {"query": "mapped"}}))
    base = ["serve", "--model", "minilm", "--index", str(tmp_path), "--no-map-wait"]
    main(base)
    main([*base, "--map-fit-yield", "0"])
    main([*base, "--map-fit-yield", "2.5"])
    assert [s.map_fit_yield for s in given] == [None, 0.0, 2.5]
    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--model", "minilm", "--index", str(tmp_path), "--map-fit-yield", "1"])
    assert exit_.value.code == 2 and "--map-fit-yield needs --no-map-wait" in capsys.readouterr().err
    for bad, says in [("-1", "must be a number of seconds from 0 to 60, got '-1'"), ("61", "got '61'"),
                      ("inf", "got 'inf'"), ("soon", "expected a number of seconds, got 'soon'")]:  # fmt: skip
        with pytest.raises(SystemExit) as exit_:
            main([*base, "--map-fit-yield", bad])
        assert exit_.value.code == 2 and says in capsys.readouterr().err


def test_rerank_feedback_reaches_the_settings_and_needs_a_self_index(monkeypatch, tmp_path, capsys) -> None:
    """``--rerank-feedback`` is passed to ``ServeSettings.rerank_feedback`` as written (None without it: the index's
    default); without ``--index``, or with an index whose first stage is not ``self``, it is a usage error; a bad
    value is refused by argparse saying what is expected."""
    from types import SimpleNamespace

    import finesim.serving.server as server
    from finesim.index.store import IndexStore

    given: list = []
    monkeypatch.setattr(server, "serve", lambda settings, **kw: given.append(settings) or 0)
    stage = {"model": "self", "query": "conditioned"}
    monkeypatch.setattr(IndexStore, "open", lambda path: SimpleNamespace(manifest={"first_stage": stage}))
    main(["serve", "--model", "minilm", "--index", str(tmp_path)])
    main(["serve", "--model", "minilm", "--index", str(tmp_path), "--rerank-feedback", "none"])
    assert [s.rerank_feedback for s in given] == [None, "none"]
    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--model", "minilm", "--rerank-feedback", "local-map"])
    assert exit_.value.code == 2 and "--rerank-feedback needs --index" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--model", "minilm", "--index", str(tmp_path), "--rerank-feedback", "local-map:0,0.1,10"])
    assert exit_.value.code == 2 and "ROUNDS must be a whole number >= 1, got 0" in capsys.readouterr().err
    stage = {"model": "some/tri-encoder", "query": "tri"}
    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--model", "minilm", "--index", str(tmp_path), "--rerank-feedback", "local-map"])
    assert exit_.value.code == 2 and "has no 'self' first stage" in capsys.readouterr().err


def test_rerank_depth_reaches_the_settings_and_needs_an_index(monkeypatch, tmp_path, capsys) -> None:
    """``--rerank-depth`` is passed to ``ServeSettings.rerank_depth`` as written (None without it: the index's
    default); without ``--index`` it is a usage error, and a bad value is refused by argparse saying what is
    expected."""
    from types import SimpleNamespace

    import finesim.serving.server as server
    from finesim.index.store import IndexStore

    given: list = []
    monkeypatch.setattr(server, "serve", lambda settings, **kw: given.append(settings) or 0)
    monkeypatch.setattr(IndexStore, "open", lambda path: SimpleNamespace(manifest={"first_stage": {"query": "mapped"}}))
    main(["serve", "--model", "minilm", "--index", str(tmp_path)])
    main(["serve", "--model", "minilm", "--index", str(tmp_path), "--rerank-depth", "25,25,3"])
    assert [s.rerank_depth for s in given] == [None, "25,25,3"]
    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--model", "minilm", "--rerank-depth", "25,25,3"])
    assert exit_.value.code == 2 and "--rerank-depth needs --index" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--model", "minilm", "--index", str(tmp_path), "--rerank-depth", "0,1,1"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "rerank_depth '0,1,1': FIRST must be a whole number >= 1" in err
    # an index without a first stage searches exactly: nothing to re-rank, so the option is refused, not ignored
    monkeypatch.setattr(IndexStore, "open", lambda path: SimpleNamespace(manifest={"first_stage": None}))
    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--model", "minilm", "--index", str(tmp_path), "--rerank-depth", "25,25,3"])
    assert exit_.value.code == 2 and "has no first stage (it searches exactly)" in capsys.readouterr().err
