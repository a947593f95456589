"""The same rows over gRPC (``--grpc-port``) as over HTTP, on one server, in the same run: each row prints
both and the ratio gRPC / HTTP (above 1 is gRPC ahead for a rate, behind for seconds).

    .venv/bin/python bench/grpc_door.py [--max-tokens 32] [--rounds 3] [--light 300]

Rows: a light predict (one tokenize instance) a request after another (requests/s); 8 chats one after
another, 8 at once, and as the 8 instances of one predict (seconds); 8 streamed chats at once (content
chunks/s, and the mean seconds to the first chunk). Not a test.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import requests
from google.protobuf import json_format, struct_pb2

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.model_sources.files import embedded_model_path  # noqa: E402
from bench.report import QUESTIONS, best, chat_body, free_port, running, stream_chat  # noqa: E402

SERVICE = "/vertex_llama.v1.Llama/"
TOKENIZE = {"instances": [{"@requestFormat": "tokenize", "content": "Tokenize this request, please."}]}


class GrpcClient:
    def __init__(self, target: str) -> None:
        self.channel = grpc.insecure_channel(target)

    def unary(self, method: str, body: dict[str, Any]) -> dict[str, Any]:
        call = self.channel.unary_unary(SERVICE + method, request_serializer=struct_pb2.Struct.SerializeToString,
                                        response_deserializer=struct_pb2.Struct.FromString)
        message = struct_pb2.Struct()
        message.update(body)
        return json_format.MessageToDict(call(message, timeout=600))

    def stream_chat(self, question: str, max_tokens: int) -> tuple[int, float]:
        call = self.channel.unary_stream(SERVICE + "StreamChatCompletions",
                                         request_serializer=struct_pb2.Struct.SerializeToString,
                                         response_deserializer=struct_pb2.Struct.FromString)
        message = struct_pb2.Struct()
        message.update(chat_body(question, max_tokens, True))
        started, first, chunks = time.perf_counter(), 0.0, 0
        for event in call(message, timeout=600):
            choices = event.fields["choices"].list_value.values if "choices" in event.fields else []
            if choices and choices[0].struct_value.fields["delta"].struct_value.fields["content"].string_value:
                chunks += 1
                first = first or time.perf_counter() - started
        return chunks, first


def http_rows(base: str, max_tokens: int, light: int) -> dict[str, Callable[[], float]]:
    def chat(question: str) -> None:
        requests.post(base + "/v1/chat/completions", json=chat_body(question, max_tokens, False),
                      timeout=600).raise_for_status()

    def predict(body: dict[str, Any]) -> None:
        requests.post(base + "/predict", json=body, timeout=600).raise_for_status()

    return rows(chat, predict, lambda q: stream_chat(base, q, max_tokens), max_tokens, light)


def grpc_rows(client: GrpcClient, max_tokens: int, light: int) -> dict[str, Callable[[], float]]:
    return rows(lambda q: client.unary("ChatCompletions", chat_body(q, max_tokens, False)),
                lambda body: client.unary("Predict", body), lambda q: client.stream_chat(q, max_tokens),
                max_tokens, light)


def rows(chat: Callable[[str], Any], predict: Callable[[dict[str, Any]], Any],
         stream: Callable[[str], tuple[int, float]], max_tokens: int, light: int) -> dict[str, Callable[[], float]]:
    def timed(work: Callable[[], Any]) -> float:
        started = time.perf_counter()
        work()
        return time.perf_counter() - started

    def light_rps() -> float:
        return light / timed(lambda: [predict(TOKENIZE) for _ in range(light)])

    def at_once(work: Callable[[str], Any]) -> list[Any]:
        with ThreadPoolExecutor(len(QUESTIONS)) as pool:
            return list(pool.map(work, QUESTIONS))

    instances = [{"@requestFormat": "chatCompletions", **chat_body(q, max_tokens, False)} for q in QUESTIONS]
    streamed: list[tuple[int, float]] = []

    def streams_rate() -> float:
        seconds = timed(lambda: streamed.extend(at_once(stream)))
        return sum(chunks for chunks, _ in streamed[-len(QUESTIONS):]) / seconds

    return {
        "light predict (tokenize), req/s": light_rps,
        "8 chats one after another, s": lambda: timed(lambda: [chat(q) for q in QUESTIONS]),
        "8 chats at once, s": lambda: timed(lambda: at_once(chat)),
        "predict of 8 chat instances, s": lambda: timed(lambda: predict({"instances": instances})),
        "8 streams, chunks/s": streams_rate,
        "8 streams, first chunk s (mean)": lambda: streams_rate() and statistics.mean(
            first for _, first in streamed[-len(QUESTIONS):]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--light", type=int, default=300, help="light predicts a round")
    args = parser.parse_args()
    port, grpc_port = free_port(), free_port()
    command = [sys.executable, "-m", "app", "-m", str(embedded_model_path()), "-np", "8", "-c", "8192",
               "--port", str(port), "--grpc-port", str(grpc_port)]
    env = {"AIP_MODE": "PREDICTION", "AIP_PREDICT_ROUTE": "/predict", "AIP_HTTP_PORT": str(port)}
    with running(command, port, "/health", env) as server:
        client = GrpcClient(f"127.0.0.1:{grpc_port}")
        over_http = http_rows(server.base, args.max_tokens, args.light)
        over_grpc = grpc_rows(client, args.max_tokens, args.light)
        print(f"{'row':36} {'HTTP':>10} {'gRPC':>10} {'gRPC/HTTP':>10}")
        for name, measure in over_http.items():
            higher = "/s" in name and "first" not in name
            http_value = best(args.rounds, measure, higher)
            grpc_value = best(args.rounds, over_grpc[name], higher)
            print(f"{name:36} {http_value:10.3f} {grpc_value:10.3f} {grpc_value / http_value:10.2f}")


if __name__ == "__main__":
    main()
