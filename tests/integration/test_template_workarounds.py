"""What llama.cpp does for templates that Python's Jinja or the template alone would refuse, on the real model:
a template that raises on a system message (Gemma 2's) gets it merged into the next message, and transformers'
``{% generation %}`` blocks (LFM2.5's, Laguna's) render their content."""

from __future__ import annotations

from pathlib import Path

import requests

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
