"""Predict instances without ``@requestFormat``, in the shapes other Vertex AI containers take, each
answered the way that container answers, so its users' clients read our predictions unchanged.

Routing precedence, the first that applies: ``@requestFormat`` (any route, by alias or path); then
an OpenAI batch row (``custom_id``, ``url``, ``body``: app/vertex/openai_batch.py); then ``messages`` (an
OpenAI chat, as TGI and Model Garden vLLM take it: answered with the chat completion object); then
``inputs`` (Hugging Face TGI: ``parameters`` inside the instance, answered with the generated text
as a string); then ``prompt`` (Model Garden vLLM: sampling fields beside it, answered
``"Prompt:\\n<prompt>\\nOutput:\\n<text>"``, or the text alone with ``raw_response: true``; a list of
strings for ``n`` > 1).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

TGI_PARAMETERS = {"max_new_tokens": "n_predict", "temperature": "temperature", "top_p": "top_p", "top_k": "top_k",
                  "seed": "seed", "stop": "stop", "repetition_penalty": "repeat_penalty", "typical_p": "typical_p"}
VLLM_RENAMES = {"max_tokens": "n_predict"}
VLLM_OWN = ("prompt", "stream", "raw_response")


@dataclass(frozen=True)
class Shape:
    key: str  # the field that identifies the shape
    path: str  # the route that answers it
    request: Callable[[dict[str, Any]], dict[str, Any]]  # the instance as that route's body
    prediction: Callable[[dict[str, Any], Any], Any]  # (instance, the route's answer) as the prediction


def _as_is(instance: dict[str, Any]) -> dict[str, Any]:
    return instance


def _answer_as_is(instance: dict[str, Any], answer: Any) -> Any:
    return answer


def _texts(answer: Any) -> list[str]:
    answers = answer if isinstance(answer, list) else [answer]
    return [str(item.get("content", "")) for item in answers if isinstance(item, dict)]


def tgi_request(instance: dict[str, Any]) -> dict[str, Any]:
    parameters = instance.get("parameters") or {}
    body: dict[str, Any] = {"prompt": instance["inputs"]}
    if isinstance(parameters, dict):
        body.update({ours: parameters[theirs] for theirs, ours in TGI_PARAMETERS.items() if theirs in parameters})
        if parameters.get("do_sample") is False:
            body["temperature"] = 0.0
    return body


def tgi_prediction(instance: dict[str, Any], answer: Any) -> Any:
    texts = _texts(answer)
    return texts[0] if len(texts) == 1 else texts


def vllm_request(instance: dict[str, Any]) -> dict[str, Any]:
    body = {VLLM_RENAMES.get(key, key): value for key, value in instance.items() if key not in VLLM_OWN}
    return {"prompt": instance["prompt"], **body}


def vllm_prediction(instance: dict[str, Any], answer: Any) -> Any:
    texts = _texts(answer)
    if not instance.get("raw_response"):
        texts = [f"Prompt:\n{instance['prompt']}\nOutput:\n{text}" for text in texts]
    return texts[0] if len(texts) == 1 else texts


SHAPES: tuple[Shape, ...] = (
    Shape("messages", "/v1/chat/completions", _as_is, _answer_as_is),
    Shape("inputs", "/completion", tgi_request, tgi_prediction),
    Shape("prompt", "/completion", vllm_request, vllm_prediction),
)


def shape_of(instance: dict[str, Any]) -> Shape | None:
    return next((shape for shape in SHAPES if shape.key in instance), None)
