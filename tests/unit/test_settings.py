"""Settings: llama-server's flags and defaults, LLAMA_ARG_* environment, precedence, bad values."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from app.config.settings import OPTIONS, Settings, SettingsError, build_parser, parse_settings, settings_fields


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
    from app.server.cli import public_settings

    shown = public_settings(parse("--api-key", "very-secret", "--api-key", "other"))
    assert shown["api_keys"] == "2 key(s)"
    assert "very-secret" not in repr(shown)


def test_no_secret_setting_reaches_the_settings_log_line() -> None:
    from app.server.cli import public_settings

    secrets = [option for option in OPTIONS if option.secret]
    assert {option.dest for option in secrets} >= {"api_keys", "hf_token"}
    shaped = {"mcp_servers_json": json.dumps({"mcpServers": {"s": {"command": "x", "env": {
        "TOKEN": "sentinel-mcp_servers_json-value"}}}})}  # a value that must parse, holding the sentinel
    argv = [item for option in secrets
            for item in (option.flags[-1], shaped.get(option.dest, f"sentinel-{option.dest}-value"))]
    shown = json.dumps(public_settings(parse(*argv)))
    for option in secrets:
        assert f"sentinel-{option.dest}-value" not in shown, option.dest
    assert '"hf_token": "(set, hidden)"' in shown and '"api_keys": "1 key(s)"' in shown


@pytest.mark.parametrize("argv", [["--api-key", ","], ["--api-key", " "], ["--api-key", "good,"],
                                  ["--api-key", "good", "--api-key", ""]])
def test_a_blank_api_key_is_refused_not_taken_as_no_key(argv: list[str]) -> None:
    with pytest.raises(SettingsError, match="empty or blank"):
        parse_settings(argv, {}, error=lambda message: None)


def test_an_empty_llama_api_key_is_refused() -> None:
    with pytest.raises(SettingsError, match="LLAMA_API_KEY: set but empty"):
        parse_settings([], {"LLAMA_API_KEY": ""}, error=lambda message: None)
    assert parse(HF_TOKEN="").hf_token is None  # an empty token opens nothing: taken as unset, as before


def test_a_key_file_with_no_key_is_refused(tmp_path: Path) -> None:
    keys = tmp_path / "keys.txt"
    keys.write_text("# no keys yet\n\n")
    with pytest.raises(SettingsError, match="holds no key"):
        parse("--api-key-file", str(keys)).all_api_keys()


def test_override_kv_items_are_typed_as_llama_server_parses_them() -> None:
    settings = parse("--override-kv", "a.int=int:-3,b.f=float:0.5", "--override-kv", "c=bool:true,d=str:hello")
    assert [(o.key, o.value, type(o.value)) for o in settings.kv_overrides] == [
        ("a.int", -3, int), ("b.f", 0.5, float), ("c", True, bool), ("d", "hello", str)]
    for bad, says in (("x", "KEY=TYPE:VALUE"), ("k=list:1", "expected int, float, bool, str"),
                      ("k=int:one", "not a int"), ("k=bool:yes", "true or false"), ("k=str:" + "x" * 128, "128"),
                      ("k" * 128 + "=int:1", "128 bytes")):
        with pytest.raises(SettingsError, match="--override-kv") as refused:
            parse_settings(["--override-kv", bad], {}, error=lambda message: None)
        assert says in str(refused.value)


def test_the_load_mode_and_its_older_flags() -> None:
    assert parse().model_load_mode == "auto" and not parse().notes
    assert parse("-lm", "mmap+mlock").model_load_mode == "mmap+mlock"
    assert (parse("--mlock").model_load_mode, parse("--no-mmap").model_load_mode) == ("mmap+mlock", "none")
    assert parse("--mlock", "--no-mmap").model_load_mode == "mlock"
    assert parse(LLAMA_ARG_MLOCK="1").notes == ("--mlock: replaced by --load-mode in llama.cpp; taken as --load-mode "
                                                "mmap+mlock",)
    both = parse("--no-mmap", "--load-mode", "dio")
    assert both.model_load_mode == "dio" and "ignored, --load-mode dio wins" in both.notes[0]


def test_tensor_split_is_split_at_commas_and_slashes() -> None:
    assert parse("-ts", "3,1/0.5").tensor_split_fractions == (3.0, 1.0, 0.5)
    assert parse().tensor_split_fractions == ()
    with pytest.raises(SettingsError, match="--tensor-split"):
        parse_settings(["-ts", "3,x"], {}, error=lambda message: None)


def test_loading_options_reach_llama_cpps_model_parameters() -> None:
    from app.engine.llama.config import LoadConfig
    from app.engine.llama.params import model_params
    from app.engine.types import KvOverride

    params, keep = model_params(LoadConfig(
        load_mode="none", lazy_mode="on", check_tensors=True, split_mode="row", tensor_split=(3.0, 1.0),
        main_gpu=1, repack=False, no_host=True,
        kv_overrides=(KvOverride("a", 7), KvOverride("b", 0.25), KvOverride("c", False), KvOverride("d", "x"))), 5)
    assert (params.n_gpu_layers, params.load_mode, params.lazy_mode, params.split_mode, params.main_gpu) == (
        5, 0, 2, 2, 1)
    assert params.check_tensors and not params.use_extra_bufts and params.no_host
    assert params.tensor_split[0] == 3.0 and params.tensor_split[1] == 1.0 and params.tensor_split[2] == 0.0
    overrides = params.kv_overrides
    assert [(overrides[i].key, overrides[i].tag) for i in range(5)] == [
        (b"a", 0), (b"b", 1), (b"c", 2), (b"d", 3), (b"", 0)]  # an empty key ends llama.cpp's list
    values = (overrides[0].value.val_i64, overrides[1].value.val_f64, overrides[2].value.val_bool,
              overrides[3].value.val_str)
    assert values == (7, 0.25, False, b"x")
    assert len(keep) == 2
    defaults, _ = model_params(LoadConfig(), -1)
    assert (defaults.load_mode, defaults.split_mode, bool(defaults.kv_overrides), bool(defaults.tensor_split)) == (
        -1, 1, False, False)


def test_context_flags_reach_llama_cpps_context_parameters() -> None:
    """The flags whose effect needs a GPU or a sliding-window model (-nkvo, --no-op-offload,
    --swa-full) and -kvu, as llama.cpp's context gets them (app/config/engine_config.py -> context_params)."""
    from app.config.engine_config import llama_config
    from app.engine.llama.params import context_params

    settings = parse("-nkvo", "--no-op-offload", "--swa-full", "-kvu", "-np", "3", "-ctk", "q8_0", "-fa", "on")
    params = context_params(llama_config(settings, "/models/m.gguf"), 4096)
    assert (params.offload_kqv, params.op_offload, params.swa_full, params.kv_unified) == (False, False, True, True)
    assert (params.n_ctx, params.n_seq_max, params.type_k, params.flash_attn_type) == (4096, 3, 8, 1)
    defaults = context_params(llama_config(parse(), "/models/m.gguf"), 1024)
    # --parallel auto: 4 slots sharing one cache, as llama-server sets kv_unified there (whatever -no-kvu says)
    assert (defaults.offload_kqv, defaults.op_offload, defaults.swa_full, defaults.kv_unified) == (True, True, False,
                                                                                                  True)
    assert context_params(llama_config(parse("-no-kvu"), "m"), 1024).kv_unified
    assert not context_params(llama_config(parse("-np", "4"), "m"), 1024).kv_unified
    assert not defaults.no_perf  # libllama's timings on, as llama-server's default
    assert context_params(llama_config(parse("--no-perf"), "m"), 1024).no_perf
    assert context_params(llama_config(parse_settings([], {"LLAMA_ARG_PERF": "0"}), "m"), 1024).no_perf
    loading = llama_config(parse("--no-repack", "--no-host", "-sm", "none", "-mg", "1", "-ts", "1,1"), "m").loading
    assert (loading.repack, loading.no_host, loading.split_mode, loading.main_gpu, loading.tensor_split) == (
        False, True, "none", 1, (1.0, 1.0))


def test_long_flags_may_spell_dashes_as_underscores_as_in_llama_server() -> None:
    settings = parse("--ctx_size", "2048", "--no_slots", "--cache_reuse=4", "-r", "keep_this_value")
    assert (settings.ctx_size, settings.slots, settings.cache_reuse) == (2048, False, 4)
    assert settings.reverse_prompt == ("keep_this_value",)  # values are never respelled
    assert parse("--defrag_thold", "0.1").notes == parse("--defrag-thold", "0.1").notes != ()
    assert parse("--backend_sampling").backend_sampling is True
    with pytest.raises(SystemExit):
        parse_settings(["--no_such_flag"], {})  # still unknown: refused as before


@pytest.mark.parametrize(("flag", "value", "bound"), [
    ("--port", "65536", "above the maximum 65535"), ("--poll", "101", "above the maximum 100"),
    ("--cpu-strict", "2", "above the maximum 1"), ("--prio", "4", "above the maximum 3"),
    ("--prio", "-2", "below the minimum -1"), ("--spec-draft-p-min", "1.5", "above the maximum 1"),
])
def test_an_options_declared_bounds_are_enforced_and_named(flag: str, value: str, bound: str) -> None:
    """Bounds are declared with the option (Option.minimum/maximum), not hand-written in a check."""
    with pytest.raises(SettingsError, match=f"{flag}.*{bound}"):
        parse_settings([flag, value], {}, error=lambda message: None)
    dest = next(option.dest for option in OPTIONS if flag in option.flags)
    assert getattr(parse_settings([flag, "1"], {}), dest) == 1  # within the bounds: taken


def test_the_ui_config_is_a_json_object_from_the_flag_over_the_file(tmp_path: Path) -> None:
    file = tmp_path / "ui.json"
    file.write_text('{"temperature": 0.5, "top_k": 7}')
    settings = parse_settings(["--ui-config-file", str(file), "--webui-config", '{"temperature": 0.1}'], {})
    assert settings.ui_settings == {"temperature": 0.1, "top_k": 7}
    for argv, message in ((["--ui-config", "[1]"], "--ui-config: must be a JSON object"),
                          (["--ui-config", "{"], "--ui-config: not JSON"),
                          (["--ui-config-file", str(tmp_path / "missing.json")], "--ui-config-file: cannot read")):
        with pytest.raises(SettingsError, match=message):
            parse_settings(argv, {}, error=lambda message: None)


def test_kv_unified_per_slot_sizes_an_unset_context_and_caps_each_slot() -> None:
    from app.config.engine_config import llama_config

    assert parse("-np", "3", "--kv-unified-per-slot", "512").context_size == 1536
    assert parse("-np", "3", "-c", "4096", "--kv-unified-per-slot", "512").context_size == 4096  # -c wins
    assert parse("--kv-unified-per-slot", "512").context_size == 2048  # -np auto: 4 slots
    config = llama_config(parse("-np", "2", "--kv-unified-per-slot", "256"), "m")
    assert (config.n_ctx, config.slot_ctx_cap) == (512, 256)
    from app.engine.llama.params import capped_slot_context
    assert capped_slot_context(4096, 256) == 256 and capped_slot_context(128, 256) == 128
    assert capped_slot_context(4096, 0) == 4096


def test_synthetic_acceptance_is_checked_against_the_drafters_at_start() -> None:
    settings = parse("--spec-type", "ngram-simple", "--spec-ngram-simple-size-m", "4", "--spec-synth-rates",
                     "0.9,0.5,0.5,0.1")
    assert settings.speculation.synthetic_acceptance == pytest.approx((0.9, 0.5 / 0.9, 1.0, 0.2))
    assert parse("--spec-type", "ngram-mod", "--spec-synth-len", "65").speculation.synthetic_acceptance == (1.0,) * 64
    for argv, says in ((["--spec-synth-len", "2"], "needs speculative decoding"),
                       (["--spec-type", "ngram-simple", "--spec-synth-rates", "0.5,x"], "comma-separated"),
                       (["--spec-type", "ngram-simple", "--spec-synth-rates", "0.5"], "give 48 values")):
        with pytest.raises(SettingsError, match=says):
            parse_settings(argv, {}, error=lambda message: None)
