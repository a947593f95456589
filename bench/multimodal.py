"""How long other streams stall while a request's image is encoded and decoded.

    .venv/bin/python bench/multimodal.py [--images 4] [--image-size 224] [--layers 6]

One server (the embedded model, a generated CLIP-style projector whose size is set by the flags:
224 px in 14 px patches gives 256 image tokens), two slots. A text stream generates 256 tokens
(``ignore_eos``); meanwhile images are sent one after the other, each in its own chat request. The
table gives the stream's inter-token gaps without images, while an image was being processed, and
while a text prompt of about the same length was (the same requests without the image), and the
prompt times of both kinds. Not a test: timings on shared machines are noisy.
"""

from __future__ import annotations

import argparse
import base64
import io
import itertools
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.report import free_port, running  # noqa: E402
from tests.projectors import make_vision_projector  # noqa: E402


def image_uri(seed: int) -> str:
    buffer = io.BytesIO()
    Image.effect_noise((320, 240), 40 + seed).convert("RGB").save(buffer, "PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def stream_gaps(base: str, tokens: int, arrivals: list[float]) -> None:
    body = {"messages": [{"role": "user", "content": "Tell a long story."}], "max_tokens": tokens,
            "ignore_eos": True, "temperature": 0, "stream": True}
    with requests.post(base + "/v1/chat/completions", json=body, stream=True, timeout=600) as response:
        for line in response.iter_lines(decode_unicode=True):
            if line.startswith("data: {") and json.loads(line[6:]).get("choices"):
                arrivals.append(time.perf_counter())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=4)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        projector = make_vision_projector(Path(scratch) / "mmproj.gguf", image_size=args.image_size, patch_size=14,
                                          n_embd=384, n_layer=args.layers)
        port = free_port()
        command = [sys.executable, "-m", "app", "--port", str(port), "--threads", str(args.threads), "-np", "2",
                   "-c", "4096", "--mmproj", str(projector)]
        with running(command, port, "/health", {}) as server:
            base = server.base
            picture = {"type": "image_url", "image_url": {"url": image_uri(99)}}
            warm = {"messages": [{"role": "user", "content": [picture]}], "max_tokens": 1}
            requests.post(base + "/v1/chat/completions", json=warm, timeout=600).raise_for_status()
            arrivals: list[float] = []
            streamer = threading.Thread(target=stream_gaps, args=(base, 256, arrivals))
            streamer.start()
            while len(arrivals) < 20:
                time.sleep(0.01)
            windows: dict[str, list[tuple[float, float]]] = {"image": [], "text": []}
            prompt_ms: dict[str, list[float]] = {"image": [], "text": []}
            n_prompt: dict[str, int] = {}
            filler = " ".join(["The quick brown fox jumps over the lazy dog."] * 26)
            for seed in range(args.images):
                for kind in ("image", "text"):
                    part = ({"type": "image_url", "image_url": {"url": image_uri(seed)}} if kind == "image"
                            else {"type": "text", "text": f"{seed} {filler}"})
                    content = [{"type": "text", "text": "What is this?"}, part]
                    body = {"messages": [{"role": "user", "content": content}], "max_tokens": 1, "cache_prompt": False}
                    sent = time.perf_counter()
                    reply = requests.post(base + "/v1/chat/completions", json=body, timeout=600)
                    reply.raise_for_status()
                    windows[kind].append((sent, time.perf_counter()))
                    prompt_ms[kind].append(reply.json()["timings"]["prompt_ms"])
                    n_prompt[kind] = reply.json()["usage"]["prompt_tokens"]
                    time.sleep(0.3)
            streamer.join()
    pairs = list(itertools.pairwise(arrivals))

    def gaps(kind: str | None) -> list[float]:
        def inside(a: float, b: float, spans: list[tuple[float, float]]) -> bool:
            return any(start <= b and a <= end for start, end in spans)
        every = windows["image"] + windows["text"]
        return [(b - a) * 1000 for a, b in pairs
                if (inside(a, b, windows[kind]) if kind else not inside(a, b, every))]

    print(f"projector: {args.image_size} px, 14 px patches, 384 wide, {args.layers} layers; prompt tokens: "
          f"{n_prompt['image']} with the image, {n_prompt['text']} with the text instead; {args.threads} threads")
    print("| measure | value |\n|---|---|")
    print(f"| text stream inter-token gap, median without other requests, ms | {statistics.median(gaps(None)):.1f} |")
    for kind, article in (("image", "an"), ("text", "a")):
        longest = max(gaps(kind))
        print(f"| text stream inter-token gap, longest while {article} {kind} prompt is processed, ms "
              f"| {longest:.1f} |")
    for kind in ("image", "text"):
        print(f"| {kind} request prompt time, median ms | {statistics.median(prompt_ms[kind]):.1f} |")

if __name__ == "__main__":
    main()
