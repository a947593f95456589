"""Small GGUF files the tests make with the gguf package (no model hub here): a reranker with
random weights, and a LoRA adapter for the embedded SmolLM2 model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf
import numpy as np

WORDS = ["the", "a", "cat", "dog", "sat", "on", "mat", "sun", "is", "hot", "cold", "paris", "france",
         "capital", "of", "what", "where", "red", "blue", "sky", "sea", "big", "small", "fish", "bird"]


class RandomWeights:
    """Random tensors (and layer norms of ones and zeros) written into a GGUF file, drawn in the
    order they are added, so a seed always makes the same file."""

    def __init__(self, writer: gguf.GGUFWriter, seed: int, n_embd: int) -> None:
        self.writer = writer
        self.rng = np.random.default_rng(seed)
        self.n_embd = n_embd

    def tensor(self, name: str, *shape: int, scale: float = 0.2) -> None:
        self.writer.add_tensor(name, (self.rng.standard_normal(shape) * scale).astype(np.float32))

    def norm(self, name: str) -> None:
        self.writer.add_tensor(f"{name}.weight", np.ones(self.n_embd, dtype=np.float32))
        self.writer.add_tensor(f"{name}.bias", np.zeros(self.n_embd, dtype=np.float32))

    def finish(self) -> None:
        self.writer.write_header_to_file()
        self.writer.write_kv_data_to_file()
        self.writer.write_tensors_to_file()
        self.writer.close()


def make_reranker(path: Path, seed: int = 0, n_embd: int = 32, n_layer: int = 2) -> Path:
    """A tiny BERT cross-encoder: WordPiece vocabulary, two layers, a classification head, and
    rank pooling declared in its metadata. Random weights: its scores mean nothing, but they are
    computed by llama.cpp's real reranking path."""
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *("\u2581" + w for w in WORDS),
              *"abcdefghijklmnopqrstuvwxyz"]
    n_vocab, n_ff, n_ctx = len(tokens), 2 * n_embd, 128
    writer = gguf.GGUFWriter(str(path), arch="bert")
    writer.add_name("test-reranker")
    writer.add_context_length(n_ctx)
    writer.add_embedding_length(n_embd)
    writer.add_feed_forward_length(n_ff)
    writer.add_block_count(n_layer)
    writer.add_head_count(2)
    writer.add_layer_norm_eps(1e-12)
    writer.add_causal_attention(False)
    writer.add_pooling_type(gguf.PoolingType.RANK)
    writer.add_token_type_count(2)
    writer.add_tokenizer_model("bert")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.CONTROL] * 5 + [gguf.TokenType.NORMAL] * (n_vocab - 5))
    writer.add_bos_token_id(2)
    writer.add_eos_token_id(3)
    writer.add_sep_token_id(3)
    writer.add_pad_token_id(0)
    writer.add_unk_token_id(1)
    writer.add_mask_token_id(4)

    weights = RandomWeights(writer, seed, n_embd)
    tensor, norm = weights.tensor, weights.norm
    tensor("token_embd.weight", n_vocab, n_embd)
    tensor("token_types.weight", 2, n_embd)
    tensor("position_embd.weight", n_ctx, n_embd)
    norm("token_embd_norm")
    for layer in range(n_layer):
        for part in ("attn_q", "attn_k", "attn_v", "attn_output"):
            tensor(f"blk.{layer}.{part}.weight", n_embd, n_embd)
            tensor(f"blk.{layer}.{part}.bias", n_embd)
        norm(f"blk.{layer}.attn_output_norm")
        tensor(f"blk.{layer}.ffn_up.weight", n_ff, n_embd)
        tensor(f"blk.{layer}.ffn_up.bias", n_ff)
        tensor(f"blk.{layer}.ffn_down.weight", n_embd, n_ff)
        tensor(f"blk.{layer}.ffn_down.bias", n_embd)
        norm(f"blk.{layer}.layer_output_norm")
    tensor("cls.weight", n_embd, n_embd)
    tensor("cls.bias", n_embd)
    tensor("cls.output.weight", 1, n_embd, scale=1.0)
    tensor("cls.output.bias", 1)
    weights.finish()
    return path


def make_lora(path: Path, base: Path, rank: int = 4, seed: int = 0, scale: float = 0.05) -> Path:
    """A LoRA adapter for ``base`` (a llama-architecture GGUF) on every layer's attn_q and attn_v."""
    reader = gguf.GGUFReader(str(base))
    shapes = {tensor.name: [int(n) for n in tensor.shape] for tensor in reader.tensors}
    rng = np.random.default_rng(seed)
    writer = gguf.GGUFWriter(str(path), arch="llama")
    writer.add_string("general.type", "adapter")
    writer.add_string("adapter.type", "lora")
    writer.add_float32("adapter.lora.alpha", float(rank))
    for name, shape in sorted(shapes.items()):
        if not name.endswith(("attn_q.weight", "attn_v.weight")):
            continue
        n_in, n_out = shape  # ggml order: inputs first
        writer.add_tensor(f"{name}.lora_a", (rng.standard_normal((rank, n_in)) * scale).astype(np.float32))
        writer.add_tensor(f"{name}.lora_b", (rng.standard_normal((n_out, rank)) * scale).astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def with_metadata(source: Path, target: Path, values: dict[str, tuple[gguf.GGUFValueType, Any]]) -> Path:
    """A copy of a GGUF model with metadata keys added or replaced (gguf's own copier)."""
    from gguf.scripts.gguf_new_metadata import MetadataDetails, copy_with_new_metadata

    reader = gguf.GGUFReader(source, "r")
    arch = str(reader.fields[gguf.Keys.General.ARCHITECTURE].contents())
    writer = gguf.GGUFWriter(str(target), arch=arch, endianess=reader.endianess)
    copy_with_new_metadata(reader, writer, {key: MetadataDetails(kind, value) for key, (kind, value) in values.items()},
                           [])
    return target


def make_control_vector(path: Path, base: Path, seed: int = 0, scale: float = 4.0, layers: int | None = None
                        ) -> Path:
    """A control vector for ``base``: a ``direction.N`` float32 vector of the model's width for each of its
    layers from 1 (or the first ``layers``), as llama.cpp's cvector-generator writes them."""
    reader = gguf.GGUFReader(str(base))
    arch = str(bytes(reader.fields["general.architecture"].parts[-1]), "utf-8")
    n_embd = int(reader.fields[f"{arch}.embedding_length"].parts[-1][0])
    n_layer = int(reader.fields[f"{arch}.block_count"].parts[-1][0])
    rng = np.random.default_rng(seed)
    writer = gguf.GGUFWriter(str(path), arch="controlvector")
    writer.add_string("controlvector.model_hint", arch)
    for layer in range(1, (layers or n_layer) + 1):
        writer.add_tensor(f"direction.{layer}", (rng.standard_normal(n_embd) * scale).astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def make_swa_model(path: Path, base: Path, window: int = 32, pattern: int = 2) -> Path:
    """The embedded SmolLM2 model as a sliding-window one: its weights under llama.cpp's ``granite_swa``
    architecture (a llama with attention sinks, and SWA on the layers the pattern marks: every layer but
    each ``pattern``-th attends only to the last ``window`` positions). Its text is still SmolLM2's, near
    enough; what matters is that llama.cpp keeps an SWA cache for it, which is pruned past the window."""
    reader = gguf.GGUFReader(base, "r")
    source_arch = str(reader.fields[gguf.Keys.General.ARCHITECTURE].contents())
    arch = "granite_swa"
    writer = gguf.GGUFWriter(str(path), arch=arch, endianess=reader.endianess)
    n_layer = n_head = 0
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        name = field.name.replace(f"{source_arch}.", f"{arch}.", 1)
        value_type = field.types[0]
        sub_type = field.types[-1] if value_type == gguf.GGUFValueType.ARRAY else None
        value = field.contents()
        writer.add_key_value(name, value, value_type, sub_type=sub_type)
        if name == f"{arch}.block_count":
            n_layer = int(value)
        if name == f"{arch}.attention.head_count":
            n_head = int(value)
    writer.add_key_value(f"{arch}.logit_scale", 1.0, gguf.GGUFValueType.FLOAT32)
    writer.add_key_value(f"{arch}.attention.sliding_window", window, gguf.GGUFValueType.UINT32)
    writer.add_key_value(f"{arch}.attention.sliding_window_pattern",
                         [(layer + 1) % pattern != 0 for layer in range(n_layer)], gguf.GGUFValueType.ARRAY,
                         sub_type=gguf.GGUFValueType.BOOL)
    sinks = np.full(n_head, -30.0, dtype=np.float32)  # a sink's weight in the softmax: e^-30, nothing
    for tensor in reader.tensors:
        writer.add_tensor_info(tensor.name, tensor.data.shape, tensor.data.dtype, tensor.data.nbytes,
                               tensor.tensor_type)
    for layer in range(n_layer):
        writer.add_tensor_info(f"blk.{layer}.attn_sinks.weight", sinks.shape, sinks.dtype, sinks.nbytes,
                               gguf.GGMLQuantizationType.F32)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for tensor in reader.tensors:
        writer.write_tensor_data(tensor.data, tensor_endianess=reader.endianess)
    for _ in range(n_layer):
        writer.write_tensor_data(sinks, tensor_endianess=reader.endianess)
    writer.close()
    return path
