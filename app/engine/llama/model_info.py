"""What a loaded model says of itself (``ModelInfo``): its name, vocabulary facts, size, chat templates,
the pooling its metadata declares; read once, after the load."""

from __future__ import annotations

import ctypes
import os
from typing import Any

from app.engine.backend import ModelInfo
from app.engine.llama.bindings import bindings_version, lc
from app.engine.llama.embedder import POOLING_NAMES
from app.engine.llama.vocab import LlamaVocabulary, model_meta


def declared_pooling(model: Any) -> str:
    """The pooling the model's metadata declares (rank for rerankers), or "unspecified"."""
    arch = model_meta(model, "general.architecture") or ""
    value = model_meta(model, f"{arch}.pooling_type")
    try:
        return POOLING_NAMES.get(int(value), "unspecified") if value is not None else "unspecified"
    except ValueError:
        return "unspecified"


def read_model_info(model: Any, path: str, vocab: Any, vocabulary: LlamaVocabulary) -> ModelInfo:
    desc = ctypes.create_string_buffer(256)
    lc.llama_model_desc(model, desc, len(desc))
    bos = lc.llama_vocab_bos(vocab)
    eos = lc.llama_vocab_eos(vocab)
    template = lc.llama_model_chat_template(model, None)
    rerank = lc.llama_model_chat_template(model, b"rerank")
    return ModelInfo(
        path=path,
        name=model_meta(model, "general.name") or os.path.basename(path),
        vocab_type=int(lc.llama_vocab_type(vocab)),
        n_vocab=vocabulary.n_vocab,
        n_ctx_train=int(lc.llama_model_n_ctx_train(model)),
        n_embd=int(lc.llama_model_n_embd(model)),
        n_params=int(lc.llama_model_n_params(model)),
        size=int(lc.llama_model_size(model)),
        bos_token=vocabulary.piece(bos, True).decode("utf-8", "replace") if bos >= 0 else "",
        eos_token=vocabulary.piece(eos, True).decode("utf-8", "replace") if eos >= 0 else "",
        add_bos=bool(lc.llama_vocab_get_add_bos(vocab)),
        chat_template=template.decode("utf-8", "replace") if template else None,
        description=desc.value.decode("utf-8", "replace"),
        build_info=f"b{bindings_version()}-llama-cpp-python",
        pooling=declared_pooling(model),
        ftype=(lc.llama_ftype_name(lc.llama_model_ftype(model)) or b"").decode("utf-8", "replace"),
        add_eos=bool(lc.llama_vocab_get_add_eos(vocab)),
        add_sep=bool(lc.llama_vocab_get_add_sep(vocab)),
        rerank_template=rerank.decode("utf-8", "replace") if rerank else None,
    )
