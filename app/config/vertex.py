"""Vertex AI's prediction route: the default route, the deadline, the answer's size, what it reaches."""

from __future__ import annotations

from dataclasses import dataclass

from app.config.options import option


@dataclass(frozen=True)
class VertexSettings:
    """Vertex AI's prediction route: the default route, the deadline, the answer's size, what it reaches."""

    predict_default_route: str = option(("--predict-default-route",), "str", "/v1/chat/completions",
        "on Vertex AI, the route that answers a predict body that is not an instances envelope "
        "(:rawPredict, :streamRawPredict)", env="LLAMA_ARG_PREDICT_DEFAULT_ROUTE", metavar="PATH")
    predict_deadline: float = option(("--predict-deadline",), "float", 0.0,
        "end every generation this many seconds after it was submitted, returning what it has "
        "(finish_reason length): set it below the endpoint's time limit (0: no deadline)",
        env="LLAMA_ARG_PREDICT_DEADLINE", minimum=0, metavar="SECONDS")
    max_response_bytes: int = option(("--max-response-bytes",), "int", 0,
        "largest /predict answer (an error naming the limit above it): a shared Vertex AI endpoint takes "
        "1.5 MB (0: no limit)", env="LLAMA_ARG_MAX_RESPONSE_BYTES", minimum=0, metavar="BYTES")
    predict_slots: bool = option(("--predict-slots",), "bool", False,
        "let a predict instance reach /slots (@requestFormat: slots, and the slot actions); off: a predict "
        "caller never sees or touches the slots, whatever --slots and --slots-debug say", env="LLAMA_ARG_PREDICT_SLOTS",
        negative_flags=("--no-predict-slots",))

    predictions_format: str = option(("--predictions-format",), "choice", "llama-server",
        "how /predict answers a request of exactly one chat-completion instance: llama-server (a list of "
        "one, as llama-server and every other instance) or model-garden (the chat completion object itself, "
        "as Model Garden's vLLM container answers: code that reads predictions[\"choices\"] works unchanged)",
        env="LLAMA_ARG_PREDICTIONS_FORMAT", choices=("llama-server", "model-garden"))

    def check(self) -> None:
        """Nothing beyond the options' own bounds."""
