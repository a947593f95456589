"""llama-server's server-side defaults for request fields: --reverse-prompt (stop strings),
--embd-normalize, --chat-template-kwargs; --tags in /v1/models; --api-key-file comments; the CORS flags."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.config.settings import SettingsError, parse_settings
from tests.inprocess import JAPANESE, PROMPT, make_application


def post(app: Any, path: str, body: dict[str, Any]) -> Any:
    response = app.flask.test_client().post(path, json=body)
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.json


def test_reverse_prompt_is_the_stop_of_requests_that_give_none() -> None:
    app = make_application("-r", "の", "--reverse-prompt", "です")
    try:
        cut = post(app, "/completion", {"prompt": PROMPT, "n_predict": 32})
        assert cut["content"] == JAPANESE[:JAPANESE.index("の")] and cut["stopping_word"] == "の"
        own = post(app, "/completion", {"prompt": PROMPT, "n_predict": 32, "stop": ["文"]})
        assert own["content"] == JAPANESE[:JAPANESE.index("文")]
    finally:
        app.shutdown()


def test_embd_normalize_sets_the_native_default() -> None:
    plain, raw = make_application(), make_application("--embd-normalize", "-1")
    try:
        normalized = post(plain, "/embedding", {"content": "abc"})[0]["embedding"][0]
        unnormalized = post(raw, "/embedding", {"content": "abc"})[0]["embedding"][0]
        assert abs(sum(x * x for x in normalized) - 1.0) < 1e-6
        assert abs(sum(x * x for x in unnormalized) - 1.0) > 1e-3
        assert post(raw, "/embedding", {"content": "abc", "embd_normalize": 2})[0]["embedding"][0] == normalized
    finally:
        plain.shutdown()
        raw.shutdown()


def test_chat_template_kwargs_are_defaults_a_request_adds_to() -> None:
    template = ("{{ greeting | default('none') }}/{{ mood | default('none') }}:"
                "{% for m in messages %}{{ m.content }}{% endfor %}")
    app = make_application("--chat-template", template, "--chat-template-kwargs", '{"greeting": "hi", "mood": "calm"}')
    try:
        messages = [{"role": "user", "content": "x"}]
        assert post(app, "/apply-template", {"messages": messages})["prompt"] == "hi/calm:x"
        own = post(app, "/apply-template", {"messages": messages, "chat_template_kwargs": {"mood": "glad"}})
        assert own["prompt"] == "hi/glad:x"
    finally:
        app.shutdown()
    with pytest.raises(SettingsError, match="must be a JSON object"):
        parse_settings(["--chat-template-kwargs", "[1]"], {}, error=lambda message: None)


def test_tags_in_the_models_list() -> None:
    app = make_application("--tags", "vision, fast")
    try:
        models = app.flask.test_client().get("/v1/models").json
        assert models is not None and models["data"][0]["tags"] == ["vision", "fast"]
    finally:
        app.shutdown()


def test_the_api_key_file_skips_comment_lines(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text("# rotated 2026-12\nfirst\n\n#second-is-disabled\nthird\n")
    assert parse_settings(["--api-key-file", str(keys)], {}).all_api_keys() == ("first", "third")


def test_the_cors_flags_reach_the_preflight_answer() -> None:
    app = make_application("--cors-origins", "localhost", "--cors-methods", "GET, POST", "--cors-headers",
                           "Authorization", "--no-cors-credentials")
    try:
        client = app.flask.test_client()
        local = client.options("/completion", headers={"Origin": "http://localhost:8080"})
        assert local.headers["Access-Control-Allow-Origin"] == "http://localhost:8080"
        assert (local.headers["Access-Control-Allow-Methods"], local.headers["Access-Control-Allow-Headers"],
                local.headers["Access-Control-Allow-Credentials"]) == ("GET, POST", "Authorization", "false")
        remote = client.get("/health", headers={"Origin": "https://elsewhere.example"})
        assert "Access-Control-Allow-Origin" not in remote.headers
    finally:
        app.shutdown()


def test_spm_infill_puts_the_suffix_first() -> None:
    for flags, suffix_first in (((), False), (("--spm-infill",), True)):
        app = make_application(*flags)
        try:
            body = {"input_prefix": "PREFIX", "input_suffix": "SUFFIX", "n_predict": 1}
            prompt = post(app, "/infill", body)["prompt"]
            assert (prompt.index("SUFFIX") < prompt.index("PREFIX")) == suffix_first
        finally:
            app.shutdown()


def test_verbose_answers_carry_the_native_answer() -> None:
    """llama-server's __verbose: the request's verbose, else the server's -v."""
    quiet, loud = make_application(), make_application("-v")
    try:
        chat = {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": 4}
        assert "__verbose" not in post(quiet, "/v1/chat/completions", chat)
        asked = post(quiet, "/v1/chat/completions", {**chat, "verbose": True})["__verbose"]
        assert asked["tokens_predicted"] == 4 and "generation_settings" in asked and asked["stop"] is True
        assert "__verbose" in post(loud, "/v1/completions", {"prompt": PROMPT, "max_tokens": 2})
        assert "__verbose" not in post(loud, "/v1/completions", {"prompt": PROMPT, "max_tokens": 2, "verbose": False})
    finally:
        quiet.shutdown()
        loud.shutdown()


KWARGS_TEMPLATE = ("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
                   "[thinking={{ enable_thinking | default('unset') }} "
                   "effort={{ reasoning_effort | default('unset') }}]")


@pytest.mark.parametrize(("flags", "fields", "rendered"), [
    ((), {}, "[thinking=False effort=unset]"),  # --reasoning auto: this template shows no thinking (llama-server)
    (("--reasoning", "off"), {}, "[thinking=False effort=unset]"),
    (("-rea", "on", "--reasoning-effort", "high"), {}, "[thinking=True effort=high]"),
    (("-rea", "on", "--reasoning-effort", "high"), {"reasoning_effort": "low"}, "[thinking=True effort=low]"),
    ((), {"chat_template_kwargs": {"enable_thinking": False}}, "[thinking=False effort=unset]"),
    ((), {"reasoning_effort": "none"}, "[thinking=False effort=unset]"),
])
def test_reasoning_flags_and_fields_reach_the_template(flags: tuple[str, ...], fields: dict[str, Any],
                                                       rendered: str) -> None:
    app = make_application("--chat-template", KWARGS_TEMPLATE, *flags)
    try:
        prompt = post(app, "/apply-template", {"messages": [{"role": "user", "content": "Hi"}], **fields})["prompt"]
        assert prompt.endswith(rendered)
    finally:
        app.shutdown()


def test_the_bash_completion_completes_the_flags() -> None:
    import subprocess

    from app.server.cli import bash_completion

    script = bash_completion() + '\nCOMP_WORDS=(python --models-); COMP_CWORD=1; _vertex_llama_completions; ' \
                                 'printf "%s\\n" "${COMPREPLY[@]}"'
    completed = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30, check=True)
    assert completed.stdout.split() == ["--models-autoload", "--models-dir", "--models-max", "--models-preset"]
