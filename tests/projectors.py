"""A tiny vision projector for the embedded SmolLM2 model, made with the gguf package (no model hub
here): LLaVA's ``mlp`` projector type (a CLIP-style encoder and a two-layer MLP into the language
model's embedding width) with random weights. libmtmd loads it and runs its real preprocessing,
encoding and decoding paths; what the model says about an image means nothing.

Not SmolVLM's ``idefics3`` type: its prompt template needs special tokens (``<row_1_col_1>``,
``<fake_token_around_image>``) that the SmolLM2 vocabulary lacks, so libmtmd fills them with
LLAMA_TOKEN_NULL; the ``mlp`` type adds no tokens of its own."""

from __future__ import annotations

from pathlib import Path

import gguf

from tests.models import RandomWeights

SMOLLM2_EMBD = 576  # the embedded model's embedding width: the projector's output must match it


def encoder_layers(weights: RandomWeights, prefix: str, n_layer: int, n_ff: int, biased: tuple[str, ...],
                   unbiased: tuple[str, ...] = ()) -> None:
    """libmtmd's transformer layers (``{prefix}.blk.N.*``): attention projections with and without
    a bias, two layer norms, the feed-forward pair."""
    n_embd = weights.n_embd
    for layer in range(n_layer):
        for part in biased:
            weights.tensor(f"{prefix}.blk.{layer}.{part}.weight", n_embd, n_embd)
            weights.tensor(f"{prefix}.blk.{layer}.{part}.bias", n_embd)
        for part in unbiased:
            weights.tensor(f"{prefix}.blk.{layer}.{part}.weight", n_embd, n_embd)
        weights.norm(f"{prefix}.blk.{layer}.ln1")
        weights.norm(f"{prefix}.blk.{layer}.ln2")
        weights.tensor(f"{prefix}.blk.{layer}.ffn_up.weight", n_ff, n_embd)
        weights.tensor(f"{prefix}.blk.{layer}.ffn_up.bias", n_ff)
        weights.tensor(f"{prefix}.blk.{layer}.ffn_down.weight", n_embd, n_ff)
        weights.tensor(f"{prefix}.blk.{layer}.ffn_down.bias", n_embd)


def make_vision_projector(path: Path, seed: int = 0, image_size: int = 32, patch_size: int = 8,
                          n_embd: int = 32, n_layer: int = 2, text_embd: int = SMOLLM2_EMBD) -> Path:
    """Every image becomes ``(image_size / patch_size) ** 2`` tokens (16 by default), one chunk;
    the encoder runs ``n_layer - 1`` layers (LLaVA takes the second to last layer's output)."""
    n_ff = 2 * n_embd
    n_patches = (image_size // patch_size) ** 2
    writer = gguf.GGUFWriter(str(path), arch="clip")
    writer.add_name("test-vision-projector")
    writer.add_string("clip.projector_type", "mlp")
    writer.add_bool("clip.has_vision_encoder", True)
    writer.add_bool("clip.has_audio_encoder", False)
    writer.add_bool("clip.use_gelu", True)
    writer.add_uint32("clip.vision.image_size", image_size)
    writer.add_uint32("clip.vision.patch_size", patch_size)
    writer.add_uint32("clip.vision.embedding_length", n_embd)
    writer.add_uint32("clip.vision.feed_forward_length", n_ff)
    writer.add_uint32("clip.vision.block_count", n_layer)
    writer.add_uint32("clip.vision.projection_dim", text_embd)
    writer.add_uint32("clip.vision.attention.head_count", 2)
    writer.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-6)
    writer.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    writer.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])

    weights = RandomWeights(writer, seed, n_embd)
    tensor, norm = weights.tensor, weights.norm
    tensor("v.patch_embd.weight", n_embd, 3, patch_size, patch_size)
    tensor("v.position_embd.weight", n_patches, n_embd)
    norm("v.pre_ln")
    encoder_layers(weights, "v", n_layer, n_ff, biased=("attn_q", "attn_k", "attn_v", "attn_out"))
    tensor("mm.0.weight", text_embd, n_embd, scale=0.5)
    tensor("mm.0.bias", text_embd, scale=0.1)
    tensor("mm.2.weight", text_embd, text_embd, scale=0.1)
    tensor("mm.2.bias", text_embd, scale=0.1)
    weights.finish()
    return path


def make_audio_projector(path: Path, seed: int = 0, n_embd: int = 32, n_layer: int = 1, n_mel: int = 128,
                         text_embd: int = SMOLLM2_EMBD) -> Path:
    """A Qwen2-Audio-style projector (``qwen2a``): a Whisper encoder (two 1-D convolutions, then
    transformer layers) and one linear layer. libmtmd turns audio into 128-bin mel frames in 30 s
    windows; each window's 3000 frames become 1500 tokens."""
    n_ff = 2 * n_embd
    writer = gguf.GGUFWriter(str(path), arch="clip")
    writer.add_name("test-audio-projector")
    writer.add_string("clip.projector_type", "qwen2a")
    writer.add_bool("clip.has_vision_encoder", False)
    writer.add_bool("clip.has_audio_encoder", True)
    writer.add_uint32("clip.audio.num_mel_bins", n_mel)
    writer.add_uint32("clip.audio.embedding_length", n_embd)
    writer.add_uint32("clip.audio.feed_forward_length", n_ff)
    writer.add_uint32("clip.audio.block_count", n_layer)
    writer.add_uint32("clip.audio.projection_dim", text_embd)
    writer.add_uint32("clip.audio.attention.head_count", 2)
    writer.add_float32("clip.audio.attention.layer_norm_epsilon", 1e-5)

    weights = RandomWeights(writer, seed, n_embd)
    tensor, norm = weights.tensor, weights.norm
    tensor("a.conv1d.1.weight", n_embd, n_mel, 3, scale=0.05)
    tensor("a.conv1d.1.bias", n_embd, 1)
    tensor("a.conv1d.2.weight", n_embd, n_embd, 3, scale=0.05)
    tensor("a.conv1d.2.bias", n_embd, 1)
    tensor("a.position_embd.weight", 1500, n_embd)
    encoder_layers(weights, "a", n_layer, n_ff, biased=("attn_q", "attn_v", "attn_out"), unbiased=("attn_k",))
    norm("a.post_ln")
    tensor("mm.a.fc.weight", text_embd, n_embd, scale=0.05)
    tensor("mm.a.fc.bias", text_embd, scale=0.05)
    weights.finish()
    return path
