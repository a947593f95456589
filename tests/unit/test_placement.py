"""Where tensors go: --override-tensor, --cpu-moe, --n-cpu-moe, --n-cpu-ffn and --device (and the draft's),
from the flags to llama.cpp's llama_model_params, with the real ggml devices of this machine."""

from __future__ import annotations

import ctypes

import pytest

from app.config.engine_config import llama_config
from app.config.placement import FFN_DENSE, FFN_EXPERTS
from app.config.settings import SettingsError, parse_settings
from app.engine.errors import ModelLoadError
from app.engine.llama.config import LoadConfig
from app.engine.llama.ggml import buffer_types, describe_devices, load_ggml_backends
from app.engine.llama.params import BufferTypeOverride, model_params
from app.engine.types import TensorOverride


def settings(*argv: str, **env: str):  # type: ignore[no-untyped-def]
    return parse_settings(list(argv), env, error=lambda message: None)


def test_the_overrides_come_in_llama_servers_order() -> None:
    given = settings("-ot", r"blk\.0\.attn_.*=CPU,token_embd=CPU", "--cpu-moe", "--n-cpu-moe", "2",
                     "--n-cpu-ffn", "1", "-ot", "output=CPU")
    assert given.tensor_overrides == (
        TensorOverride(r"blk\.0\.attn_.*", "CPU"), TensorOverride("token_embd", "CPU"),
        TensorOverride("output", "CPU"), TensorOverride(FFN_EXPERTS, "CPU"),
        TensorOverride(r"blk\.0" + FFN_EXPERTS, "CPU"), TensorOverride(r"blk\.1" + FFN_EXPERTS, "CPU"),
        TensorOverride(r"blk\.0" + FFN_DENSE, "CPU"))
    loading = llama_config(given, "/m.gguf").loading
    assert loading.tensor_overrides == given.tensor_overrides and loading.devices is None


def test_the_environment_names_and_the_draft_model_take_their_own() -> None:
    given = settings("-md", "/draft.gguf", "-otd", "x=CPU", "-devd", "none",
                     LLAMA_ARG_OVERRIDE_TENSOR="y=CPU", LLAMA_ARG_N_CPU_MOE="1", LLAMA_ARG_DEVICE="CUDA0,CUDA1")
    config = llama_config(given, "/m.gguf", draft_path="/draft.gguf")
    assert config.loading.tensor_overrides == (TensorOverride("y", "CPU"),
                                               TensorOverride(r"blk\.0" + FFN_EXPERTS, "CPU"))
    assert config.loading.devices == ("CUDA0", "CUDA1")
    assert config.draft is not None
    assert config.draft.loading.tensor_overrides == (TensorOverride("x", "CPU"),)
    assert config.draft.loading.devices == ()  # none: no offload


@pytest.mark.parametrize(("argv", "message"), [
    (("-ot", "no-equals"), "--override-tensor: 'no-equals' is not <tensor name pattern>=<buffer type>"),
    (("-ot", "=CPU"), "--override-tensor"),
    (("--device", " , "), "--device: no devices specified"),
    (("--n-cpu-moe", "-1"), "below the minimum"),
])
def test_a_placement_that_cannot_be_read_is_refused_naming_its_flag(argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        settings(*argv)


def test_the_overrides_reach_llama_model_params_as_llama_cpp_reads_them() -> None:
    load_ggml_backends()
    types = buffer_types()
    assert "CPU" in types
    config = LoadConfig(tensor_overrides=(TensorOverride(r"blk\.0\.", "CPU"), TensorOverride("output", "CPU")),
                        devices=())
    params, keep = model_params(config, 0)
    overrides = ctypes.cast(params.tensor_buft_overrides, ctypes.POINTER(BufferTypeOverride))
    assert [(overrides[i].pattern, overrides[i].buft) for i in range(3)] == [
        (rb"blk\.0\.", types["CPU"]), (b"output", types["CPU"]), (None, None)]  # NULL-terminated
    devices = ctypes.cast(params.devices, ctypes.POINTER(ctypes.c_void_p))
    assert devices[0] is None and keep  # --device none: an empty list, no offload
    plain, _ = model_params(LoadConfig(), 0)
    assert plain.tensor_buft_overrides is None and plain.devices is None  # llama.cpp's defaults


def test_an_unknown_buffer_type_or_device_fails_the_load_naming_what_there_is() -> None:
    load_ggml_backends()
    with pytest.raises(ModelLoadError, match=r"unknown buffer type \(available: .*CPU"):
        model_params(LoadConfig(tensor_overrides=(TensorOverride("x", "NOPE0"),)), 0)
    with pytest.raises(ModelLoadError, match="--device: invalid device: NOPE0"):
        model_params(LoadConfig(devices=("NOPE0",)), 0)
    with pytest.raises(ModelLoadError, match="--device: invalid device: CPU"):  # the CPU is not an offload device
        model_params(LoadConfig(devices=("CPU",)), 0)
    assert all(":" in line for line in describe_devices())
