"""Settings: llama-server's flags and defaults, LLAMA_ARG_* environment, precedence, bad values."""

from __future__ import annotations

import dataclasses

import pytest

from app.settings import OPTIONS, Settings, build_parser, parse_settings, settings_fields


def parse(*argv: str, **env: str) -> Settings:
    return parse_settings(list(argv), env)


def test_every_setting_is_declared_exactly_once() -> None:
    declared = [option.dest for option in OPTIONS]
    assert sorted(declared) == sorted(settings_fields())
    assert len(set(declared)) == len(declared)
    flags = [flag for option in OPTIONS for flag in (*option.flags, *option.negative_flags)]
    assert len(set(flags)) == len(flags)


def test_defaults_match_llama_server() -> None:
    settings = parse()
    assert settings == Settings()
    assert (settings.host, settings.port, settings.ctx_size, settings.n_parallel) == ("127.0.0.1", 8080, 0, -1)
    assert (settings.batch_size, settings.ubatch_size, settings.n_predict, settings.seed) == (2048, 512, -1, -1)
    assert (settings.temp, settings.timeout, settings.n_gpu_layers) == (0.8, 600, "auto")
    assert settings.slots and settings.jinja and settings.cont_batching
    assert not settings.metrics and not settings.props and not settings.verbose
    assert settings.slot_count == 4
    defaults = {field.name: field.default for field in dataclasses.fields(Settings)}
    for option in OPTIONS:
        assert defaults[option.dest] == option.default, option.dest


@pytest.mark.parametrize(
    ("argv", "field", "value"),
    [
        (["-m", "x.gguf"], "model", "x.gguf"),
        (["--model", "x.gguf"], "model", "x.gguf"),
        (["-a", "b,a"], "alias", "b,a"),
        (["-c", "4096"], "ctx_size", 4096),
        (["--ctx-size", "4096"], "ctx_size", 4096),
        (["-np", "8"], "n_parallel", 8),
        (["--parallel", "8"], "n_parallel", 8),
        (["-b", "256"], "batch_size", 256),
        (["-ub", "128"], "ubatch_size", 128),
        (["-t", "3"], "threads", 3),
        (["-ngl", "99"], "n_gpu_layers", "99"),
        (["--n-gpu-layers", "all"], "n_gpu_layers", "all"),
        (["-n", "64"], "n_predict", 64),
        (["-s", "42"], "seed", 42),
        (["--temp", "0.2"], "temp", 0.2),
        (["--metrics"], "metrics", True),
        (["--no-slots"], "slots", False),
        (["--props"], "props", True),
        (["--no-jinja"], "jinja", False),
        (["--chat-template", "chatml"], "chat_template", "chatml"),
        (["--threads-http", "16"], "threads_http", 16),
        (["-to", "30"], "timeout", 30),
        (["--api-prefix", "/api"], "api_prefix", "/api"),
        (["-nocb"], "cont_batching", False),
        (["--no-cont-batching"], "cont_batching", False),
        (["-v"], "verbose", True),
    ],
)
def test_flags(argv: list[str], field: str, value: object) -> None:
    assert getattr(parse(*argv), field) == value


def test_api_keys_repeat_and_split_on_commas() -> None:
    assert parse("--api-key", "a,b", "--api-key", "c").api_keys == ("a", "b", "c")
    assert parse(LLAMA_API_KEY="k1,k2").api_keys == ("k1", "k2")


def test_api_key_file(tmp_path: object) -> None:
    from pathlib import Path

    key_file = Path(str(tmp_path)) / "keys.txt"
    key_file.write_text("first\n\nsecond\n")
    settings = parse("--api-key", "inline", "--api-key-file", str(key_file))
    assert settings.all_api_keys() == ("inline", "first", "second")


def test_environment_is_used_and_a_flag_wins() -> None:
    env = {"LLAMA_ARG_CTX_SIZE": "1024", "LLAMA_ARG_N_PARALLEL": "2", "LLAMA_ARG_ENDPOINT_METRICS": "on"}
    settings = parse(**env)
    assert (settings.ctx_size, settings.n_parallel, settings.metrics) == (1024, 2, True)
    assert parse("-c", "512", **env).ctx_size == 512
    assert parse("--no-slots", LLAMA_ARG_ENDPOINT_SLOTS="true").slots is False
    assert parse(LLAMA_ARG_ENDPOINT_SLOTS="disabled").slots is False


def test_an_empty_environment_variable_counts_as_unset() -> None:
    assert parse(LLAMA_ARG_CTX_SIZE="").ctx_size == 0


@pytest.mark.parametrize(
    ("argv", "env", "named"),
    [
        (["--bogus"], {}, "--bogus"),
        (["-c", "abc"], {}, "--ctx-size"),
        (["-c", "-5"], {}, "--ctx-size"),
        (["-np", "0"], {}, "--parallel"),
        (["-ngl", "lots"], {}, "--n-gpu-layers"),
        (["--port", "70000"], {}, "--port"),
        (["-fa", "maybe"], {}, "flash"),
        ([], {"LLAMA_ARG_CTX_SIZE": "big"}, "LLAMA_ARG_CTX_SIZE"),
        ([], {"LLAMA_ARG_ENDPOINT_METRICS": "perhaps"}, "LLAMA_ARG_ENDPOINT_METRICS"),
    ],
)
def test_bad_input_exits_2_naming_it(
    argv: list[str], env: dict[str, str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as caught:
        parse_settings(argv, env)
    assert caught.value.code == 2
    assert named in capsys.readouterr().err


def test_help_lists_every_flag_and_its_environment_variable() -> None:
    text = build_parser().format_help()
    for option in OPTIONS:
        for flag in option.flags:
            assert flag in text
        if option.env:
            assert option.env in text


def test_derived_values() -> None:
    settings = parse("-np", "6", "--threads-http", "2", "-ngl", "12", "--api-prefix", "api/")
    assert settings.slot_count == 6
    assert settings.http_threads == 10  # never fewer than parallel + 4
    assert settings.gpu_layers == 12
    assert settings.route_prefix == "/api"
    assert parse("-ngl", "auto").gpu_layers == -1


def test_lora_flags() -> None:
    settings = parse("--lora", "a.gguf", "--lora-scaled", "b.gguf", "0.5", "--lora", "c.gguf")
    assert settings.lora_adapters == (("a.gguf", 1.0), ("c.gguf", 1.0), ("b.gguf", 0.5))
    assert parse(LLAMA_ARG_LORA="x.gguf,y.gguf").lora == ("x.gguf", "y.gguf")


def test_a_bad_lora_scale_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        parse_settings(["--lora-scaled", "b.gguf", "lots"], {})
    assert caught.value.code == 2
    assert "--lora-scaled" in capsys.readouterr().err


def test_the_settings_log_line_hides_the_keys() -> None:
    from app.cli import public_settings

    shown = public_settings(parse("--api-key", "very-secret", "--api-key", "other"))
    assert shown["api_keys"] == "2 key(s)"
    assert "very-secret" not in repr(shown)
