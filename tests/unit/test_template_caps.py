"""/props chat_template_caps: what a template renders, found by probes (llama-server's names)."""

from __future__ import annotations

from app.templating.chat_template import ChatTemplate, TemplateChoice
from app.templating.template_caps import template_caps
from tests.inprocess import make_application

TOOLS_TEMPLATE = (
    "{% if tools %}TOOLS:{% for t in tools %}{{ t.function.name }};{% endfor %}{% endif %}"
    "{% for m in messages %}<{{ m.role }}>"
    "{% if m.content is string %}{{ m.content }}{% else %}{% for p in m.content %}{{ p.text }}{% endfor %}{% endif %}"
    "{% if m.reasoning_content %}[{{ m.reasoning_content }}]{% endif %}"
    "{% for c in m.tool_calls or [] %}CALL {{ c.function.name }} {{ c.function.arguments | tojson }}{% endfor %}"
    "{% endfor %}{% if reasoning_effort %}effort={{ reasoning_effort }}{% endif %}"
)
PLAIN_TEMPLATE = ("{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('no system') }}{% endif %}"
                  "<{{ m.role }}>{{ m.content }}{% endfor %}")


def caps_of(source: str) -> dict[str, bool]:
    return template_caps(ChatTemplate(TemplateChoice(source, None), "", "", lambda *args: ""))


def test_a_template_that_renders_everything() -> None:
    assert caps_of(TOOLS_TEMPLATE) == {key: True for key in caps_of(TOOLS_TEMPLATE)}
    assert len(caps_of(TOOLS_TEMPLATE)) == 9


def test_a_plain_template_renders_text_only() -> None:
    caps = caps_of(PLAIN_TEMPLATE)
    assert caps["supports_string_content"] and not caps["supports_system_role"]
    assert not any(caps[key] for key in ("supports_tools", "supports_tool_calls", "supports_parallel_tool_calls",
                                         "supports_preserve_reasoning", "supports_reasoning_effort"))


def test_props_reports_the_caps() -> None:
    app = make_application("--chat-template", TOOLS_TEMPLATE)
    try:
        props = app.flask.test_client().get("/props").json
        assert props is not None
        assert props["chat_template_caps"]["supports_tools"] is True and props["chat_template_caps"]["jinja"] is True
    finally:
        app.shutdown()
