"""Speculative decoding on the real model: n-gram drafts (--spec-type ngram-simple, ngram-mod, ngram-map-k,
ngram-map-k4v, ngram-cache) and a draft model (-md; the embedded model as its own draft). Greedy output with speculation
equals greedy output without it (a request's speculative.n_max 0) on the same server, the drafts show in the
timings,
/slots and /metrics, and a draft model whose vocabulary differs is refused at start-up."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from app.model_sources.files import embedded_model_path
from bench.speculative import TEXT as EDIT_TEXT
from tests.integration.conftest import Server, launch, start
from tests.models import make_reranker

# An edit task: the prompt holds a text and the start of it again; the model copies the rest, which
# n-gram drafts find in the prompt.
PROMPT = f"{EDIT_TEXT}\n\n{EDIT_TEXT[:EDIT_TEXT.index(' check')]}"
NEAR_TIE = 1.0  # nats between the two best tokens: less, and a logit computed in a batch may pick the other


def complete(server: Server, **fields: Any) -> dict[str, Any]:
    reply = requests.post(server.url("/completion"), timeout=300, json={
        "prompt": PROMPT, "n_predict": 96, "temperature": 0, "n_probs": 2, "cache_prompt": False, **fields})
    assert reply.status_code == 200, reply.text
    body: dict[str, Any] = reply.json()
    return body


def counters(server: Server) -> dict[str, float]:
    text = requests.get(server.url("/metrics"), timeout=10).text
    return {sample.name + "".join(sample.labels.values()): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def check_same_greedy_output(server: Server) -> dict[str, Any]:
    """Greedy with speculation gives the tokens greedy without it gives. llama.cpp computes a token's
    logits a little differently alone and inside a batch (on CPU with flash attention, by up to ~0.7:
    bench/speculative.py's note), so where the plain run's two best tokens are nearly tied the batch may
    pick the other, in llama-server too: a divergence is allowed only at such a tie."""
    plain = complete(server, **{"speculative.n_max": 0})
    assert "draft_n" not in plain["timings"]
    fast = complete(server)
    ours, theirs = ([step["id"] for step in body["completion_probabilities"]] for body in (fast, plain))
    differ = next((index for index, (a, b) in enumerate(zip(ours, theirs, strict=True)) if a != b), None)
    if differ is not None:
        best, second = plain["completion_probabilities"][differ]["top_logprobs"][:2]
        assert best["logprob"] - second["logprob"] < NEAR_TIE, (differ, fast["content"], plain["content"])
    timings = fast["timings"]
    assert timings["draft_n"] > 0 and 0 < timings["draft_n_accepted"] <= timings["draft_n"]
    assert all(slot["speculative"] for slot in requests.get(server.url("/slots"), timeout=10).json())
    metrics = counters(server)
    assert metrics["llamacpp:spec_decode_num_draft_tokens_total"] == timings["draft_n"]
    assert metrics["llamacpp:spec_decode_num_accepted_tokens_total"] == timings["draft_n_accepted"]
    return fast


def test_ngram_speculation_keeps_the_greedy_output(server_dir: Path) -> None:
    server = start(server_dir, ["-np", "2", "-c", "4096", "--metrics", "--spec-type", "ngram-simple",
                                "--spec-ngram-simple-size-n", "4", "--spec-ngram-simple-size-m", "16"])
    try:
        fast = check_same_greedy_output(server)
        assert fast["timings"]["draft_n_accepted"] > 32  # the answer copies the prompt's text
        before = counters(server)
        bounded = complete(server, **{"speculative.n_max": 4})["timings"]
        after = counters(server)
        per_position = "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"
        assert bounded["draft_n_accepted"] > 0
        assert after[per_position + "0"] > before[per_position + "0"]
        assert all(after[f"{per_position}{position}"] == before[f"{per_position}{position}"]
                   for position in range(4, 16))  # no draft of this request was longer than 4
    finally:
        assert server.stop() == 0, server.log()


def test_ngram_mod_speculation_keeps_the_greedy_output(server_dir: Path) -> None:
    """--spec-type ngram-mod (llama-server's --spec-default drafter): the prompt's n-grams go into the shared
    table, so the copied text is drafted from it."""
    server = start(server_dir, ["-np", "2", "-c", "4096", "--metrics", "--spec-type", "ngram-mod",
                                "--spec-ngram-mod-n-match", "6", "--spec-ngram-mod-n-min", "2",
                                "--spec-ngram-mod-n-max", "16"])
    try:
        fast = check_same_greedy_output(server)
        assert fast["timings"]["draft_n_accepted"] > 32  # the answer copies the prompt's text
        assert counters(server)["llamacpp:spec_decode_num_drafts_total"] > 0
    finally:
        assert server.stop() == 0, server.log()


@pytest.mark.parametrize("kind", ["ngram-map-k", "ngram-map-k4v"])
def test_ngram_map_speculation_keeps_the_greedy_output(server_dir: Path, kind: str) -> None:
    """The n-gram maps draft the copied text from the slot's own history (the prompt holds it)."""
    server = start(server_dir, ["-np", "2", "-c", "4096", "--metrics", "--spec-type", kind,
                                f"--spec-{kind}-size-n", "4", f"--spec-{kind}-size-m", "8"])
    try:
        fast = check_same_greedy_output(server)
        assert fast["timings"]["draft_n_accepted"] > 16  # the answer copies the prompt's text
    finally:
        assert server.stop() == 0, server.log()


def test_a_draft_model_keeps_the_greedy_output(server_dir: Path) -> None:
    server = start(server_dir, ["-np", "2", "-c", "4096", "--metrics", "-md", str(embedded_model_path()),
                                "--spec-draft-n-max", "4"])
    try:
        fast = check_same_greedy_output(server)
        # the model drafting for itself: it is sure of most of its picks, and the target agrees
        assert fast["timings"]["draft_n_accepted"] > fast["timings"]["draft_n"] // 2
        assert "draft model loaded" in server.log()
    finally:
        assert server.stop() == 0, server.log()


def test_the_draft_models_top_ten_in_its_graph_drafts_as_on_the_cpu(server_dir: Path) -> None:
    """--spec-draft-backend-sampling (on by default, as llama-server): the draft model's top-10 is taken in its
    graph; its picks, and their probabilities against --spec-draft-p-min, are those read from the whole row."""
    timings = {}
    for flag in ("--spec-draft-backend-sampling", "--no-spec-draft-backend-sampling"):
        server = start(server_dir, ["-np", "1", "-c", "2048", "-md", str(embedded_model_path()), "--spec-draft-n-max",
                                    "6", "--spec-draft-p-min", "0.7", flag])
        try:
            timings[flag] = complete(server)["timings"]
            in_graph = "is taken in its graph" in server.log()
            assert in_graph == (flag == "--spec-draft-backend-sampling"), server.log()[-3000:]
        finally:
            assert server.stop() == 0, server.log()
    on, off = timings.values()
    assert on["draft_n"] > 0 and (on["draft_n"], on["draft_n_accepted"]) == (off["draft_n"], off["draft_n_accepted"])


def test_a_draft_model_of_another_vocabulary_is_refused(server_dir: Path, tmp_path: Path) -> None:
    other = make_reranker(tmp_path / "wordpiece.gguf")  # a BERT vocabulary, not SmolLM2's
    server = launch(server_dir, ["-np", "1", "-md", str(other)])
    try:
        assert server.process.wait(timeout=120) == 4
    finally:
        server.stop()
    assert "cannot draft for this model" in server.log()


def test_ngram_cache_speculation_keeps_the_greedy_output(server_dir: Path, tmp_path: Path) -> None:
    """--spec-type ngram-cache (lookup decoding): the slot's n-gram counts draft the copied text; the static and
    dynamic lookup caches, files in llama.cpp's format, are read at start; one that is not such a file stops the
    start."""
    from app.engine.ngram_cache import save

    static, dynamic = tmp_path / "static.lcs", tmp_path / "dynamic.lcd"
    save({(1, 2, -1, -1): {3: 4}, (2, 3, -1, -1): {1: 2, 5: 1}}, str(static))
    save({(7, 8, -1, -1): {9: 3}}, str(dynamic))
    server = start(server_dir, ["-np", "2", "-c", "4096", "--metrics", "--spec-type", "ngram-cache",
                                "--lookup-cache-static", str(static), "--lookup-cache-dynamic", str(dynamic)])
    try:
        fast = check_same_greedy_output(server)
        assert fast["timings"]["draft_n_accepted"] > 16  # the answer copies the prompt's text
        assert f"the static lookup cache {static} holds 2 n-grams" in server.log()
        assert f"the dynamic lookup cache {dynamic} holds 1 n-grams" in server.log()
    finally:
        assert server.stop() == 0, server.log()
    broken = tmp_path / "broken.lcs"
    broken.write_bytes(static.read_bytes()[:-2])
    failed = launch(server_dir, ["-np", "1", "--spec-type", "ngram-cache", "-lcs", str(broken)])
    try:
        assert failed.process.wait(timeout=120) == 4  # a load failure, as a bad draft model
    finally:
        failed.stop()
    assert "not a lookup cache" in failed.log()


def test_synthetic_acceptance_keeps_every_draft_at_its_longest_length(server_dir: Path) -> None:
    """--spec-synth-len (llama-server's benchmarking aid) on the real model: at n_max + 1 every drafted token is
    kept whatever the model would pick, and the server says that its output is not the model's."""
    server = start(server_dir, ["-np", "1", "-c", "4096", "--spec-type", "ngram-simple", "--spec-ngram-simple-size-n",
                                "4", "--spec-ngram-simple-size-m", "8", "--spec-synth-len", "9"])
    try:
        timings = complete(server)["timings"]
        assert timings["draft_n"] > 0 and timings["draft_n_accepted"] == timings["draft_n"]
        assert "synthetic speculative acceptance is on" in server.log()
    finally:
        assert server.stop() == 0, server.log()
