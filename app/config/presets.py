"""llama-server's built-in model presets (``--gpt-oss-20b-default`` and friends, common/arg.cpp): each flag
stands for the flags it sets there, expanded in place, so that what follows it on the command line wins
and what precedes it is overridden, as there. The model comes from the Hugging Face Hub (``-hf``), through
the hub support every ``-hf`` model uses (app/model_sources/hub.py).

The ``-spec`` presets name their draft's file in llama-server; here the draft comes by ``-hfd REPO:Q8_0``,
which picks the same file (the repository's one Q8_0 GGUF). ``--embd-gemma-default`` leaves out
llama-server's ``verbose_prompt`` (a log detail)."""

from __future__ import annotations

from collections.abc import Sequence

_FIM = ("--port", "8012", "-ub", "1024", "-b", "1024", "-c", "0", "--cache-reuse", "256")
_GPT_OSS = ("--port", "8013", "-ub", "2048", "-b", "32768", "-np", "2", "-c", str(131072 * 2),
            "--temp", "1.0", "--top-p", "1.0", "--top-k", "0", "--min-p", "0.01", "--jinja")
_VISION_GEMMA = ("--port", "8014", "-c", "0", "--jinja")

PRESETS: dict[str, tuple[str, ...]] = {
    "--embd-gemma-default": ("-hf", "ggml-org/embeddinggemma-300M-qat-q4_0-GGUF",
                             "-hff", "embeddinggemma-300M-qat-Q4_0.gguf", "--port", "8011", "-ub", "2048",
                             "-b", "2048", "-np", "32", "-c", str(2048 * 32), "--embedding"),
    "--fim-qwen-1.5b-default": ("-hf", "ggml-org/Qwen2.5-Coder-1.5B-Q8_0-GGUF",
                                "-hff", "qwen2.5-coder-1.5b-q8_0.gguf", *_FIM),
    "--fim-qwen-3b-default": ("-hf", "ggml-org/Qwen2.5-Coder-3B-Q8_0-GGUF", "-hff", "qwen2.5-coder-3b-q8_0.gguf",
                              *_FIM),
    "--fim-qwen-7b-default": ("-hf", "ggml-org/Qwen2.5-Coder-7B-Q8_0-GGUF", "-hff", "qwen2.5-coder-7b-q8_0.gguf",
                              *_FIM),
    "--fim-qwen-30b-default": ("-hf", "ggml-org/Qwen3-Coder-30B-A3B-Instruct-Q8_0-GGUF",
                               "-hff", "qwen3-coder-30b-a3b-instruct-q8_0.gguf", *_FIM),
    "--gpt-oss-20b-default": ("-hf", "ggml-org/gpt-oss-20b-GGUF", "-hff", "gpt-oss-20b-mxfp4.gguf", *_GPT_OSS),
    "--gpt-oss-120b-default": ("-hf", "ggml-org/gpt-oss-120b-GGUF", *_GPT_OSS),
    "--vision-gemma-4b-default": ("-hf", "ggml-org/gemma-3-4b-it-qat-GGUF", *_VISION_GEMMA),
    "--vision-gemma-12b-default": ("-hf", "ggml-org/gemma-3-12b-it-qat-GGUF", *_VISION_GEMMA),
    "--fim-qwen-7b-spec": ("-hf", "ggml-org/Qwen2.5-Coder-7B-Q8_0-GGUF", "-hff", "qwen2.5-coder-7b-q8_0.gguf",
                           "-hfd", "ggml-org/Qwen2.5-Coder-0.5B-Q8_0-GGUF:Q8_0", *_FIM),
    "--fim-qwen-14b-spec": ("-hf", "ggml-org/Qwen2.5-Coder-14B-Q8_0-GGUF", "-hff", "qwen2.5-coder-14b-q8_0.gguf",
                            "-hfd", "ggml-org/Qwen2.5-Coder-0.5B-Q8_0-GGUF:Q8_0", *_FIM),
    # speculative decoding's default: ngram-mod drafts (no model to fetch)
    "--spec-default": ("--spec-type", "ngram-mod", "--spec-ngram-mod-n-match", "24", "--spec-ngram-mod-n-min", "48",
                       "--spec-ngram-mod-n-max", "64"),
}


def expand_presets(argv: Sequence[str]) -> list[str]:
    """``argv`` with each preset flag replaced by the flags it stands for."""
    expanded: list[str] = []
    for word in argv:
        expanded.extend(PRESETS.get(word, (word,)))
    return expanded
