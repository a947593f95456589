"""Control vectors (``--control-vector``, ``--control-vector-scaled``): GGUF files of ``direction.N``
tensors, one float32 vector of the model's width per layer N (from 1), read with the gguf package,
scaled, summed and applied to the context as llama-server does (common's control vector loader)."""

from __future__ import annotations

import ctypes
import re
from typing import TYPE_CHECKING, Any

from app.engine.errors import ModelLoadError
from app.engine.llama.bindings import lc

if TYPE_CHECKING:  # numpy is imported where control vectors are given: never on the start-up path
    import numpy as np

DIRECTION = re.compile(r"^direction\.(\d+)$")


def _one(path: str, scale: float) -> tuple[int, dict[int, np.ndarray]]:
    """A file's vectors by layer, scaled, and their width."""
    import numpy as np
    from gguf import GGMLQuantizationType, GGUFReader

    try:
        reader = GGUFReader(path)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"--control-vector {path}: cannot read it as GGUF ({exc})") from None
    width = -1
    layers: dict[int, np.ndarray] = {}
    for tensor in reader.tensors:
        match = DIRECTION.match(tensor.name)
        if match is None or int(match[1]) == 0:
            raise ModelLoadError(f"--control-vector {path}: {tensor.name!r} is not a direction.N tensor (N from 1)")
        if tensor.tensor_type != GGMLQuantizationType.F32 or len(tensor.shape) != 1:
            raise ModelLoadError(f"--control-vector {path}: {tensor.name} is not a one-dimensional F32 tensor")
        if width not in (-1, int(tensor.n_elements)):
            raise ModelLoadError(f"--control-vector {path}: its direction tensors differ in width")
        width = int(tensor.n_elements)
        layer = int(match[1])
        layers[layer] = layers.get(layer, np.zeros(width, np.float32)) + np.asarray(tensor.data, np.float32) * scale
    if width == -1:
        raise ModelLoadError(f"--control-vector {path}: no direction tensors")
    return width, layers


def control_vector_data(vectors: tuple[tuple[str, float], ...], n_embd: int) -> np.ndarray:
    """Every file's scaled vectors summed layer by layer: n_embd floats for layer 1, then layer 2, ... up
    to the highest layer given (a layer no file has is zeros)."""
    import numpy as np

    summed: dict[int, np.ndarray] = {}
    for path, scale in vectors:
        width, layers = _one(path, scale)
        if width != n_embd:
            raise ModelLoadError(f"--control-vector {path}: its vectors have {width} values; the model's layers "
                                 f"have {n_embd}")
        for layer, vector in layers.items():
            summed[layer] = summed.get(layer, np.zeros(n_embd, np.float32)) + vector
    data = np.zeros((max(summed), n_embd), np.float32)
    for layer, vector in summed.items():
        data[layer - 1] = vector
    return data.reshape(-1)


def apply_control_vectors(ctx: Any, model: Any, vectors: tuple[tuple[str, float], ...],
                          layers: tuple[int, int] | None) -> None:
    """Set the control vectors on ``ctx`` for the layer range (llama-server's defaults: 1 to the last)."""
    n_embd, n_layer = int(lc.llama_model_n_embd(model)), int(lc.llama_model_n_layer(model))
    data = control_vector_data(vectors, n_embd)
    start, end = layers if layers is not None else (1, n_layer)
    start, end = (start if start > 0 else 1), (end if end > 0 else n_layer)
    pointer = data.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
    if lc.llama_set_adapter_cvec(ctx, pointer, data.size, n_embd, start, end) != 0:
        raise ModelLoadError(f"llama.cpp refused the control vectors (layers {start} to {end} of {n_layer})")
