"""What llama.cpp does for templates that Python's Jinja or the template alone would refuse, on the real model:
a template that raises on a system message (Gemma 2's) gets it merged into the next message, and transformers'
``{% generation %}`` blocks (LFM2.5's, Laguna's) render their content."""

from __future__ import annotations

from pathlib import Path

import requests

from tests.integration.chats import template_server
from tests.integration.conftest import start

GEMMA2_LIKE = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
    "{% endif %}{% for m in messages %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' else m['role'] }}\n"
    "{% if m['role'] == 'assistant' %}{% generation %}{{ m['content'] | trim }}{% endgeneration %}"
    "{% else %}{{ m['content'] | trim }}{% endif %}<end_of_turn>\n{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)


def test_a_system_message_to_a_template_without_the_role_is_merged(server_dir: Path, tmp_path: Path) -> None:
    template = tmp_path / "gemma2-like.jinja"
    template.write_text(GEMMA2_LIKE)
    server = start(server_dir, ["--jinja", "--chat-template-file", str(template), "-np", "1", "-c", "1024"])
    try:
        messages = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Hi"},
                    {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Bye"}]
        caps = requests.get(server.url("/props"), timeout=10).json()["chat_template_caps"]
        assert caps["supports_system_role"] is False
        prompt = requests.post(server.url("/apply-template"), json={"messages": messages}, timeout=30).json()["prompt"]
        assert "<start_of_turn>user\nBe terse.\nHi<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>" in prompt
        reply = requests.post(server.url("/v1/chat/completions"), timeout=120, json={"messages": messages,
                                                                                    "max_tokens": 4})
        assert reply.status_code == 200, reply.text[:300]
    finally:
        assert server.stop() == 0, server.log()


TEMPLATES = Path(__file__).resolve().parents[1] / "data" / "templates"


def test_llama_servers_message_workarounds_on_an_older_gemma_4_template(server_dir: Path) -> None:
    """A developer message is a system message, and a call's result goes into its model turn (the template
    reads ``tool_responses``), as llama-server renders it; a chat on that history is answered."""
    server = start(server_dir, ["--jinja", "--chat-template-file",
                                str(TEMPLATES / "google-gemma-4-31B-it-interleaved.jinja"), "-np", "1", "-c", "2048"])
    try:
        messages = [
            {"role": "developer", "content": "Answer in French."},
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
                "name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"},
        ]
        prompt = requests.post(server.url("/apply-template"), json={"messages": messages}, timeout=30).json()["prompt"]
        first_turn = prompt.split("<turn|>")[0]
        assert "<|turn>system\n" in first_turn and first_turn.endswith("Answer in French.")
        assert ("<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|>"
                "<|tool_response>response:get_weather{value:<|\"|>18 C, sunny<|\"|>}<tool_response|>") in prompt
        assert "<|turn>tool" not in prompt
        reply = requests.post(server.url("/v1/chat/completions"), timeout=120,
                              json={"messages": messages, "max_tokens": 4})
        assert reply.status_code == 200, reply.text[:300]
        assert reply.json()["usage"]["prompt_tokens"] == len(requests.post(
            server.url("/tokenize"), json={"content": prompt, "add_special": False, "parse_special": True},
            timeout=30).json()["tokens"])
    finally:
        assert server.stop() == 0, server.log()


def test_stepfuns_message_contents_are_trimmed(server_dir: Path) -> None:
    server = start(server_dir, ["--jinja", "--chat-template-file", str(TEMPLATES / "StepFun3.5-Flash.jinja"),
                                "-np", "1", "-c", "1024"])
    try:
        messages = [{"role": "user", "content": "\n  Hi there  \n\n"}]
        prompt = requests.post(server.url("/apply-template"), json={"messages": messages}, timeout=30).json()["prompt"]
        assert "\nHi there<|im_end|>" in prompt and "  Hi there" not in prompt
        reply = requests.post(server.url("/v1/chat/completions"), timeout=120,
                              json={"messages": messages, "max_tokens": 4})
        assert reply.status_code == 200, reply.text[:300]
    finally:
        assert server.stop() == 0, server.log()


def test_gemma_4s_model_turn_is_opened_after_a_calling_messages_results(server_dir: Path) -> None:
    """Gemma 4's template leaves the prompt after a tool's results at ``<turn|>`` when the calling message had
    text; llama-server opens the model's turn there, and so does this server: the answer is the model's turn."""
    messages = [{"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": "Checking.", "tool_calls": [{"id": "call_1", "type": "function",
                                                                              "function": {"name": "get_weather",
                                                                                           "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"}]
    with template_server(server_dir, "google-gemma-4-31B-it") as server:
        prompt = requests.post(server.url("/apply-template"), json={"messages": messages}, timeout=30).json()["prompt"]
        assert prompt.endswith("Checking.<turn|>\n<|turn>model\n")
        reply = requests.post(server.url("/v1/chat/completions"), timeout=120, json={
            "messages": messages, "max_tokens": 8, "reasoning_format": "none", "grammar": 'root ::= "Sunny."'})
        assert reply.status_code == 200 and reply.json()["choices"][0]["message"]["content"] == "Sunny."
