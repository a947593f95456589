"""Videos through --mmproj on a real server, as llama-server takes them: ``video_url`` and ``input_video``
chat parts and the native prompt object's ``multimodal_data``, decoded by the real ffmpeg and ffprobe
(libmtmd's video helper) into frames for the generated vision projector, with text timestamps among
them; --video-fps, --video-timestamp-interval and --video-ffmpeg-dir, and the limits a video is measured
against before it is decoded."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import requests

from tests.integration.conftest import Server, start
from tests.projectors import make_vision_projector
from tests.videos import make_video

IMAGE_TOKENS = 16  # a frame is an image to the generated projector
FPS = 2  # the server's --video-fps
STAMP_MS = 1000  # the server's --video-timestamp-interval


@pytest.fixture(scope="module")
def videos(server_dir: Path) -> dict[str, bytes]:
    return {
        "one": make_video(server_dir / "one.mp4", 1),
        "two": make_video(server_dir / "two.mp4", 2),
        "webm": make_video(server_dir / "two.webm", 2, codec="libvpx"),
        "long": make_video(server_dir / "long.webm", 4, codec="libvpx"),
        "big": make_video(server_dir / "big.mp4", 1, size=(160, 120)),
    }


@pytest.fixture(scope="module")
def server(server_dir: Path) -> Iterator[Server]:
    projector = make_vision_projector(server_dir / "mmproj-video.gguf")
    # 160 x 120 at 2 frames a second is 38,400 pixels: over the bound below; 64 x 48 twice is 6,144
    running = start(server_dir, ["--mmproj", str(projector), "-np", "2", "-c", "2048", "--video-fps", str(FPS),
                                 "--video-timestamp-interval", str(STAMP_MS), "--media-max-pixels", "20000",
                                 "--media-max-seconds", "3"], {"AIP_MODE": "PREDICTION"})
    yield running
    assert running.stop() == 0, running.log()


def data_uri(data: bytes, kind: str = "video/mp4") -> str:
    return f"data:{kind};base64,{base64.b64encode(data).decode()}"


def chat(server: Server, content: list[dict[str, Any]], **extra: Any) -> requests.Response:
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": 8, "temperature": 0, **extra}
    return requests.post(server.url("/v1/chat/completions"), json=body, timeout=300)


def video_part(data: bytes, kind: str = "video_url") -> dict[str, Any]:
    key = "url" if kind == "video_url" else "data"
    return {"type": kind, kind: {key: data_uri(data)}}


def count(server: Server, text: str, add_special: bool = False) -> int:
    tokens = requests.post(server.url("/tokenize"), json={"content": text, "add_special": add_special},
                           timeout=10).json()["tokens"]
    return len(tokens)


def evaluated(server: Server, prompt: str, video: bytes) -> int:
    marker = requests.get(server.url("/props"), timeout=10).json()["media_marker"]
    response = requests.post(server.url("/completion"), json={
        "prompt": {"prompt_string": prompt.replace("<video>", marker),
                   "multimodal_data": [base64.b64encode(video).decode()]},
        "n_predict": 1, "temperature": 0, "cache_prompt": False}, timeout=300)
    assert response.status_code == 200, response.text[:300]
    tokens: int = response.json()["tokens_evaluated"]
    return tokens


def test_props_report_video(server: Server) -> None:
    props = requests.get(server.url("/props"), timeout=10).json()
    assert props["modalities"] == {"vision": True, "video": True, "audio": False}
    assert "video input: on" in server.log()


def test_frames_and_timestamps_follow_the_flags(server: Server, videos: dict[str, bytes]) -> None:
    head, tail = "Watch: ", " What happens?"
    prompt = head + "<video>" + tail
    text = count(server, head, True) + count(server, "Video:") + count(server, tail)
    # 2 frames a second; a timestamp after the first frame and after each frame a second later
    one = text + 2 * IMAGE_TOKENS + count(server, "[0m0.00s]")
    two = one + 2 * IMAGE_TOKENS + count(server, "[0m1.00s]")
    assert evaluated(server, prompt, videos["one"]) == one
    assert evaluated(server, prompt, videos["two"]) == two
    assert evaluated(server, prompt, videos["webm"]) == two  # WebM (VP8) as well as MP4 (H.264)


def test_both_part_shapes_and_the_openai_sdk(server: Server, videos: dict[str, bytes]) -> None:
    text = {"type": "text", "text": "What happens in this video?"}
    first = chat(server, [text, video_part(videos["two"])])
    second = chat(server, [text, video_part(videos["two"], "input_video")])
    assert first.status_code == 200 and second.status_code == 200, first.text[:300] + second.text[:300]
    assert first.json()["choices"][0]["message"]["content"] == second.json()["choices"][0]["message"]["content"]
    assert first.json()["usage"]["prompt_tokens"] > 4 * IMAGE_TOKENS
    assert second.json()["timings"]["cache_n"] == second.json()["usage"]["prompt_tokens"] - 1  # frames reused
    other = chat(server, [text, video_part(videos["one"])])
    assert other.json()["usage"]["prompt_tokens"] < first.json()["usage"]["prompt_tokens"]
    client = openai.OpenAI(base_url=server.url("/v1"), api_key="none")
    messages: Any = [{"role": "user", "content": [text, video_part(videos["two"])]}]  # a part the SDK does not type
    stream = client.chat.completions.create(model="any", max_tokens=8, temperature=0, stream=True, messages=messages)
    streamed = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert streamed == first.json()["choices"][0]["message"]["content"]


def test_a_video_in_a_vertex_instance(server: Server, videos: dict[str, bytes]) -> None:
    content = [{"type": "text", "text": "What happens?"}, video_part(videos["one"])]
    response = requests.post(server.url("/predict"), json={"instances": [
        {"@requestFormat": "chatCompletions", "messages": [{"role": "user", "content": content}], "max_tokens": 8,
         "temperature": 0}]}, timeout=300)
    assert response.status_code == 200, response.text[:300]
    prediction = response.json()["predictions"][0]
    assert prediction["choices"][0]["message"]["content"] == chat(server, content).json()["choices"][0][
        "message"]["content"]


@pytest.mark.parametrize(("name", "expected"), [
    ("long", "the video lasts at least 3.5 s, over --media-max-seconds (3)"),  # WebM: counted as it is read
    ("big", "at least 2 frames of 160 x 120 at 2 frames a second, 38,400 pixels together, over "
            "--media-max-pixels (20,000)"),  # MP4: ffprobe counts its frames before any is decoded
])
def test_a_video_over_the_limits_is_a_400_naming_the_part(server: Server, videos: dict[str, bytes], name: str,
                                                          expected: str) -> None:
    response = chat(server, [{"type": "text", "text": "Watch:"}, video_part(videos[name])])
    assert response.status_code == 400, response.text[:300]
    message = response.json()["error"]["message"]
    assert "messages.0.content.1.video_url.url" in message and expected in message, message
    assert chat(server, [video_part(videos["one"])]).status_code == 200


def test_a_video_that_is_not_one_is_a_400(server: Server) -> None:
    response = chat(server, [video_part(b"\x00\x00\x00\x18ftypmp42 and then nothing")])
    assert response.status_code == 400, response.text[:300]
    assert "the video could not be read" in response.json()["error"]["message"]
    response = chat(server, [video_part(b"not a video at all")])
    assert response.status_code == 400 and "can be decoded" in response.json()["error"]["message"]


def test_without_ffmpeg_videos_are_refused_by_name(server_dir: Path, videos: dict[str, bytes]) -> None:
    empty = server_dir / "no-ffmpeg"
    empty.mkdir()
    projector = make_vision_projector(server_dir / "mmproj-no-video.gguf")
    running = start(server_dir, ["--mmproj", str(projector), "-np", "1", "-c", "1024",
                                 "--video-ffmpeg-dir", str(empty)])
    try:
        assert requests.get(running.url("/props"), timeout=10).json()["modalities"]["video"] is False
        response = chat(running, [{"type": "text", "text": "Watch:"}, video_part(videos["one"], "input_video")])
        assert response.status_code == 400, response.text[:300]
        message = response.json()["error"]["message"]
        assert "messages.0.content.1.input_video.data" in message and "no ffmpeg and ffprobe" in message, message
        assert "video input: off" in running.log()
    finally:
        assert running.stop() == 0, running.log()
