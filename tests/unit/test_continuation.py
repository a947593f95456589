"""A continued final message (a prefill, ``continue_final_message``) written as llama-server writes it
(app/templating/continuation.py), on real templates, and the replies after one read from inside its message."""

from __future__ import annotations

from pathlib import Path

from app.handlers.harmony import HarmonyStream
from app.handlers.recipients import RecipientStream
from app.templating.chat_template import ChatTemplate, TemplateChoice
from app.templating.continuation import Continuation, continuation_mode, continued_prompt
from app.templating.dedicated import continuation_tags, declared_thinking_tags
from app.templating.template_caps import ThinkingTags, analyse_thinking

TEMPLATES = Path(__file__).resolve().parents[1] / "data" / "templates"
USER = {"role": "user", "content": "Name a colour."}


def template(name: str) -> ChatTemplate:
    return ChatTemplate(TemplateChoice((TEMPLATES / f"{name}.jinja").read_text(), None), "<s>", "</s>",
                        lambda *_: "")


def continued(name: str, last: dict[str, object], mode: Continuation, tags: ThinkingTags | None,
              prefix: str = "") -> str:
    return continued_prompt(template(name), [USER], dict(last), mode, tags, prefix, None, {"enable_thinking": True})


def test_the_mode_is_llama_servers() -> None:
    assert continuation_mode(None, {"content": "Blue"}) is Continuation.CONTENT
    assert continuation_mode(True, {"content": "", "reasoning_content": "Hmm"}) is Continuation.REASONING
    assert continuation_mode("content", {"content": "", "reasoning_content": "Hmm"}) is Continuation.CONTENT
    assert continuation_mode("reasoning_content", {"content": "Blue"}) is Continuation.REASONING


def test_a_thinking_templates_continued_answer_closes_its_thought_first() -> None:
    """Seed-OSS thinks in its own tags: the answer goes on after an (empty) thought in them, with the blanks the
    template writes; the thought itself goes on inside the open tag."""
    seed = analyse_thinking(template("ByteDance-Seed-OSS")).tags
    assert seed is not None
    answer = continued("ByteDance-Seed-OSS", {"content": "My favourite colour is"}, Continuation.CONTENT, seed)
    assert answer.endswith("assistant\n<seed:think></seed:think>\nMy favourite colour is")
    thought = continued("ByteDance-Seed-OSS", {"content": "", "reasoning_content": "They want"},
                        Continuation.REASONING, seed)
    assert thought.endswith("assistant\n<seed:think>They want")


def test_qwen3_coder_familys_thought_on_lines_of_its_own() -> None:
    tags = continuation_tags((TEMPLATES / "StepFun3.5-Flash.jinja").read_text())
    assert tags is not None
    prompt = continued("StepFun3.5-Flash", {"content": "Blue"}, Continuation.CONTENT, tags)
    assert prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\nBlue")  # the opening not written twice


def test_gpt_oss_goes_on_in_its_final_channel_and_functionary_after_its_recipient() -> None:
    tags = declared_thinking_tags((TEMPLATES / "openai-gpt-oss-120b.jinja").read_text())
    prompt = continued("openai-gpt-oss-120b", {"content": "Blue"}, Continuation.CONTENT, tags)
    assert prompt.endswith("<|start|>assistant<|channel|>analysis<|message|><|end|>"
                           "<|start|>assistant<|channel|>final<|message|>Blue")
    functionary = continued("meetkai-functionary-medium-v3.2", {"content": "Blue"}, Continuation.CONTENT, None,
                            "all\n")
    assert functionary.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n>>>all\nBlue")


def test_a_template_that_does_not_think_gets_the_content_after_its_generation_prompt() -> None:
    prompt = continued("Mistral-Small-3.2-24B-Instruct-2506", {"content": "Blue"}, Continuation.CONTENT, None)
    assert prompt.endswith("[/INST]Blue")


def test_replies_after_a_continued_message_are_read_from_inside_it() -> None:
    """The model goes on with the answer (or the thought) the prompt left open: no header or recipient first."""
    assert HarmonyStream("auto", None, inside=Continuation.CONTENT).feed(" and green.", final=True) == (
        "", " and green.")
    reader = HarmonyStream("auto", None, inside=Continuation.REASONING)
    assert reader.feed(" so blue.<|end|><|start|>assistant<|channel|>final<|message|>Blue.", final=True) == (
        " so blue.", "Blue.")
    assert reader.reasoned
    text = 'weather\n{"city": "Paris"} is what I would send.'
    assert RecipientStream(None, in_answer=True).feed(text, final=True) == ("", text)
    assert RecipientStream(None).feed(text, final=True) != ("", text)  # else a line naming a recipient


ASSISTANT = "<\uff5cAssistant\uff5c>"  # DeepSeek's, with its full-width bars


def test_deepseek_v4_writes_a_thought_without_reasoning_as_its_closing_tag() -> None:
    tags = continuation_tags((TEMPLATES / "deepseek-ai-DeepSeek-V4.jinja").read_text())
    assert tags is not None
    answer = continued("deepseek-ai-DeepSeek-V4", {"content": "Blue"}, Continuation.CONTENT, tags)
    assert answer.endswith(ASSISTANT + "</think>Blue")
    reasoned = continued("deepseek-ai-DeepSeek-V4", {"content": "Blue", "reasoning_content": "Hmm"},
                         Continuation.CONTENT, tags)
    assert reasoned.endswith(ASSISTANT + "<think>Hmm</think>Blue")
