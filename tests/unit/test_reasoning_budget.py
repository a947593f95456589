"""The reasoning budget (llama-server's): tokens inside the thinking are counted, and at the budget
the end tag (after an optional message) is forced in; a thinking that ends by itself is left
alone; the control route ends it at once. The gate alone, then chats on the fake model."""

from __future__ import annotations

from typing import Any

import pytest

from app.engine.reasoning_budget import BudgetGate, Phase
from app.engine.types import ReasoningBudget
from tests.inprocess import JAPANESE, make_application

START, END, MESSAGE = (1, 2), (3, 4), (9,)


def gate(tokens: int, opened: bool = True, forced: tuple[int, ...] = END) -> BudgetGate:
    return BudgetGate(ReasoningBudget(start=START, ends=(END,), forced=forced, tokens=tokens, opened=opened))


def run(budget: BudgetGate, sampled: list[int]) -> list[int]:
    """The tokens a slot takes: forced ones first, else the next sampled one."""
    taken: list[int] = []
    source = iter(sampled)
    while (token := budget.forced()) is not None or (token := next(source, None)) is not None:
        budget.feed(token)
        taken.append(token)
    return taken


def test_the_end_is_forced_after_the_budget() -> None:
    assert run(gate(3), [10, 11, 12, 13, 14]) == [10, 11, 12, 3, 4, 13, 14]
    assert run(gate(2, forced=MESSAGE + END), [10, 11, 12]) == [10, 11, 9, 3, 4, 12]


def test_a_zero_budget_ends_an_opened_thinking_before_the_first_token() -> None:
    assert run(gate(0), [10, 11]) == [3, 4, 10, 11]


def test_counting_starts_at_the_start_tag_when_the_prompt_did_not_open_it() -> None:
    assert run(gate(2, opened=False), [10, 1, 2, 11, 12, 13]) == [10, 1, 2, 11, 12, 3, 4, 13]


def test_a_thinking_that_ends_by_itself_is_left_alone() -> None:
    budget = gate(5)
    assert run(budget, [10, 3, 4, 11, 12, 13, 14]) == [10, 3, 4, 11, 12, 13, 14]
    assert budget.phase is Phase.DONE


def test_end_now_forces_the_end_only_while_thinking() -> None:
    budget = gate(-1, opened=False)
    assert not budget.end_now()
    budget.feed(1)
    budget.feed(2)
    budget.feed(10)
    assert budget.end_now() and budget.forced() == 3
    assert run(budget, [11]) == [3, 4, 11]


THINKING_TEMPLATE = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant><think>"


@pytest.mark.parametrize(("fields", "reasoning"), [
    ({"reasoning_budget_tokens": 3}, JAPANESE[:1]),  # 3 bytes: one character, then </think>
    ({"thinking_budget_tokens": 3, "reasoning_budget_message": "!"}, JAPANESE[:1] + "!"),
    ({"reasoning_budget_tokens": 0}, ""),
])
def test_a_chat_thinks_within_its_budget(fields: dict[str, Any], reasoning: str) -> None:
    """The fake model answers after the last '>': the forced </think> makes it start its answer again."""
    app = make_application("--chat-template", THINKING_TEMPLATE)
    try:
        reply = app.flask.test_client().post("/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 30, **fields}).get_json()
        message = reply["choices"][0]["message"]
        assert message.get("reasoning_content", "") == reasoning
        assert message["content"].startswith(JAPANESE[:3])
    finally:
        app.shutdown()


def test_the_server_budget_and_the_anthropic_thinking_budget() -> None:
    app = make_application("--chat-template", THINKING_TEMPLATE, "--reasoning-budget", "3")
    try:
        client = app.flask.test_client()
        chat = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "Hi"}],
                                                          "max_tokens": 30}).get_json()
        assert chat["choices"][0]["message"]["reasoning_content"] == JAPANESE[:1]
        messages = client.post("/v1/messages", json={"max_tokens": 40, "messages": [{"role": "user", "content": "Hi"}],
                                                     "thinking": {"type": "enabled", "budget_tokens": 6}}).get_json()
        thinking = next(block for block in messages["content"] if block["type"] == "thinking")
        assert thinking["thinking"] == JAPANESE[:2]
    finally:
        app.shutdown()


def test_control_answers_for_unknown_completions() -> None:
    app = make_application()
    try:
        client = app.flask.test_client()
        assert client.post("/v1/chat/completions/control", json={"id": "chatcmpl-x", "action": "reasoning_end"}
                           ).get_json() == {"success": False, "message": "no active completion for this id"}
        bad = client.post("/v1/chat/completions/control", json={"id": "x", "action": "stop"})
        assert bad.status_code == 400 and "unknown control action" in bad.get_json()["error"]["message"]
        missing = client.post("/v1/chat/completions/control", json={"action": "reasoning_end"})
        assert missing.status_code == 400 and "missing completion id" in missing.get_json()["error"]["message"]
    finally:
        app.shutdown()
