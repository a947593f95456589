"""llama-server's message workarounds before a template renders (app/templating/workarounds.py, and the older
Gemma 4 templates' tool responses in app/templating/dedicated.py), on the real templates they are for."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.templating.chat_template import ChatTemplate, TemplateChoice
from app.templating.dedicated import message_shaper
from app.templating.workarounds import jinja_workarounds

TEMPLATES = Path(__file__).resolve().parents[1] / "data" / "templates"
CALL_HISTORY: list[dict[str, Any]] = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "Checking.", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": '{"celsius": 18}'},
    {"role": "assistant", "content": "It is 18 C."},
    {"role": "user", "content": "Thanks"},
]


def source(name: str) -> str:
    return (TEMPLATES / name).read_text()


def render(name: str, messages: list[dict[str, Any]]) -> str:
    template = ChatTemplate(TemplateChoice(source(name), None), "<bos>", "<eos>", lambda *_: "")
    return template.render(jinja_workarounds(template.source, messages), True)


def test_a_developer_message_is_a_system_message_except_for_gpt_oss() -> None:
    messages = [{"role": "developer", "content": "Answer in French."}, {"role": "user", "content": "Hi"}]
    assert jinja_workarounds("{{ messages }}", messages)[0] == {"role": "system", "content": "Answer in French."}
    assert jinja_workarounds(source("openai-gpt-oss-120b.jinja"), messages) == messages  # a role of its own there
    assert "<|turn>system\nAnswer in French." in render("google-gemma-4-31B-it-interleaved.jinja", messages)


def test_stepfuns_contents_are_trimmed_and_no_other_templates() -> None:
    messages = [{"role": "user", "content": "  Hi there \n\n"}]
    assert "\nHi there<|im_end|>" in render("StepFun3.5-Flash.jinja", messages)
    assert jinja_workarounds("{{ messages }}", messages) == messages


def test_an_older_gemma_4_template_gets_a_calls_results_in_its_turn() -> None:
    """As llama-server's workaround: the call, its result (as JSON) and the answer after it are one model turn,
    the calling message's own content left out; the newer template reads the tool messages itself."""
    shaper = message_shaper(source("google-gemma-4-31B-it-interleaved.jinja"))
    assert shaper is not None
    assert shaper(CALL_HISTORY)[1] == {
        "role": "assistant", "tool_calls": CALL_HISTORY[1]["tool_calls"], "content": "It is 18 C.",
        "tool_responses": [{"name": "get_weather", "response": {"celsius": 18}}]}
    assert [message["role"] for message in shaper(CALL_HISTORY)] == ["user", "assistant", "user"]
    prompt = render("google-gemma-4-31B-it-interleaved.jinja", CALL_HISTORY)
    assert "<|tool_response>response:get_weather{celsius:18}<tool_response|>It is 18 C." in prompt
    assert "Checking." not in prompt
    assert message_shaper(source("google-gemma-4-31B-it.jinja")) is None


def test_gemma_4_opens_the_model_turn_its_template_leaves_closed() -> None:
    """After a tool's results for a calling message with text, Gemma 4's template ends the prompt with
    ``<turn|>``: llama-server opens the model's turn there; elsewhere the prompt is the template's own."""
    calling = CALL_HISTORY[:3]
    assert render("google-gemma-4-31B-it.jinja", calling).endswith("Checking.<turn|>\n<|turn>model\n")
    template = ChatTemplate(TemplateChoice(source("google-gemma-4-31B-it.jinja"), None), "<bos>", "<eos>",
                            lambda *_: "")
    assert template.render(calling, False).endswith("Checking.<turn|>\n")  # no answer asked for
    answered = render("google-gemma-4-31B-it.jinja", CALL_HISTORY)
    assert answered.endswith("Thanks<turn|>\n<|turn>model\n<|channel>thought\n<channel|>")  # the template's own
    assert not render("Qwen3-Coder.jinja", CALL_HISTORY).endswith("<|turn>model\n")
