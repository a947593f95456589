"""Every flag with a plain value (a switch, a number, a choice, and the text options that need no file)
starts the real server: each is given a valid value other than its default, a dozen flags a server, and
the server must load the model, answer /props and a chat. Where /props shows the setting (the sampling
defaults a request starts from, the alias), it must show the value given. A flag that breaks start-up (as
--no-jinja once did) fails here, named with its group. Flags with files, addresses or their own modes
(models, keys, TLS, the router, embeddings, agent mode) are started by their own tests; ``ELSEWHERE`` says
which."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import requests

from app.config.options import Option
from app.config.settings import OPTIONS
from tests.integration.conftest import start

PLAIN_KINDS = ("bool", "int", "float", "choice")
# Started elsewhere, or not a serving start (they print and exit, or need what a start here lacks).
ELSEWHERE = {
    "offline": "test_hub_models.py", "list_devices": "test_endpoints.py (prints and exits)",
    "version": "prints and exits", "cache_list": "test_hub_models.py (prints and exits)",
    "completion_bash": "prints and exits", "embeddings": "test_embeddings_rerank_lora_slots.py",
    "reranking": "test_embeddings_rerank_lora_slots.py", "pooling": "test_embeddings_rerank_lora_slots.py",
    "port": "every test", "grpc_port": "test_grpc.py", "models_max": "test_router.py",
    "models_autoload": "test_router.py", "agent": "test_agent_mode.py", "ui_mcp_proxy": "test_agent_mode.py",
    "tools_max_timeout": "test_agent_mode.py", "tools_max_output": "test_agent_mode.py",
    "media_urls_private": "test_multimodal.py (with --media-urls)", "mlock": "needs RLIMIT_MEMLOCK",
    "load_mode": "test_model_loading.py", "lora_init_without_apply": "test_embeddings_rerank_lora_slots.py",
    "spec_draft_cpu_moe": "needs a draft model", "spec_draft_n_cpu_moe": "needs a draft model",
    "log_disable": "test_lifecycle.py (the tests read the log)",
    "spec_synth_len": "test_speculative.py (it needs a --spec-type)",
}
# A value for each plain option whose own rule would not do (switches flip; numbers and choices are here).
VALUES: dict[str, str] = {
    "fit_ctx": "2048", "cache_type_k": "f32", "cache_type_v": "f32", "rope_scaling": "linear", "rope_scale": "1.0",
    "rope_freq_base": "100000", "rope_freq_scale": "1.0", "yarn_orig_ctx": "8192", "yarn_ext_factor": "0.0",
    "yarn_attn_factor": "1.0", "yarn_beta_slow": "1.0", "yarn_beta_fast": "32.0", "lazy_mode": "off",
    "numa": "distribute", "split_mode": "none", "main_gpu": "0", "image_min_tokens": "64", "image_max_tokens": "256",
    "mtmd_batch_max_tokens": "256", "video_fps": "2", "video_timestamp_interval": "1000",
    "n_cpu_moe": "1", "n_cpu_ffn": "1", "threads": "1", "threads_batch": "2", "cpu_strict": "1", "prio": "-1",
    "poll": "0", "ctx_size": "2048", "n_parallel": "2", "batch_size": "512", "ubatch_size": "256", "keep": "4",
    "n_predict": "16", "liveness_seconds": "300", "embd_normalize": "1", "cache_reuse": "16",
    "slot_prompt_similarity": "0.5", "cache_ram": "64", "spec_draft_n_max": "4", "spec_draft_n_min": "1",
    "spec_draft_p_min": "0.5", "spec_draft_threads": "1", "spec_draft_threads_batch": "1",
    "spec_draft_type_k": "f32", "spec_draft_type_v": "f32", "spec_ngram_simple_size_n": "8",
    "spec_ngram_simple_size_m": "16", "spec_ngram_mod_n_match": "12", "spec_ngram_mod_n_min": "4",
    "spec_ngram_mod_n_max": "32", "spec_ngram_map_k_size_n": "8", "spec_ngram_map_k_size_m": "16",
    "spec_ngram_map_k_min_hits": "2", "spec_ngram_map_k4v_size_n": "8", "spec_ngram_map_k4v_size_m": "16",
    "spec_ngram_map_k4v_min_hits": "2", "sleep_idle_seconds": "600", "max_queue": "8", "seed": "7", "temp": "0.5",
    "top_k": "20", "top_p": "0.9", "min_p": "0.1", "repeat_penalty": "1.1", "repeat_last_n": "32",
    "top_nsigma": "2.0", "xtc_probability": "0.1", "xtc_threshold": "0.2", "typical_p": "0.9",
    "presence_penalty": "0.1", "frequency_penalty": "0.1", "dry_multiplier": "0.5", "dry_base": "2.0",
    "dry_allowed_length": "3", "dry_penalty_last_n": "64", "dynatemp_range": "0.2", "dynatemp_exponent": "1.5",
    "mirostat": "2", "mirostat_eta": "0.2", "mirostat_tau": "4.0", "adaptive_target": "0.5",
    "adaptive_decay": "0.5", "reasoning_format": "none", "reasoning_budget": "0", "media_max_bytes": "1048576",
    "media_max_pixels": "1000000", "media_max_seconds": "60", "sse_ping_interval": "10", "threads_http": "8",
    "timeout": "300", "max_body_bytes": "2097152", "predict_deadline": "120", "max_response_bytes": "1048576",
    "predictions_format": "model-garden", "log_verbosity": "4", "cpu_strict_batch": "1", "prio_batch": "0",
    "poll_batch": "0", "spec_draft_cpu_strict": "1", "spec_draft_prio": "0", "spec_draft_poll": "0",
    "spec_draft_cpu_strict_batch": "1", "spec_draft_prio_batch": "0", "spec_draft_poll_batch": "0",
    "kv_unified_per_slot": "1024", "ctx_checkpoints": "4", "checkpoint_min_step": "100",
}
# Text options that need no file, no address and no mode of their own, with a valid value each.
TEXT_VALUES: dict[str, str] = {
    "alias": "matrix-model", "n_gpu_layers": "0", "fit": "off", "fit_target": "512", "flash_attn": "on",
    "override_kv": "tokenizer.ggml.add_bos_token=bool:false", "tags": "matrix,test", "device": "none",
    "override_tensor": "token_embd=CPU", "spec_type": "ngram-simple", "spec_draft_ngl": "0",
    "dry_sequence_breaker": "\n", "samplers": "top_k;temperature", "logit_bias": "15+1",
    "grammar": 'root ::= [a-z]+', "reverse_prompt": "STOP", "chat_template_kwargs": '{"enable_thinking": false}',
    "chat_template": "chatml", "reasoning": "off", "reasoning_effort": "low", "reasoning_budget_message": "done",
    "media_marker": "<__media__>", "cors_origins": "http://a.test", "cors_methods": "GET, POST",
    "cors_headers": "Content-Type", "ui_config": "{}", "log_colors": "off", "cpu_mask_batch": "0xffffffff",
    "cpu_range_batch": "0-", "spec_draft_cpu_mask": "0xffffffff", "spec_draft_cpu_range": "0-",
    "spec_draft_cpu_mask_batch": "0xffffffff", "video_ffmpeg_dir": "/usr/bin",
}
# Where /props shows a setting: default_generation_settings.params[key] must be the value given.
# (-n is not among them: llama-server shows n_predict -1 there whatever -n says, and so does this server.)
SHOWN = {"temp": "temperature", "top_k": "top_k", "top_p": "top_p", "min_p": "min_p", "seed": "seed",
         "repeat_penalty": "repeat_penalty", "repeat_last_n": "repeat_last_n", "typical_p": "typical_p",
         "presence_penalty": "presence_penalty", "frequency_penalty": "frequency_penalty",
         "xtc_probability": "xtc_probability", "xtc_threshold": "xtc_threshold", "dry_multiplier": "dry_multiplier",
         "dry_base": "dry_base", "dry_allowed_length": "dry_allowed_length",
         "dynatemp_range": "dynatemp_range", "dynatemp_exponent": "dynatemp_exponent", "mirostat": "mirostat",
         "mirostat_eta": "mirostat_eta", "mirostat_tau": "mirostat_tau", "top_nsigma": "top_n_sigma",
         "ignore_eos": "ignore_eos", "dry_penalty_last_n": "dry_penalty_last_n",
         "adaptive_target": "adaptive_target", "adaptive_decay": "adaptive_decay"}
# What /props shows of a text option.
SHOWN_TEXT = {"alias": lambda props: props["model_alias"] == "matrix-model"}
GROUP = 14


def argv_for(option: Option) -> list[str]:
    if option.kind == "bool":
        if option.default is True:
            return [option.negative_flags[-1]]
        return [option.flags[-1]]
    return [option.flags[-1], {**VALUES, **TEXT_VALUES}[option.dest]]


PLAIN = [option for option in OPTIONS if (option.kind in PLAIN_KINDS and option.dest not in ELSEWHERE)
         or option.dest in TEXT_VALUES]
GROUPS = [PLAIN[index:index + GROUP] for index in range(0, len(PLAIN), GROUP)]


def test_every_plain_option_has_a_value_or_a_reason() -> None:
    for option in PLAIN:
        assert option.kind == "bool" or option.dest in VALUES or option.dest in TEXT_VALUES, option.dest
        if option.kind == "bool" and option.default is True:
            assert option.negative_flags, option.dest
    assert set(VALUES) | set(TEXT_VALUES) <= {option.dest for option in PLAIN}  # each value is used


@pytest.mark.parametrize("group", GROUPS, ids=lambda group: f"{group[0].dest}..{group[-1].dest}")
def test_each_flag_starts_the_real_server_and_serves(group: list[Option], server_dir: Path) -> None:
    argv = [word for option in group for word in argv_for(option)]
    if "-c" not in argv and "--ctx-size" not in argv:
        argv += ["-c", "2048"]
    server = start(server_dir, argv)
    try:
        props: dict[str, Any] = requests.get(server.url("/props"), timeout=30).json()
        params = props["default_generation_settings"]["params"]
        for option in group:
            if option.dest in SHOWN:
                expected: Any = True if option.kind == "bool" else float(VALUES[option.dest])
                assert params[SHOWN[option.dest]] == pytest.approx(expected), (option.dest, params)
            if option.dest in SHOWN_TEXT:
                assert SHOWN_TEXT[option.dest](props), (option.dest, props)
        reply = requests.post(server.url("/v1/chat/completions"), timeout=300, json={
            "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2})
        assert reply.status_code == 200, (argv, reply.text[:300])
    finally:
        assert server.stop() == 0, (argv, server.log()[-3000:])
