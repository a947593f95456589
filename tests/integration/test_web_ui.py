"""The web UI at /, in a real browser: headless Chromium (Debian's package) driven by playwright,
against real servers with the embedded model. A failing test leaves a screenshot in
``.ui-test-artifacts/``."""

from __future__ import annotations

import base64
import gzip
import io
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from PIL import Image
from playwright.sync_api import (
    Browser,
    ConsoleMessage,
    FilePayload,
    Page,
    Playwright,
    Request,
    Route,
    expect,
    sync_playwright,
)

from app.model_sources.files import embedded_model_path
from tests.integration.conftest import ROOT, Server, launch, model_in_storage, start, while_loading
from tests.projectors import make_vision_projector

ARTIFACTS = ROOT / ".ui-test-artifacts"
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
WAIT_MS = 60_000


def chromium_path() -> str:
    """The browser: $CHROMIUM, else one on PATH. Never skipped: without one the suite fails, loudly."""
    path = os.environ.get("CHROMIUM") or next(filter(None, map(shutil.which, CHROMIUM_NAMES)), None)
    if path is None:
        pytest.fail("the web UI tests need a Chromium browser and found none: install Debian's chromium "
                    "(apt-get install chromium; bash scripts/dev.sh test does) or set CHROMIUM", pytrace=False)
    return path


@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="module")
def browser(playwright: Playwright) -> Iterator[Browser]:
    launched = playwright.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])
    yield launched
    launched.close()


class Console:
    """What the page said on its console (errors, failed loads) and its uncaught exceptions."""

    def __init__(self, page: Page) -> None:
        self.errors: list[str] = []
        page.on("console", self._message)
        page.on("pageerror", lambda error: self.errors.append(f"uncaught: {error}"))

    def _message(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.errors.append(message.text)


@pytest.fixture
def page(browser: Browser, request: pytest.FixtureRequest) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    opened = context.new_page()
    opened.set_default_timeout(WAIT_MS)
    # expect() keeps its own timeout (5 s by default): what these tests wait for is an event (an
    # answer of a capped length ending), never a model being quick, so every wait gets the same bound
    expect.set_options(timeout=WAIT_MS)
    yield opened
    report = getattr(request.node, "report_call", None)
    if report is not None and report.failed:
        ARTIFACTS.mkdir(exist_ok=True)
        shot = ARTIFACTS / f"{request.node.name}.png"
        opened.screenshot(path=str(shot), full_page=True)
        print(f"screenshot of the failing page: {shot}")
    context.close()


@pytest.fixture
def console(page: Page) -> Console:
    return Console(page)


def open_ui(page: Page, server: Server) -> None:
    page.goto(server.url("/"))
    expect(page.locator("body[data-ready=true]")).to_have_count(1)


def send_chat(page: Page, text: str) -> None:
    page.locator("#prompt").fill(text)
    page.locator("#prompt").press("Enter")


def test_the_page_is_served_gzip_and_loads_without_console_errors(vertex_server: Server, page: Page,
                                                                 console: Console) -> None:
    raw = requests.get(vertex_server.url("/"), headers={"Accept-Encoding": "gzip"}, timeout=10, stream=True)
    assert raw.headers["Content-Encoding"] == "gzip" and raw.headers["Cache-Control"] == "no-cache"
    assert b"<title>vertex-llama</title>" in gzip.decompress(raw.raw.read())
    assert requests.get(vertex_server.url("/props"), timeout=10).json()["ui"] is True
    open_ui(page, vertex_server)
    model = requests.get(vertex_server.url("/v1/models"), timeout=10).json()["data"][0]["id"]
    expect(page.locator("#model-name")).to_have_text(model)
    expect(page.locator("#tab-vertex")).to_be_visible()  # the predict route is registered
    expect(page.locator("#image-picker")).to_be_hidden()  # a text-only model
    assert console.errors == []


def test_a_chat_message_streams_an_answer_and_the_conversation_is_kept(vertex_server: Server, page: Page,
                                                                      console: Console) -> None:
    open_ui(page, vertex_server)
    page.locator("#chat-settings summary").click()
    page.locator("input[name=temperature]").fill("0")
    page.locator("input[name=max_tokens]").fill("24")
    page.locator("textarea[name=system]").fill("You are terse.")
    with page.expect_request("**/v1/chat/completions") as sent:
        send_chat(page, "What is the capital of France?")
    body = json.loads(sent.value.post_data or "{}")
    assert body["stream"] is True and body["temperature"] == 0 and body["max_tokens"] == 24
    assert body["messages"] == [{"role": "system", "content": "You are terse."},
                                {"role": "user", "content": "What is the capital of France?"}]
    answer = page.locator(".message.assistant").last
    expect(answer.locator(".stats")).to_contain_text("tokens/s")
    expect(answer.locator(".stats")).to_contain_text("generated")
    assert answer.locator(".content").inner_text().strip()
    generated = int(answer.locator(".stats").inner_text().rsplit("generated", 1)[1])
    assert 0 < generated <= 24
    assert console.errors == []
    # the conversation survives a reload (browser storage) and the next turn carries the history
    page.reload()
    expect(page.locator("body[data-ready=true]")).to_have_count(1)
    first = page.locator("#conversation-list .open").first
    expect(first).to_have_text("What is the capital of France?")
    first.click()
    expect(page.locator(".message")).to_have_count(2)
    with page.expect_request("**/v1/chat/completions") as second:
        send_chat(page, "And of Spain?")
    history = json.loads(second.value.post_data or "{}")["messages"]
    assert [m["role"] for m in history] == ["system", "user", "assistant", "user"]
    expect(page.locator(".message.assistant").last.locator(".stats")).to_contain_text("tokens/s")


def test_stop_cancels_a_long_answer_and_the_slot_goes_idle(vertex_server: Server, page: Page, console: Console) -> None:
    max_tokens = 900

    def never_ending(route: Route, request: Request) -> None:
        """The model could end on its own first: the test makes the answer long by ignoring EOS."""
        body = json.loads(request.post_data or "{}")
        route.continue_(post_data=json.dumps({**body, "ignore_eos": True, "max_tokens": max_tokens}))

    before = vertex_server.metric("llamacpp:n_decode_total")
    open_ui(page, vertex_server)
    page.route("**/v1/chat/completions", never_ending)
    send_chat(page, "Count from one to one thousand in words.")
    answer = page.locator(".message.assistant").last
    expect(answer.locator(".content")).not_to_be_empty()
    expect(page.locator("#stop")).to_be_enabled()
    page.locator("#stop").click()
    expect(answer).to_contain_text("Stopped.")
    expect(page.locator("#send")).to_be_enabled()
    page.locator("#tab-server").click()
    rows = page.locator("#slots tbody tr")
    expect(rows).to_have_count(8)
    expect(page.locator('#slots tbody tr[data-state="idle"]')).to_have_count(8)
    slots = vertex_server.wait_slots_idle()
    assert len(slots) == 8
    # cancelled: the job ended before the token limit it could not otherwise stop short of (alone on
    # the server, it takes one decode a token)
    decodes = vertex_server.metric("llamacpp:n_decode_total") - before
    assert 0 < decodes < max_tokens
    assert console.errors == []


def test_the_predict_console_sends_three_instances_and_shows_the_error(vertex_server: Server, page: Page,
                                                                      console: Console) -> None:
    open_ui(page, vertex_server)
    page.locator("#tab-vertex").click()
    instances = page.locator("#instances .instance")
    expect(instances).to_have_count(1)
    expect(instances.nth(0).locator("select.format")).to_have_value("chatCompletions")
    page.locator("#add-instance").click()
    instances.nth(1).locator("select.format").select_option("tokenize")
    assert json.loads(instances.nth(1).locator("textarea.body").input_value()) == {"content": "Hello, world"}
    page.locator("#add-instance").click()
    expect(instances.nth(2).locator("select.format")).to_have_value("tokenize")  # as the instance before it
    instances.nth(2).locator("select.format").select_option("chatCompletions")
    instances.nth(2).locator("textarea.body").fill('{"messages": "none"}')
    page.locator("#parameters").fill('{"max_tokens": 8, "temperature": 0}')
    with page.expect_request("**/predict") as sent:
        page.locator("#send-predict").click()
    body = json.loads(sent.value.post_data or "{}")
    assert [i["@requestFormat"] for i in body["instances"]] == ["chatCompletions", "tokenize", "chatCompletions"]
    assert body["parameters"] == {"max_tokens": 8, "temperature": 0}
    predictions = page.locator("#predictions .prediction")
    expect(predictions).to_have_count(3)
    expect(page.locator("#predictions .prediction.failed")).to_have_count(1)
    expect(predictions.nth(2)).to_have_class("prediction failed")
    expect(predictions.nth(2).locator(".verdict")).to_have_text("Error")
    expect(predictions.nth(2)).to_contain_text("messages")
    expect(predictions.nth(0).locator(".verdict")).to_have_text("OK")
    expect(predictions.nth(1)).to_contain_text('"tokens"')
    expect(page.locator("#predict-summary")).to_contain_text("3 prediction(s)")
    # the same request, ready for the deployed endpoint
    page.locator("#endpoint-form input[name=project]").fill("my-project")
    page.locator("#endpoint-form input[name=endpoint]").fill("1234")
    curl = page.locator("#snippet-curl").inner_text()
    assert vertex_server.url("/predict") in curl and '"@requestFormat":"tokenize"' in curl
    assert "--project my-project" in page.locator("#snippet-gcp").inner_text()
    assert "--endpoint 1234" in page.locator("#snippet-gcp").inner_text()
    sdk = page.locator("#snippet-sdk").inner_text()
    assert 'aiplatform.Endpoint("1234")' in sdk and '"@requestFormat": "tokenize"' in sdk
    compile(sdk, "snippet", "exec")  # the SDK snippet is valid Python
    assert console.errors == []


def small_png() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), (30, 140, 90)).save(buffer, "PNG")
    return buffer.getvalue()


PIXEL_PNG = small_png()


@pytest.fixture(scope="module")
def vision_server(server_dir: Path) -> Iterator[Server]:
    """A server with a generated vision projector (tests/projectors.py)."""
    projector = make_vision_projector(server_dir / "ui-mmproj.gguf")
    running = start(server_dir, ["--mmproj", str(projector), "-np", "2", "-c", "2048"])
    yield running
    assert running.stop() == 0, running.log()


def test_an_attached_image_is_sent_as_an_openai_image_part_and_answered(vision_server: Server, page: Page,
                                                                        console: Console) -> None:
    open_ui(page, vision_server)
    page.locator("#chat-settings summary").click()
    page.locator("input[name=max_tokens]").fill("16")
    expect(page.locator("#image-picker")).to_be_visible()
    pixel: FilePayload = {"name": "pixel.png", "mimeType": "image/png", "buffer": PIXEL_PNG}
    page.locator("#image-input").set_input_files(files=[pixel])
    expect(page.locator("#image-name")).to_have_text("pixel.png")
    with page.expect_response("**/v1/chat/completions") as answered:
        send_chat(page, "What is in this picture?")
    content = json.loads(answered.value.request.post_data or "{}")["messages"][-1]["content"]
    data_uri = "data:image/png;base64," + base64.b64encode(PIXEL_PNG).decode()
    assert content == [{"type": "text", "text": "What is in this picture?"},
                       {"type": "image_url", "image_url": {"url": data_uri}}]
    assert answered.value.status == 200
    expect(page.locator(".message.user img")).to_have_attribute("src", data_uri)
    answer = page.locator(".message.assistant").last
    expect(answer.locator(".stats")).to_contain_text("tokens/s")  # the answer is complete
    expect(page.locator("#send")).to_be_enabled()
    expect(page.locator(".message.assistant .error")).to_have_count(0)
    assert answer.locator(".content").inner_text().strip()
    prompt_tokens = int(answer.locator(".stats").inner_text().split("prompt", 1)[1].split()[0].strip(":,"))
    assert prompt_tokens > 16  # the image's 16 tokens and the text's
    assert console.errors == []


def test_the_server_view_shows_props_slots_and_metrics(vertex_server: Server, page: Page, console: Console) -> None:
    open_ui(page, vertex_server)
    page.locator("#tab-server").click()
    expect(page.locator("#props")).to_contain_text("Context per slot")
    expect(page.locator("#slots tbody tr")).to_have_count(8)
    expect(page.locator("#metrics")).to_contain_text("Requests waiting")
    expect(page.locator("#chart polyline.tokens")).to_have_count(1)
    expect(page.locator("#chart-caption")).to_contain_text("tokens/s")
    assert console.errors == []


def test_keyboard_only_at_phone_width(vertex_server: Server, page: Page, console: Console) -> None:
    page.set_viewport_size({"width": 390, "height": 844})
    open_ui(page, vertex_server)
    for tab in ("#tab-chat", "#tab-vertex", "#tab-server"):
        page.locator(tab).click()
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{tab}: the page is {overflow}px wider than a phone"
    # every control has a name a screen reader can say
    unnamed = page.evaluate("""[...document.querySelectorAll('input, textarea, select, button')]
        .filter((e) => !e.closest('[hidden]') && !(e.labels && e.labels.length)
                && !e.getAttribute('aria-label') && !e.textContent.trim()).map((e) => e.outerHTML)""")
    assert unnamed == []
    # tabs by arrow keys, then the chat by keyboard alone
    page.locator("#tab-server").focus()
    page.keyboard.press("ArrowRight")
    expect(page.locator("#tab-chat")).to_have_attribute("aria-selected", "true")
    expect(page.locator("#tab-chat")).to_be_focused()
    for _ in range(40):
        if page.evaluate("document.activeElement.id") == "prompt":
            break
        page.keyboard.press("Tab")
    expect(page.locator("#prompt")).to_be_focused()
    page.keyboard.type("Hi")
    page.keyboard.press("Enter")
    expect(page.locator(".message.assistant").last.locator(".stats")).to_contain_text("tokens/s")
    assert console.errors == []


def test_the_page_says_the_model_loads_until_it_is_ready(vertex_server: Server, page: Page) -> None:
    answered = {"count": 0}

    def loading(route: Route) -> None:
        answered["count"] += 1
        if answered["count"] <= 2:
            route.fulfill(status=503, content_type="application/json",
                          body='{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}')
        else:
            route.continue_()

    page.route("**/health", loading)
    page.goto(vertex_server.url("/"))
    expect(page.locator("#status")).to_contain_text("Loading model")
    expect(page.locator("#send")).to_be_disabled()
    expect(page.locator("body[data-ready=true]")).to_have_count(1)
    expect(page.locator("#status")).to_be_empty()
    expect(page.locator("#send")).to_be_enabled()


def test_the_pages_are_served_while_the_real_model_loads(server_dir: Path, tmp_path: Path) -> None:
    """The model comes from Cloud Storage (the emulator), as on Vertex AI (conftest.model_in_storage)."""
    with model_in_storage() as (host, uri):
        server = launch(server_dir, ["-np", "1", "-c", "1024", "--model", uri, "--model-cache-dir",
                                     str(tmp_path / "cache")], {"STORAGE_EMULATOR_HOST": host})
        check_pages_answer_while_loading(server)


def check_pages_answer_while_loading(server: Server) -> None:
    try:
        pairs = while_loading(server, "/")
        assert pairs and pairs[-1] == (200, 200)
        assert (503, 200) in pairs, pairs  # the page answered while /health still said "Loading model"
    finally:
        assert server.stop() == 0


@pytest.fixture(scope="module")
def keyed_ui_server(server_dir: Path) -> Iterator[Server]:
    server = start(server_dir, ["--api-key", "ui-secret", "-np", "2", "-c", "2048",
                                "--ui-config", '{"temperature": 0.25, "system": "Be brief.", "unknown": 1}'])
    yield server
    assert server.stop() == 0, server.log()


def test_the_key_prompt(keyed_ui_server: Server, page: Page, console: Console) -> None:
    assert requests.get(keyed_ui_server.url("/"), timeout=10).status_code == 200  # the page itself is public
    page.goto(keyed_ui_server.url("/"))
    dialog = page.locator("#key-dialog")
    expect(dialog).to_be_visible()
    expect(page.locator("#key-reason")).to_contain_text("needs an API key")
    page.locator("#key-input").fill("wrong")
    page.locator("#key-save").click()
    expect(dialog).to_be_visible()
    expect(page.locator("#key-reason")).to_contain_text("refused")
    page.locator("#key-input").fill("ui-secret")
    page.locator("#key-save").click()
    expect(page.locator("body[data-ready=true]")).to_have_count(1)
    expect(page.locator("#tab-vertex")).to_be_hidden()  # no predict route outside Vertex AI mode
    page.locator("#chat-settings summary").click()
    expect(page.locator("input[name=temperature]")).to_have_value("0.25")  # --ui-config's defaults
    expect(page.locator("textarea[name=system]")).to_have_value("Be brief.")
    page.locator("input[name=max_tokens]").fill("16")  # the answer ends after 16 tokens at most
    with page.expect_request("**/v1/chat/completions") as sent:
        send_chat(page, "Hi")
    assert sent.value.headers["authorization"] == "Bearer ui-secret"
    sent_body = json.loads(sent.value.post_data or "{}")
    assert sent_body["max_tokens"] == 16 and sent_body["temperature"] == 0.25
    assert sent_body["messages"][0] == {"role": "system", "content": "Be brief."}
    expect(page.locator(".message.assistant").last.locator(".stats")).to_contain_text("tokens/s")
    # only the two refused /props requests reached the console
    assert all("401" in error for error in console.errors), console.errors
    assert len(console.errors) == 2


def test_on_a_router_the_page_picks_a_model_and_chats_with_it(tmp_path: Path, page: Page, console: Console) -> None:
    """--models-dir: a model picker; the chosen model is loaded, named in each request, and the server view
    shows its own slots and metrics."""
    folder = tmp_path / "models"
    folder.mkdir()
    for name in ("alpha", "beta"):
        (folder / f"{name}.gguf").symlink_to(embedded_model_path())
    server = start(tmp_path, ["--models-dir", str(folder), "-t", "1", "-np", "2", "-c", "1024", "--metrics"])
    try:
        open_ui(page, server)
        picker = page.locator("#model-picker")
        expect(picker).to_be_visible()
        assert picker.locator("option").all_inner_texts() == ["alpha", "beta"]
        picker.select_option("beta")
        expect(page.locator("#status")).to_have_text("")
        with page.expect_request("**/v1/chat/completions") as sent:
            send_chat(page, "Say hi")
        assert json.loads(sent.value.post_data or "{}")["model"] == "beta"
        expect(page.locator(".message.assistant").last.locator(".stats")).to_contain_text("tokens/s")
        models = {m["id"]: m["status"]["value"] for m in requests.get(server.url("/models"), timeout=10).json()["data"]}
        assert models["beta"] == "loaded"
        page.locator("#tab-server").click()
        expect(page.locator("#props")).to_contain_text("beta")
        expect(page.locator("#slots tbody tr")).to_have_count(2)
        expect(page.locator("#metrics")).to_contain_text("Requests waiting")
        page.reload()  # the choice is kept
        expect(page.locator("body[data-ready=true]")).to_have_count(1)
        expect(page.locator("#model-picker")).to_have_value("beta")
        assert console.errors == []
    finally:
        assert server.stop() == 0, server.log()
