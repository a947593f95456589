"""Images through --mmproj on a real server: the embedded SmolLM2 model with a generated LLaVA-style
projector (random weights: what the model says about an image means nothing, but libmtmd's real
preprocessing, encoding and decoding run). Every dialect's image shape, Vertex instances, the cache,
batching, and a 400 naming the part for every bad input."""

from __future__ import annotations

import base64
import http.server
import io
import json
import os
import struct
import threading
import wave
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
import requests
from PIL import Image

from app.model_sources.files import embedded_model_path
from tests.integration.conftest import Server, launch, start
from tests.projectors import make_audio_projector, make_vision_projector

IMAGE_TOKENS = 16  # the generated projector: (32 / 8) ** 2 patches per image
AUDIO_TOKENS = 750  # the generated audio projector: a 30 s window of 3000 mel frames, halved twice


def png(color: tuple[int, int, int], size: tuple[int, int] = (40, 30)) -> bytes:
    buffer = io.BytesIO()
    image = Image.new("RGB", size, color)
    image.putpixel((1, 1), (255 - color[0], 255 - color[1], 255 - color[2]))
    image.save(buffer, "PNG")
    return buffer.getvalue()


def data_uri(data: bytes, kind: str = "image/png") -> str:
    return f"data:{kind};base64,{base64.b64encode(data).decode()}"


def wav(step: int = 37) -> bytes:
    """A tenth of a second of a sawtooth, 16 kHz mono."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(16000)
        out.writeframes(b"".join(struct.pack("<h", (i * step) % 2000 - 1000) for i in range(1600)))
    return buffer.getvalue()


RED, BLUE = png((200, 20, 20)), png((20, 20, 200))


@pytest.fixture(scope="module")
def media_dir(server_dir: Path) -> Path:
    directory = server_dir / "media"
    directory.mkdir()
    (directory / "red.png").write_bytes(RED)
    return directory


@pytest.fixture(scope="module")
def decoy_bin(server_dir: Path) -> Path:
    """ffprobe and ffmpeg stand-ins on the server's PATH that leave a mark when run: libmtmd's video
    path hands them the bytes it cannot decode itself, and only a video container may reach them."""
    directory = server_dir / "decoy-bin"
    directory.mkdir()
    for name in ("ffprobe", "ffmpeg"):
        script = directory / name
        script.write_text(f"#!/bin/sh\ntouch {directory}/ran-{name}\nexit 1\n")
        script.chmod(0o755)
    return directory


@pytest.fixture(scope="module")
def server(server_dir: Path, media_dir: Path, decoy_bin: Path) -> Iterator[Server]:
    projector = make_vision_projector(server_dir / "mmproj-test.gguf")
    # --mtmd-batch-max-tokens under an image's 16 tokens: libmtmd encodes each image over several batches
    running = start(server_dir, ["--mmproj", str(projector), "-np", "2", "-c", "2048", "--mtmd-batch-max-tokens", "4",
                                 "--media-path", str(media_dir)],
                    {"AIP_MODE": "PREDICTION", "PATH": f"{decoy_bin}:{os.environ['PATH']}"})
    yield running
    assert running.stop() == 0, running.log()


def chat(server: Server, content: list[dict[str, Any]], **extra: Any) -> requests.Response:
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": 12, "temperature": 0, **extra}
    return requests.post(server.url("/v1/chat/completions"), json=body, timeout=120)


def image_part(data: bytes) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": data_uri(data)}}


def answer(response: requests.Response) -> str:
    assert response.status_code == 200, response.text[:400]
    text: str = response.json()["choices"][0]["message"]["content"]
    return text


def marker(server: Server) -> str:
    value: str = requests.get(server.url("/props"), timeout=10).json()["media_marker"]
    return value


def test_props_and_models_report_vision(server: Server) -> None:
    props = requests.get(server.url("/props"), timeout=10).json()
    assert props["modalities"] == {"vision": True, "video": True, "audio": False}  # the stand-in ffmpeg is found
    assert props["media_marker"].startswith("<__media_")
    models = requests.get(server.url("/v1/models"), timeout=10).json()
    assert "multimodal" in models["models"][0]["capabilities"]


def test_an_image_adds_the_projectors_tokens_to_the_prompt(server: Server) -> None:
    head, tail = "Look at this: ", " What is it?"
    response = requests.post(server.url("/completion"), json={
        "prompt": {"prompt_string": head + marker(server) + tail, "multimodal_data": [base64.b64encode(RED).decode()]},
        "n_predict": 1, "temperature": 0}, timeout=120)
    assert response.status_code == 200, response.text[:300]

    def count(text: str, add_special: bool) -> int:
        tokens = requests.post(server.url("/tokenize"), json={"content": text, "add_special": add_special},
                               timeout=10).json()["tokens"]
        return len(tokens)

    assert response.json()["tokens_evaluated"] == count(head, True) + IMAGE_TOKENS + count(tail, False)
    assert marker(server) in response.json()["prompt"]


def test_different_images_answer_differently_and_a_repeat_reuses_the_cache(server: Server) -> None:
    text = {"type": "text", "text": "Describe the picture."}
    first = chat(server, [text, image_part(RED)])
    again = chat(server, [text, image_part(RED)])
    other = chat(server, [text, image_part(BLUE)])
    assert answer(first) == answer(again)
    assert answer(first) != answer(other)
    assert again.json()["usage"]["prompt_tokens"] == first.json()["usage"]["prompt_tokens"]
    assert again.json()["timings"]["cache_n"] == again.json()["usage"]["prompt_tokens"] - 1  # image included
    assert first.json()["usage"]["prompt_tokens"] > IMAGE_TOKENS


def test_an_image_prompt_comes_back_from_the_prompt_cache(server: Server) -> None:
    content = [{"type": "text", "text": "Tell me about this picture in detail."}, image_part(BLUE)]
    cold = chat(server, content)
    for topic in ("the sea", "the mountains"):  # both slots taken by other prompts
        assert answer(chat(server, [{"type": "text", "text": f"Write a long poem about {topic}."}]))
    warm = chat(server, content)
    assert answer(warm) == answer(cold)
    assert warm.json()["timings"]["cache_n"] == warm.json()["usage"]["prompt_tokens"] - 1


def test_images_batched_together_answer_as_alone(server: Server) -> None:
    text = {"type": "text", "text": "Name three colours you see."}
    alone = {name: answer(chat(server, [text, image_part(data)], max_tokens=16, cache_prompt=False))
             for name, data in (("red", RED), ("blue", BLUE))}
    together: dict[str, str] = {}

    def ask(name: str, data: bytes) -> None:
        together[name] = answer(chat(server, [text, image_part(data)], max_tokens=16, cache_prompt=False))

    threads = [threading.Thread(target=ask, args=item) for item in (("red", RED), ("blue", BLUE))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert together == alone


def test_a_streamed_chat_with_an_image(server: Server) -> None:
    client = openai.OpenAI(base_url=server.url("/v1"), api_key="none")
    stream = client.chat.completions.create(model="any", max_tokens=8, temperature=0, stream=True, messages=[
        {"role": "user", "content": [{"type": "text", "text": "What is this?"},
                                     {"type": "image_url", "image_url": {"url": data_uri(BLUE)}}]}])
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == answer(chat(server, [{"type": "text", "text": "What is this?"}, image_part(BLUE)], max_tokens=8))


def test_the_openai_sdk_image_shapes(server: Server) -> None:
    client = openai.OpenAI(base_url=server.url("/v1"), api_key="none")
    reply = client.chat.completions.create(model="any", max_tokens=8, temperature=0, messages=[
        {"role": "user", "content": [{"type": "text", "text": "What is this?"},
                                     {"type": "image_url", "image_url": {"url": data_uri(RED), "detail": "low"}}]}])
    assert reply.usage is not None and reply.usage.prompt_tokens > IMAGE_TOKENS
    response = client.responses.create(model="any", max_output_tokens=8, temperature=0, input=[
        {"role": "user", "content": [{"type": "input_text", "text": "What is this?"},
                                     {"type": "input_image", "image_url": data_uri(RED), "detail": "auto"}]}])
    assert response.usage is not None and response.usage.input_tokens > IMAGE_TOKENS
    assert response.output_text


def test_the_anthropic_sdk_image_block(server: Server) -> None:
    client = anthropic.Anthropic(base_url=server.base, api_key="none")
    message = client.messages.create(model="any", max_tokens=8, messages=[{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                     "data": base64.b64encode(RED).decode()}},
        {"type": "text", "text": "What is this?"}]}])
    assert message.usage.input_tokens > IMAGE_TOKENS
    assert message.content and message.content[0].type == "text"


def test_an_image_in_a_vertex_instance(server: Server) -> None:
    content = [{"type": "text", "text": "What is this?"}, image_part(BLUE)]
    response = requests.post(server.url("/predict"), json={"instances": [
        {"@requestFormat": "chatCompletions", "messages": [{"role": "user", "content": content}], "max_tokens": 8,
         "temperature": 0},
        {"@requestFormat": "chatCompletions", "messages": [{"role": "user", "content": [image_part(b"nope")]}]},
    ]}, timeout=120)
    assert response.status_code == 200, response.text[:300]
    good, bad = response.json()["predictions"]
    assert good["choices"][0]["message"]["content"] == answer(chat(server, content, max_tokens=8))
    assert bad["error"]["code"] == 400 and "messages.0.content.0.image_url.url" in bad["error"]["message"]


def test_a_file_under_media_path(server: Server, media_dir: Path) -> None:
    from_file = chat(server, [{"type": "image_url", "image_url": {"url": "file://red.png"}}])
    inline = chat(server, [image_part(RED)])
    assert answer(from_file) == answer(inline)


@pytest.mark.parametrize(("part", "expected"), [
    (image_part(b"this is not an image"), "is not an image, audio or video file"),
    (image_part(RED[: len(RED) // 2]), "truncated"),
    ({"type": "image_url", "image_url": {"url": data_uri(b"GIF89a garbage", "image/gif")}}, "can be decoded"),
    ({"type": "image_url", "image_url": {"url": "data:image/png;base64,@@@"}}, "not valid base64"),
    ({"type": "input_audio", "input_audio": {"data": base64.b64encode(wav()).decode(), "format": "wav"}},
     "takes images only"),
    ({"type": "image_url", "image_url": {"url": "http://127.0.0.1:9/cat.png"}}, "--media-urls"),
    ({"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}, "outside --media-path"),
    ({"type": "image_url", "image_url": {"url": "file://../mmproj-test.gguf"}}, "outside --media-path"),
    ({"type": "image_url", "image_url": {"url": "ftp://host/cat.png"}}, "must be a data: URI"),
    ({"type": "image_url"}, "required"),
    ({"type": "video_url", "video_url": {"url": "x"}}, "not valid base64"),
    ({"type": "input_video", "input_video": {}}, "input_video.url': required"),
    ({"type": "file", "file": {}}, "is not supported"),
])
def test_bad_media_is_a_400_naming_the_part(server: Server, part: dict[str, Any], expected: str) -> None:
    response = chat(server, [{"type": "text", "text": "Look:"}, part])
    assert response.status_code == 400, response.text[:300]
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert "messages.0.content.1" in error["message"] and expected in error["message"], error["message"]
    assert requests.get(server.url("/health"), timeout=10).status_code == 200


def test_only_a_video_container_reaches_the_ffmpeg_on_the_path(server: Server, decoy_bin: Path) -> None:
    for data in (b"RIFF....WEBPVP8 not really", b"\x00\x00\x18ftypmp42 one byte short", b"garbage"):
        assert chat(server, [image_part(data)]).status_code == 400
    assert sorted(path.name for path in decoy_bin.iterdir()) == ["ffmpeg", "ffprobe"]
    response = chat(server, [image_part(b"\x00\x00\x00\x18ftypmp42 not a video")])
    assert response.status_code == 400 and "the video could not be read" in response.json()["error"]["message"]
    assert "ran-ffprobe" in {path.name for path in decoy_bin.iterdir()}


def test_more_media_than_a_slot_holds_is_a_400(server: Server) -> None:
    response = chat(server, [image_part(RED)] * 64)  # 64 x 16 tokens and the text > 1024 per slot (64: the most)
    assert response.status_code == 400, response.text[:300]
    assert response.json()["error"]["type"] == "exceed_context_size_error"
    assert answer(chat(server, [image_part(RED)]))


def test_a_marker_count_that_does_not_match_the_data_is_a_400(server: Server) -> None:
    response = requests.post(server.url("/completion"), json={
        "prompt": {"prompt_string": "no marker here", "multimodal_data": [base64.b64encode(RED).decode()]},
        "n_predict": 1}, timeout=60)
    assert response.status_code == 400
    assert "prompt" in response.json()["error"]["message"] and "media markers" in response.json()["error"]["message"]


def test_an_image_to_a_text_only_model_names_the_flag(vertex_server: Server) -> None:
    response = chat(vertex_server, [{"type": "text", "text": "Look:"}, image_part(RED)])
    assert response.status_code == 400
    message = response.json()["error"]["message"]
    assert "messages.0.content.1.image_url.url" in message and "--mmproj" in message


def test_media_urls_through_the_guarded_fetcher(server_dir: Path) -> None:
    """--media-urls on the real server: an image from an allowed address (here a private one, with
    --media-urls-private) is the inline image; the metadata server, directly or behind a redirect,
    is refused with a 400 that says nothing of what is there, and the server goes on."""
    class Images(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/to-metadata":
                self.send_response(302)
                self.send_header("Location", "http://169.254.169.254/computeMetadata/v1/")
                self.end_headers()
                return
            self.send_response(200)
            self.end_headers()
            self.wfile.write(RED)

        def log_message(self, *args: Any) -> None:
            pass

    images = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Images)
    threading.Thread(target=images.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{images.server_address[1]}"
    projector = make_vision_projector(server_dir / "mmproj-urls.gguf")
    fetching = start(server_dir, ["--mmproj", str(projector), "-np", "1", "-c", "1024", "--media-urls",
                                  "--media-urls-private"])
    try:
        fetched = chat(fetching, [{"type": "image_url", "image_url": {"url": f"{base}/red.png"}}])
        assert fetched.status_code == 200 and answer(fetched) == answer(chat(fetching, [image_part(RED)]))
        for url in ("http://169.254.169.254/computeMetadata/v1/", f"{base}/to-metadata"):
            refused = chat(fetching, [{"type": "image_url", "image_url": {"url": url}}])
            message = refused.json()["error"]["message"]
            assert refused.status_code == 400 and "not used" in message and "169.254" not in message, message
        assert requests.get(fetching.url("/health"), timeout=10).status_code == 200
    finally:
        images.shutdown()
        assert fetching.stop() == 0, fetching.log()


def test_a_file_that_is_not_a_projector_stops_the_server(server_dir: Path) -> None:
    stopped = launch(server_dir, ["--mmproj", str(embedded_model_path()), "-np", "1", "-c", "512"])
    assert stopped.process.wait(120) == 4
    assert "could not load the multimodal projector" in stopped.log()


# ---- audio ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def audio_server(server_dir: Path) -> Iterator[Server]:
    projector = make_audio_projector(server_dir / "mmproj-audio.gguf")
    running = start(server_dir, ["--mmproj", str(projector), "-np", "1", "-c", "2048"])
    yield running
    assert running.stop() == 0, running.log()


def test_an_audio_part_through_an_audio_projector(audio_server: Server) -> None:
    props = requests.get(audio_server.url("/props"), timeout=10).json()
    assert props["modalities"] == {"vision": False, "video": False, "audio": True}
    client = openai.OpenAI(base_url=audio_server.url("/v1"), api_key="none")
    reply = client.chat.completions.create(model="any", max_tokens=4, temperature=0, messages=[
        {"role": "user", "content": [{"type": "text", "text": "What do you hear?"},
                                     {"type": "input_audio",
                                      "input_audio": {"data": base64.b64encode(wav()).decode(), "format": "wav"}}]}])
    assert reply.usage is not None and reply.usage.prompt_tokens > AUDIO_TOKENS

    def count(text: str) -> int:
        tokens = requests.post(audio_server.url("/tokenize"), json={"content": text, "add_special": False},
                               timeout=10).json()["tokens"]
        return len(tokens)

    native = requests.post(audio_server.url("/completion"), json={
        "prompt": {"prompt_string": props["media_marker"], "multimodal_data": [base64.b64encode(wav()).decode()]},
        "n_predict": 1}, timeout=120).json()
    # libmtmd wraps Qwen2-Audio's rows in <|audio_bos|> ... <|audio_eos|> (plain text to SmolLM2's vocabulary)
    assert native["tokens_evaluated"] == count("<|audio_bos|>") + AUDIO_TOKENS + count("<|audio_eos|>")


def test_transcription_through_the_openai_sdk(audio_server: Server, tmp_path: Path) -> None:
    """/v1/audio/transcriptions as llama-server serves it: a multipart upload, transcribed by the
    chat model through its audio projector (random weights: what it says means nothing)."""
    recording = tmp_path / "speech.wav"
    recording.write_bytes(wav())
    client = openai.OpenAI(base_url=audio_server.url("/v1"), api_key="none")
    with recording.open("rb") as audio:
        transcript = client.audio.transcriptions.create(model="whisper-1", file=audio, language="en",
                                                        extra_body={"max_tokens": 6, "temperature": 0,
                                                                    "ignore_eos": True})
    assert isinstance(transcript.text, str)
    assert transcript.usage is not None and transcript.usage.type == "tokens"
    assert transcript.usage.input_tokens > AUDIO_TOKENS and transcript.usage.output_tokens == 6
    with recording.open("rb") as audio:
        streamed = requests.post(audio_server.url("/v1/audio/transcriptions"), timeout=120,
                                 files={"file": ("speech.wav", audio, "audio/wav")},
                                 data={"stream": "true", "max_tokens": "6", "temperature": "0"})
    events = [json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: {")]
    assert events[-1]["type"] == "transcript.text.done" and streamed.text.rstrip().endswith("data: [DONE]")
    assert "".join(event["delta"] for event in events[:-1]) == events[-1]["text"]
    missing = requests.post(audio_server.url("/v1/audio/transcriptions"), data={"model": "x"}, timeout=30)
    assert missing.status_code == 400 and "No input file" in missing.json()["error"]["message"]


def test_an_image_to_an_audio_projector_is_a_400(audio_server: Server) -> None:
    response = chat(audio_server, [{"type": "text", "text": "Look:"}, image_part(RED)])
    assert response.status_code == 400
    assert "messages.0.content.1.image_url.url" in response.json()["error"]["message"]
    assert "takes audio only" in response.json()["error"]["message"]


def test_an_image_declaring_too_many_pixels_is_refused_before_it_is_decoded(server: Server) -> None:
    """A 60-byte PNG whose header declares 50,000 x 50,000 pixels (7.5 GB once decoded): a 400 naming the
    part and --media-max-pixels, and the server goes on serving."""
    from tests.unit.test_media_limits import png_declaring

    response = chat(server, [{"type": "text", "text": "Look:"}, image_part(png_declaring(50_000, 50_000))])
    assert response.status_code == 400, response.text[:300]
    message = response.json()["error"]["message"]
    assert "messages.0.content.1" in message and "--media-max-pixels" in message
    assert answer(chat(server, [image_part(RED)]))
