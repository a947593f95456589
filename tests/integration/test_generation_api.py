"""The full generation API with the official SDKs: n > 1, log-probabilities, structured output,
grammars, tools, reasoning, OpenAI Responses (on the embedded model's own template)."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import openai
import pytest
import requests
from openai.types.chat import ChatCompletionFunctionToolParam
from openai.types.responses import ResponseFormatTextJSONSchemaConfigParam
from pydantic import BaseModel

from tests.integration.conftest import Server

WEATHER_PARAMETERS: dict[str, object] = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["C", "F"]}},
    "required": ["city", "unit"],
}
WEATHER_TOOL: ChatCompletionFunctionToolParam = {
    "type": "function",
    "function": {"name": "get_weather", "description": "Get the current weather in a city",
                 "parameters": WEATHER_PARAMETERS},
}
TIME_TOOL: ChatCompletionFunctionToolParam = {  # a bounded string: the call always closes within max_tokens
    "type": "function",
    "function": {"name": "get_time", "description": "Get the time in a timezone",
                 "parameters": {"type": "object", "properties": {"zone": {"type": "string", "maxLength": 40}},
                                "required": ["zone"]}},
}


@pytest.fixture
def client(vertex_server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=vertex_server.url("/v1"), api_key="unused", max_retries=0)


def post(server: Server, path: str, body: Any) -> requests.Response:
    return requests.post(server.url(path), json=body, timeout=120)


def test_n_completions_for_one_prompt(client: openai.OpenAI) -> None:
    messages = [{"role": "user", "content": "Invent a name for a cat."}]
    many = client.chat.completions.create(model="m", messages=messages, max_tokens=12, n=3, seed=5,  # type: ignore[arg-type]
                                          temperature=1.0)
    assert [choice.index for choice in many.choices] == [0, 1, 2]
    assert all(choice.message.content for choice in many.choices)
    assert len({choice.message.content for choice in many.choices}) > 1
    one = client.chat.completions.create(model="m", messages=messages, max_tokens=12)  # type: ignore[arg-type]
    assert many.usage is not None and one.usage is not None
    assert many.usage.prompt_tokens == one.usage.prompt_tokens
    assert many.usage.completion_tokens >= 3 * 1
    again = client.chat.completions.create(model="m", messages=messages, max_tokens=12, n=3, seed=5,  # type: ignore[arg-type]
                                           temperature=1.0)
    assert [c.message.content for c in again.choices] == [c.message.content for c in many.choices]


def test_n_completions_in_text_completions_and_streams(client: openai.OpenAI) -> None:
    result = client.completions.create(model="m", prompt="Once upon a time", max_tokens=6, n=2)
    assert sorted(choice.index for choice in result.choices) == [0, 1]
    stream = client.completions.create(model="m", prompt="Once upon a time", max_tokens=6, n=2, stream=True)
    texts: dict[int, str] = {}
    for chunk in stream:
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + choice.text
    assert sorted(texts) == [0, 1]


def test_chat_logprobs(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "Say hello"}], max_tokens=8, temperature=0,
        logprobs=True, top_logprobs=3,
    )
    choice = completion.choices[0]
    assert choice.logprobs is not None and choice.logprobs.content
    entries = choice.logprobs.content
    assert "".join(entry.token for entry in entries) == choice.message.content
    for entry in entries:
        assert entry.logprob <= 0
        assert len(entry.top_logprobs) == 3
        assert entry.top_logprobs[0].logprob >= entry.top_logprobs[-1].logprob
        assert entry.top_logprobs[0].token == entry.token  # greedy picks the most likely token
        assert entry.bytes == list(entry.token.encode())


def test_chat_logprobs_stream(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "Say hello"}], max_tokens=6, temperature=0,
        logprobs=True, top_logprobs=2, stream=True,
    )
    entries = [entry for chunk in stream for choice in chunk.choices if choice.logprobs
               for entry in choice.logprobs.content or []]
    assert len(entries) >= 1 and all(len(entry.top_logprobs) == 2 for entry in entries)


def test_completion_logprobs_and_native_probabilities(vertex_server: Server, client: openai.OpenAI) -> None:
    result = client.completions.create(model="m", prompt="The sky is", max_tokens=4, temperature=0, logprobs=2)
    logprobs = result.choices[0].logprobs
    assert logprobs is not None and logprobs.tokens and logprobs.token_logprobs
    assert "".join(logprobs.tokens) == result.choices[0].text
    assert logprobs.top_logprobs is not None and len(logprobs.top_logprobs) == len(logprobs.tokens)
    assert all(len(top) >= 1 for top in logprobs.top_logprobs)
    native = post(vertex_server, "/completion", {"prompt": "The sky is", "n_predict": 4, "n_probs": 3,
                                                 "temperature": 0}).json()
    probs = native["completion_probabilities"]
    assert len(probs) == native["tokens_predicted"]
    assert all(set(p) >= {"id", "token", "bytes", "logprob", "top_logprobs"} for p in probs)
    post_probs = post(vertex_server, "/completion", {"prompt": "The sky is", "n_predict": 4, "n_probs": 3,
                                                     "post_sampling_probs": True, "top_k": 2}).json()
    for entry in post_probs["completion_probabilities"]:
        assert 0 < entry["prob"] <= 1
        assert 1 <= len(entry["top_probs"]) <= 2  # top_k 2 leaves two candidates at most
        assert abs(sum(top["prob"] for top in entry["top_probs"]) - 1.0) < 1e-3


class City(BaseModel):
    name: str
    country: str
    population: int


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_parse_with_a_pydantic_model(client: openai.OpenAI, seed: int) -> None:
    completion = client.chat.completions.parse(
        model="m", messages=[{"role": "user", "content": "Describe a big city as JSON."}],
        response_format=City, max_tokens=120, seed=seed, temperature=0.7,
    )
    parsed = completion.choices[0].message.parsed
    assert isinstance(parsed, City)
    assert parsed.name and parsed.country


SCHEMA = {
    "type": "object",
    "properties": {
        "answer": {"type": "string", "maxLength": 30},
        "confidence": {"type": "integer", "minimum": 0, "maximum": 100},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b", "c"]}, "maxItems": 3},
    },
    "required": ["answer", "confidence", "tags"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(("prompt", "seed"), [("Is water wet?", 1), ("Name a colour.", 2), ("2+2?", 3)])
def test_json_schema_output_matches_the_schema(vertex_server: Server, prompt: str, seed: int) -> None:
    native = post(vertex_server, "/completion", {"prompt": prompt, "json_schema": SCHEMA, "n_predict": 200,
                                                 "seed": seed, "temperature": 0.8}).json()
    jsonschema.validate(json.loads(native["content"]), SCHEMA)
    chat = post(vertex_server, "/v1/chat/completions", {
        "messages": [{"role": "user", "content": prompt}], "max_tokens": 200, "seed": seed,
        "response_format": {"type": "json_schema", "json_schema": {"name": "reply", "schema": SCHEMA}},
    }).json()
    jsonschema.validate(json.loads(chat["choices"][0]["message"]["content"]), SCHEMA)
    bounded = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    any_object = post(vertex_server, "/v1/chat/completions", {
        "messages": [{"role": "user", "content": prompt}], "max_tokens": 100, "seed": seed,
        "response_format": {"type": "json_object", "schema": bounded},
    }).json()
    jsonschema.validate(json.loads(any_object["choices"][0]["message"]["content"]), bounded)


def test_json_object_without_a_schema(vertex_server: Server) -> None:
    reply = post(vertex_server, "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Describe the weather as a JSON object."}], "max_tokens": 200,
        "temperature": 0, "response_format": {"type": "json_object"},
    }).json()
    choice = reply["choices"][0]
    content = choice["message"]["content"]
    # The grammar guarantees an object: a whole one if the model stops, else one cut at max_tokens
    # (whether the 135M model closes it within 200 greedy tokens depends on the CPU's kernels).
    assert content.lstrip().startswith("{")
    if choice["finish_reason"] == "stop":
        assert isinstance(json.loads(content), dict)
    else:
        assert choice["finish_reason"] == "length" and reply["usage"]["completion_tokens"] == 200


def test_a_json_schema_answer_has_no_raw_control_characters(vertex_server: Server) -> None:
    """Pushed hard toward newlines, the model still writes a JSON string without a raw one."""
    schema = {"type": "object", "properties": {"note": {"type": "string"}}, "required": ["note"]}
    body = post(vertex_server, "/completion", {"prompt": "Write a JSON note:", "json_schema": schema,
                                               "logit_bias": [["\n", 15]], "temperature": 0,
                                               "n_predict": 24}).json()
    assert not any(ord(char) < 0x20 for char in body["content"].strip()), body["content"]
    if body["stop_type"] == "eos":
        assert isinstance(json.loads(body["content"])["note"], str)


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_gbnf_grammar(vertex_server: Server, seed: int) -> None:
    body = post(vertex_server, "/completion", {"prompt": "Is the sky blue? Answer:", "grammar":
                                               'root ::= ("yes" | "no") "."', "seed": seed,
                                               "temperature": 1.0, "n_predict": 10}).json()
    assert body["content"] in ("yes.", "no.")
    assert body["stop_type"] == "eos"


def test_reasoning_is_split_out(vertex_server: Server) -> None:
    grammar = 'root ::= "<think>" [a-z ]{3,20} "</think>" "Paris"'
    request = {"messages": [{"role": "user", "content": "Capital of France?"}], "grammar": grammar, "temperature": 0,
               "max_tokens": 40}
    split = post(vertex_server, "/v1/chat/completions", request).json()["choices"][0]["message"]
    assert split["content"] == "Paris"
    assert split["reasoning_content"] and "<think>" not in split["reasoning_content"]
    kept = post(vertex_server, "/v1/chat/completions", {**request, "reasoning_format": "none"}).json()
    assert kept["choices"][0]["message"]["content"].startswith("<think>")
    with requests.post(vertex_server.url("/v1/chat/completions"), json={**request, "stream": True}, stream=True,
                       timeout=60) as response:
        deltas = [json.loads(line[6:]) for line in response.iter_lines(decode_unicode=True)
                  if line.startswith("data: {")]
    reasoning = "".join(d["choices"][0]["delta"].get("reasoning_content", "") for d in deltas if d["choices"])
    content = "".join(d["choices"][0]["delta"].get("content") or "" for d in deltas if d["choices"])
    assert content == "Paris"
    assert reasoning.strip() == split["reasoning_content"]


def check_call(call: Any, names: set[str]) -> dict[str, Any]:
    assert call.type == "function"
    assert call.id
    assert call.function.name in names
    arguments = json.loads(call.function.arguments)
    tool = {"get_weather": WEATHER_TOOL, "get_time": TIME_TOOL}[call.function.name]
    jsonschema.validate(arguments, tool["function"]["parameters"])
    return arguments  # type: ignore[no-any-return]


@pytest.mark.parametrize("seed", [1, 2])
def test_required_tool_call_is_valid(client: openai.OpenAI, seed: int) -> None:
    completion = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "What's the weather in Paris?"}],
        tools=[WEATHER_TOOL, TIME_TOOL], tool_choice="required", max_tokens=100, seed=seed,
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls
    for call in choice.message.tool_calls:
        check_call(call, {"get_weather", "get_time"})


def test_named_tool_call_and_round_trip(client: openai.OpenAI) -> None:
    messages: list[Any] = [{"role": "user", "content": "What time is it in Tokyo?"}]
    completion = client.chat.completions.create(
        model="m", messages=messages, tools=[WEATHER_TOOL, TIME_TOOL], max_tokens=100,
        tool_choice={"type": "function", "function": {"name": "get_time"}},
    )
    message = completion.choices[0].message
    assert message.tool_calls and len(message.tool_calls) == 1
    call = message.tool_calls[0]
    check_call(call, {"get_time"})
    messages += [
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "10:42"},
    ]
    answer = client.chat.completions.create(model="m", messages=messages, tools=[TIME_TOOL],
                                            tool_choice="none", max_tokens=20)
    assert answer.choices[0].message.content
    assert answer.choices[0].message.tool_calls is None


def test_streamed_tool_calls(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "Weather in Rome?"}], tools=[WEATHER_TOOL],
        tool_choice="required", max_tokens=100, stream=True,
    )
    calls: dict[int, dict[str, str]] = {}
    finish = None
    for chunk in stream:
        for choice in chunk.choices:
            for delta in choice.delta.tool_calls or []:
                entry = calls.setdefault(delta.index, {"name": "", "arguments": ""})
                if delta.function and delta.function.name:
                    entry["name"] += delta.function.name
                if delta.function and delta.function.arguments:
                    entry["arguments"] += delta.function.arguments
            finish = choice.finish_reason or finish
    assert finish == "tool_calls"
    assert calls[0]["name"] == "get_weather"
    jsonschema.validate(json.loads(calls[0]["arguments"]), WEATHER_PARAMETERS)


def test_responses_create_and_stream(client: openai.OpenAI) -> None:
    response = client.responses.create(model="m", input="Say hello to the world.", max_output_tokens=16,
                                       temperature=0)
    assert response.object == "response" and response.id.startswith("resp_")
    assert response.output_text
    assert response.usage is not None and response.usage.output_tokens > 0
    if response.usage.output_tokens == 16:  # cut by max_output_tokens, as OpenAI reports it
        assert response.status == "incomplete"
        assert response.incomplete_details is not None and response.incomplete_details.reason == "max_output_tokens"
    else:
        assert response.status == "completed" and response.incomplete_details is None
    events = list(client.responses.create(model="m", input="Say hello to the world.", max_output_tokens=16,
                                          temperature=0, stream=True))
    kinds = [event.type for event in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == f"response.{response.status}"
    for kind in ("response.output_item.added", "response.content_part.added", "response.output_text.delta",
                 "response.output_text.done", "response.content_part.done", "response.output_item.done"):
        assert kind in kinds
    text = "".join(event.delta for event in events if event.type == "response.output_text.delta")
    assert text == response.output_text
    final = events[-1].response  # type: ignore[union-attr]
    assert final.output_text == text
    item_ids = {event.item_id for event in events if hasattr(event, "item_id")}
    assert len(item_ids) == 1


def test_responses_stream_helper_and_tools(client: openai.OpenAI) -> None:
    greeting: ResponseFormatTextJSONSchemaConfigParam = {
        "type": "json_schema", "name": "greeting", "strict": True, "schema": {
            "type": "object", "properties": {"greeting": {"type": "string", "enum": ["hi"]}},
            "required": ["greeting"], "additionalProperties": False}}
    # The schema's grammar ends the answer, so it completes on every CPU.
    with client.responses.stream(model="m", input="Say hi", max_output_tokens=64, temperature=0,
                                 text={"format": greeting}) as stream:
        for _ in stream:
            pass
        final = stream.get_final_response()
    assert final.status == "completed" and json.loads(final.output_text) == {"greeting": "hi"}
    with client.responses.stream(model="m", input="Say hi", max_output_tokens=2, temperature=0,
                                 text={"format": greeting}) as stream:
        last = list(stream)[-1]
    assert last.type == "response.incomplete"
    assert last.response.incomplete_details is not None
    assert last.response.incomplete_details.reason == "max_output_tokens"
    called = client.responses.create(
        model="m", input="What's the weather in Oslo?", max_output_tokens=100,
        tools=[{"type": "function", "name": "get_weather", "parameters": WEATHER_PARAMETERS, "strict": False}],
        tool_choice="required",
    )
    calls = [item for item in called.output if item.type == "function_call"]
    assert calls and calls[0].name == "get_weather"
    json.loads(calls[0].arguments)


def test_input_token_counts(vertex_server: Server) -> None:
    messages = [{"role": "user", "content": "Count my tokens"}]
    prompt = post(vertex_server, "/apply-template", {"messages": messages}).json()["prompt"]
    expected = len(post(vertex_server, "/tokenize", {"content": prompt}).json()["tokens"])
    chat = post(vertex_server, "/v1/chat/completions/input_tokens", {"messages": messages}).json()
    assert chat == {"input_tokens": expected, "object": "response.input_tokens"}
    responses = post(vertex_server, "/v1/responses/input_tokens", {"input": "Count my tokens"}).json()
    assert responses == {"input_tokens": expected, "object": "response.input_tokens"}


def test_sampler_fields_are_honoured(vertex_server: Server) -> None:
    body = {"prompt": "Once", "n_predict": 8, "seed": 3, "samplers": "kt", "mirostat": 0, "dry_multiplier": 0.8,
            "xtc_probability": 0.5, "xtc_threshold": 0.1, "dynatemp_range": 0.5, "top_n_sigma": 1.5}
    reply = post(vertex_server, "/completion", body).json()
    settings = reply["generation_settings"]
    assert settings["samplers"] == ["top_k", "temperature"]
    assert settings["dry_multiplier"] == 0.8 and settings["xtc_probability"] == 0.5
    assert settings["top_n_sigma"] == 1.5 and settings["dynatemp_range"] == 0.5
    assert post(vertex_server, "/completion", {**body, "mirostat": 2}).json()["generation_settings"]["mirostat"] == 2
    assert post(vertex_server, "/completion", body).json()["content"] == reply["content"]


def test_generation_endpoints_through_predict(vertex_server: Server) -> None:
    instances = [
        {"@requestFormat": "chatCompletions", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4,
         "n": 2},
        {"@requestFormat": "responses", "input": "Hi", "max_output_tokens": 4},
        {"@requestFormat": "messages", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4},
        {"@requestFormat": "messagesCountTokens", "messages": [{"role": "user", "content": "Hi"}]},
        {"@requestFormat": "chatCompletionsInputTokens", "messages": [{"role": "user", "content": "Hi"}]},
        {"@requestFormat": "infill", "input_prefix": "def f(", "input_suffix": ")"},
    ]
    predictions = post(vertex_server, "/predict", {"instances": instances}).json()["predictions"]
    assert len(predictions[0]["choices"]) == 2
    assert predictions[1]["object"] == "response"
    assert predictions[2]["type"] == "message"
    assert predictions[3]["input_tokens"] > 0
    assert predictions[4]["object"] == "response.input_tokens"
    assert predictions[5]["error"]["code"] == 501
