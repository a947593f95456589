"""The sampling flags llama-server has (--top-nsigma, --xtc-*, --typical, --presence-penalty, ...,
--samplers, --ignore-eos) set what a request gets for a field it leaves out; a request's own value
still wins. Shown by the jobs' generation_settings and, for --ignore-eos, by the text."""

from __future__ import annotations

from typing import Any

import pytest

from app.config.settings import SettingsError, parse_settings
from tests.inprocess import PROMPT, make_application

FLAGS = ["--top-nsigma", "1.5", "--xtc-probability", "0.25", "--xtc-threshold", "0.2", "--typical", "0.9",
         "--presence-penalty", "0.3", "--frequency-penalty", "0.4", "--dry-multiplier", "0.8", "--dry-base", "2",
         "--dry-allowed-length", "3", "--dry-penalty-last-n", "32", "--dynatemp-range", "0.5", "--dynatemp-exp", "1.5",
         "--mirostat", "2", "--mirostat-lr", "0.2", "--mirostat-ent", "4", "--samplers", "top_k;min_p;temperature"]
EXPECTED = {"top_n_sigma": 1.5, "xtc_probability": 0.25, "xtc_threshold": 0.2, "typical_p": 0.9,
            "presence_penalty": 0.3, "frequency_penalty": 0.4, "dry_multiplier": 0.8, "dry_base": 2.0,
            "dry_allowed_length": 3, "dry_penalty_last_n": 32, "dynatemp_range": 0.5, "dynatemp_exponent": 1.5,
            "mirostat": 2, "mirostat_eta": 0.2, "mirostat_tau": 4.0, "samplers": ["top_k", "min_p", "temperature"]}


def completion(app: Any, **fields: Any) -> dict[str, Any]:
    response = app.flask.test_client().post("/completion", json={"prompt": PROMPT, "n_predict": 8, **fields})
    assert response.status_code == 200, response.get_data(as_text=True)
    body: dict[str, Any] = response.json
    return body


def test_the_sampling_flags_are_the_requests_defaults() -> None:
    app = make_application(*FLAGS)
    try:
        settings = completion(app)["generation_settings"]
        assert {key: settings[key] for key in EXPECTED} == EXPECTED
        props = app.flask.test_client().get("/props").json
        assert props is not None
        assert {key: props["default_generation_settings"]["params"][key] for key in EXPECTED} == EXPECTED
        own = completion(app, top_n_sigma=-1, samplers="kt")["generation_settings"]  # the request wins
        assert own["top_n_sigma"] == -1 and own["samplers"] == ["top_k", "temperature"]
    finally:
        app.shutdown()


def test_ignore_eos_by_default_generates_past_the_end() -> None:
    plain, ignoring = make_application(), make_application("--ignore-eos")
    try:
        assert completion(plain, n_predict=40)["tokens_predicted"] < 40  # the fake model's reply ends with EOS
        assert completion(ignoring, n_predict=40)["tokens_predicted"] == 40
    finally:
        plain.shutdown()
        ignoring.shutdown()


def test_sequences_of_letters_and_bad_names() -> None:
    assert parse_settings(["--sampler-seq", "kpt"], {}).sampling_defaults.samplers == ("top_k", "top_p", "temperature")
    with pytest.raises(SettingsError, match="unknown sampler"):
        parse_settings(["--samplers", "top_k;bogus"], {}, error=lambda message: None)


@pytest.mark.parametrize(("argv", "expected"), [
    (["--lora-scaled", "a.gguf:0.5,b.gguf:2"], (("a.gguf", 0.5), ("b.gguf", 2.0))),  # llama-server's form
    (["--lora-scaled", "a.gguf", "0.5"], (("a.gguf", 0.5),)),  # this server's older form
    (["--lora-scaled", "c:/x.gguf:1", "--lora-scaled", "d.gguf:0"], (("c:/x.gguf", 1.0), ("d.gguf", 0.0))),
])
def test_lora_scaled_takes_llama_servers_form(argv: list[str], expected: tuple[tuple[str, float], ...]) -> None:
    assert parse_settings(argv, {}).lora_scaled == expected


@pytest.mark.parametrize(("value", "mode"), [("1", "on"), ("true", "on"), ("enabled", "on"), ("on", "on"),
                                             ("0", "off"), ("false", "off"), ("off", "off"), ("auto", "auto"),
                                             ("-1", "auto")])
def test_flash_attn_takes_llama_servers_spellings(value: str, mode: str) -> None:
    assert parse_settings(["-fa", value], {}).flash_attn_mode == mode


def test_temperature_under_both_names() -> None:
    assert parse_settings(["--temperature", "0.3"], {}).temp == 0.3
    assert parse_settings([], {"LLAMA_ARG_TEMPERATURE": "0.4"}).temp == 0.4
    assert parse_settings([], {"LLAMA_ARG_TEMP": "0.5"}).temp == 0.5  # this server's older name, still read
    with pytest.raises(SettingsError, match="expected on, off or auto"):
        parse_settings(["-fa", "sometimes"], {}, error=lambda message: None)


GRAMMAR = 'root ::= "yes" | "no"'
LOGIT_BIAS = [{"token": 200, "bias": 2.5}, {"token": 201, "bias": None}]  # -inf is null in JSON, as llama-server


def test_the_default_grammar_and_logit_bias_apply_to_requests_that_give_none(tmp_path: Any) -> None:
    grammar_file = tmp_path / "answer.gbnf"
    grammar_file.write_text(GRAMMAR)
    app = make_application("--grammar-file", str(grammar_file), "-l", "200+2.5", "-l", "201-inf",
                           "--dry-sequence-breaker", "none", "--dry-sequence-breaker", "|")
    try:
        settings = completion(app)["generation_settings"]
        assert settings["grammar"] == GRAMMAR
        assert settings["logit_bias"] == LOGIT_BIAS
        assert settings["dry_sequence_breakers"] == ["|"]
        props = app.flask.test_client().get("/props").json
        assert props is not None and props["default_generation_settings"]["params"]["grammar"] == GRAMMAR
        own = completion(app, grammar='root ::= "a"', logit_bias={})["generation_settings"]  # the request wins
        assert own["grammar"] == 'root ::= "a"' and not own["logit_bias"]
        assert completion(app, grammar="")["generation_settings"]["grammar"] == GRAMMAR  # as llama-server
    finally:
        app.shutdown()


def test_a_default_json_schema_becomes_the_default_grammar() -> None:
    app = make_application("-j", '{"type": "object"}')
    try:
        assert completion(app)["generation_settings"]["grammar"] == app.context.engine.vocab.json_schema_grammar(
            {"type": "object"})
    finally:
        app.shutdown()


@pytest.mark.parametrize(("argv", "says"), [
    (["--grammar", "root ::= x", "-j", "{}"], "--grammar and --json-schema: give one"),
    (["--grammar-file", "/nonexistent/g.gbnf"], "--grammar-file: cannot read"),
    (["-j", "[1"], "--json-schema: not JSON"),
    (["-j", "[1]"], "a JSON schema must be an object"),
    (["-l", "15043*1"], "is not TOKEN_ID\\+BIAS or TOKEN_ID-BIAS"),
    (["--dry-sequence-breaker", "x", "--logit-bias", "5+x"], "--logit-bias"),
])
def test_bad_defaults_are_refused_at_start_up(argv: list[str], says: str) -> None:
    with pytest.raises(SettingsError, match=says):
        parse_settings(argv, {}, error=lambda message: None)


def test_a_default_logit_bias_outside_the_vocabulary_fails_the_load() -> None:
    from app.server.wiring import build_application
    from tests.fakes import FakeBackend

    failures: list[BaseException] = []
    settings = parse_settings(["-l", "999999+1"], {})
    built = build_application(settings, "/models/fake.gguf", None, failures.append,
                              lambda config: FakeBackend(n_seq=config.n_seq))
    try:
        built.context.engine.wait_ready(10)
        assert failures and "--logit-bias: token 999999 is outside the model's vocabulary" in str(failures[0])
    finally:
        built.shutdown()
