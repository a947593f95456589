"""Prompt forms and chat templates."""

from __future__ import annotations

from typing import Any

import pytest

from app.handlers.prompts import is_single_prompt, split_prompts, tokenize_prompt
from app.protocol.errors import InvalidRequestError
from app.templating.chat_template import CHATML, ChatTemplate, TemplateChoice, TemplateError, choose_template
from app.templating.template_caps import analyse_thinking
from tests.fakes import FakeVocabulary, encode


@pytest.mark.parametrize(
    ("prompt", "single"),
    [("text", True), ([1, 2], True), ([1, "a", 2], True), (["a", "b"], False), (["a", [1, 2]], False), ([], False)],
)
def test_single_or_several_prompts(prompt: object, single: bool) -> None:
    assert is_single_prompt(prompt) is single


def test_split_prompts() -> None:
    assert split_prompts("x") == ["x"]
    assert split_prompts(["a", [1, 2]]) == ["a", [1, 2]]
    with pytest.raises(InvalidRequestError, match="prompt"):
        split_prompts([])
    with pytest.raises(InvalidRequestError, match="prompt"):
        split_prompts({"a": 1})
    with pytest.raises(InvalidRequestError, match="prompt"):
        split_prompts(["a", {"b": 1}])


def test_mixed_prompts_tokenize_in_order() -> None:
    vocab = FakeVocabulary()
    assert tokenize_prompt(vocab, [5, "ab", 6], True) == [5, *encode("ab"), 6]


def builtin(name: str | None, messages: object, add: bool) -> str:
    return "builtin"


def test_choose_template() -> None:
    assert choose_template(None, None, "{{ x }}", True) == TemplateChoice("{{ x }}", None)
    assert choose_template(None, None, None, True) == TemplateChoice(CHATML, None)
    assert choose_template("chatml", None, "{{ x }}", True) == TemplateChoice(CHATML, None)
    assert choose_template("llama3", None, "{{ x }}", True) == TemplateChoice(None, "llama3")
    assert choose_template(None, None, "{{ x }}", False) == TemplateChoice(None, None, "{{ x }}")


def test_jinja_template_renders_messages_and_generation_prompt() -> None:
    template = ChatTemplate(TemplateChoice(CHATML, None), "<s>", "</s>", builtin)
    text = template.render([{"role": "user", "content": "Hi"}], add_generation_prompt=True)
    assert text == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    assert not template.render([{"role": "user", "content": "Hi"}], False).endswith("assistant\n")


def test_templates_get_todays_date_as_llama_cpp_gives_it() -> None:
    """Llama 3.x templates print ``date_string`` ("26 Jul 2024" when nothing gives it); llama.cpp gives every
    template today's date, and a request's chat_template_kwargs win."""
    import datetime

    template = ChatTemplate(TemplateChoice("{{ date_string }}|{{ datetime }}", None), "<s>", "</s>", builtin)
    before = datetime.datetime.now()
    text = template.render([{"role": "user", "content": "Hi"}])
    after = datetime.datetime.now()
    assert text in {f"{day.strftime('%d %b %Y')}|{day.strftime('%b %d %Y')}" for day in (before, after)}
    assert template.render([{"role": "user", "content": "Hi"}], extra={"date_string": "1 Jan 2000"}).startswith(
        "1 Jan 2000|")


def test_template_helpers_and_errors() -> None:
    source = (
        "{% if messages[0]['role'] == 'system' %}{{ raise_exception('no system please') }}{% endif %}"
        "{{ messages | tojson }}{{ bos_token }}"
    )
    template = ChatTemplate(TemplateChoice(source, None), "<s>", "</s>", builtin)
    assert template.render([{"role": "user", "content": "é<>"}]) == '[{"role": "user", "content": "é<>"}]<s>'
    with pytest.raises(InvalidRequestError, match="no system please"):
        template.render([{"role": "system", "content": "x"}])


def test_generation_blocks_render_their_content() -> None:
    """transformers' ``{% generation %}`` marks (LFM2.5's and Laguna's templates) render what they hold, as in
    llama.cpp's Jinja; without the extension such a template did not parse and the server did not start."""
    source = ("{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}[{{ m.content }}]"
              "{% endgeneration %}{% else %}{{ m.content }}{% endif %}{% endfor %}")
    template = ChatTemplate(TemplateChoice(source, None), "", "", builtin)
    assert template.render([{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]) == "u[a]"


def test_a_template_without_a_system_role_gets_it_merged_as_in_llama_cpp() -> None:
    """Gemma 2's template refuses a system message; llama.cpp puts its text before the next message's, on a line
    of its own (a system message alone is dropped)."""
    from app.templating.workarounds import merged_system_message

    system, user = {"role": "system", "content": "Be terse."}, {"role": "user", "content": "Hi"}
    assert merged_system_message([system, user, {"role": "assistant", "content": "Yo"}]) == [
        {"role": "user", "content": "Be terse.\nHi"}, {"role": "assistant", "content": "Yo"}]
    assert merged_system_message([system]) == []
    assert merged_system_message([user]) == [user]


def test_a_broken_template_fails_at_start_up() -> None:
    with pytest.raises(TemplateError):
        ChatTemplate(TemplateChoice("{% for %}", None), "", "", builtin)


def test_builtin_templates_go_to_llama_cpp() -> None:
    seen = []

    def record(name: str | None, messages: object, add: bool) -> str:
        seen.append((name, messages, add))
        return "rendered"

    template = ChatTemplate(TemplateChoice(None, "llama3"), "", "", record)
    assert template.render([{"role": "user", "content": "x"}], True) == "rendered"
    assert seen[-1] == ("llama3", [("user", "x")], True)


def test_continue_final_message_as_llama_server(client: Any) -> None:
    """continue_final_message continues the last message (with add_generation_prompt false, else a
    400, as llama-server); a trailing assistant message is a prefill either way."""
    history: list[dict[str, Any]] = [{"role": "user", "content": "Tell me a story"},
                                     {"role": "assistant", "content": "Once upon"}]

    def rendered(**fields: Any) -> Any:
        return client.post("/apply-template", json={"messages": history, **fields})

    for fields in ({}, {"add_generation_prompt": False},
                   {"continue_final_message": True, "add_generation_prompt": False},
                   {"continue_final_message": "content", "add_generation_prompt": False}):
        reply = rendered(**fields)
        assert reply.status_code == 200 and reply.json["prompt"].endswith("<assistant>Once upon"), fields
    both = rendered(continue_final_message=True)
    assert both.status_code == 400 and "add_generation_prompt" in both.json["error"]["message"]
    history[-1] = {"role": "assistant", "content": None,
                   "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}
    calls = rendered(continue_final_message=True, add_generation_prompt=False)
    assert calls.status_code == 400 and "tool calls" in calls.json["error"]["message"]


def test_a_template_that_closes_its_think_block_unless_told_to_think_thinks_by_default() -> None:
    """llama.cpp's DeepSeek-R1-Distill and QwQ templates write ``<think>\\n</think>`` when ``enable_thinking`` is
    not true; with --reasoning auto (the default) llama-server finds that it thinks and gives it true, so the
    prompt ends inside the think block and the model thinks."""
    from app.config.settings import parse_settings

    source = ("{% for m in messages %}{{ m.content }}{% endfor %}{% if add_generation_prompt %}<think>\n"
              "{% if not enable_thinking %}</think>{% endif %}{% endif %}")
    template = ChatTemplate(TemplateChoice(source, None), "<s>", "</s>", builtin)
    assert analyse_thinking(template).thinks
    for flags, ending in (((), "<think>\n"), (("--reasoning", "on"), "<think>\n"),
                          (("--reasoning", "off"), "<think>\n</think>")):
        kwargs = {"enable_thinking": True, **parse_settings(["-m", "m.gguf", *flags], {}).template_kwargs}
        assert template.render([{"role": "user", "content": "Hi"}], extra=kwargs).endswith(ending), flags


@pytest.mark.parametrize(("source", "thinks"), [
    ("{{ messages[0].content }}{% if add_generation_prompt %}<|assistant|>{% if enable_thinking %}<think>"
     "{% endif %}{% endif %}", True),  # thinking on opens the block (Qwen3-like)
    ("{% for m in messages %}{% if m.reasoning_content %}<think>{{ m.reasoning_content }}</think>{% endif %}"
     "{{ m.content }}{% endfor %}", True),  # an answer's reasoning shows between markers
    ("{% if enable_thinking %}Deliberation: enabled{% else %}Deliberation: disabled{% endif %}"
     "{% for m in messages %}{{ m.content }}{% endfor %}", False),  # Apertus: a word in the system text
    ("{% for m in messages %}{{ m.content }}{% endfor %}", False),
])
def test_which_templates_think(source: str, thinks: bool) -> None:
    """llama-server's --reasoning auto gives enable_thinking only to a template its chat analysis finds
    thinking in; ``analyse_thinking`` finds the same."""
    assert analyse_thinking(ChatTemplate(TemplateChoice(source, None), "<s>", "</s>", builtin)).thinks is thinks


def test_an_undefined_value_is_null_in_json_as_in_llama_cpps_jinja() -> None:
    """Muse Glimmer's template writes a tool's description with tojson; a tool without one is null, not a 400."""
    source = "{% for t in tools %}{{ t.function.description | tojson }}{{ t.function.name | tojson }}{% endfor %}"
    template = ChatTemplate(TemplateChoice(source, None), "", "", builtin)
    assert template.render([{"role": "user", "content": "hi"}], True, [{"type": "function", "function": {
        "name": "f"}}]) == 'null"f"'
