"""Load the embedded model with the installed llama.cpp build and generate a few greedy tokens;
print which CPU backend variant ggml picked and the tokens, as JSON. The CPU-dispatch test runs
this under QEMU's emulation of older x86-64 CPUs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.engine.backend import BatchToken
from app.engine.llama import LlamaBackend, LlamaConfig, loaded_cpu_variant
from app.engine.types import SamplingParams
from app.model_sources.files import embedded_model_path


def main(n_tokens: int = 8) -> None:
    backend = LlamaBackend(LlamaConfig(model_path=str(embedded_model_path()), n_ctx=256, n_seq=1))
    sampler = backend.new_sampler(SamplingParams(temperature=0))
    prompt = backend.vocab.tokenize("The capital of France is", True, False)
    backend.decode([BatchToken(token, pos, 0, pos == len(prompt) - 1) for pos, token in enumerate(prompt)])
    generated: list[int] = []
    logits_index = len(prompt) - 1  # the batch row that holds the logits
    for pos in range(len(prompt), len(prompt) + n_tokens):
        token = sampler.sample(logits_index).token
        generated.append(token)
        backend.decode([BatchToken(token, pos, 0, True)])
        logits_index = 0
    sampler.free()
    text = b"".join(backend.vocab.piece(token, False) for token in generated).decode("utf-8", "replace")
    backend.close()
    print(json.dumps({"variant": loaded_cpu_variant(), "tokens": generated, "text": text}))


if __name__ == "__main__":
    main()
