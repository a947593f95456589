"""Where the model's tensors go: the devices offloaded to, tensor overrides, Mixture-of-Experts and FFN
weights kept in host memory; the same for the draft model."""

from __future__ import annotations

from dataclasses import dataclass

from app.config.options import SettingsError, option
from app.engine.llama.config import split_endpoint
from app.engine.types import TensorOverride

# llama.cpp's (common/common.h): the expert weights of a MoE layer, and a dense layer's FFN weights
FFN_EXPERTS = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"
FFN_DENSE = r"\.ffn_(up|down|gate)\."
HOST = "CPU"  # the CPU device's buffer type


def parse_overrides(given: tuple[str, ...], flag: str) -> tuple[TensorOverride, ...]:
    """``PATTERN=BUFFER_TYPE,...`` (repeatable), as llama-server's --override-tensor."""
    overrides = []
    for value in given:
        for item in value.split(","):
            pattern, sep, buffer_type = item.partition("=")
            if not sep or not pattern or not buffer_type:
                raise SettingsError(f"{flag}: {item!r} is not <tensor name pattern>=<buffer type>")
            overrides.append(TensorOverride(pattern, buffer_type))
    return tuple(overrides)


def layer_overrides(layers: int, weights: str) -> tuple[TensorOverride, ...]:
    """The first ``layers`` layers' ``weights`` kept in host memory (--n-cpu-moe, --n-cpu-ffn)."""
    return tuple(TensorOverride(rf"blk\.{index}{weights}", HOST) for index in range(layers))


def device_list(value: str | None, flag: str) -> tuple[str, ...] | None:
    """--device's devices: None (every device), () for ``none`` (no offload), or the names given."""
    if value is None:
        return None
    names = tuple(name.strip() for name in value.split(",") if name.strip())
    if not names:
        raise SettingsError(f"{flag}: no devices specified")
    return () if names == ("none",) else names


@dataclass(frozen=True)
class PlacementSettings:
    """Where the model's tensors go: the devices offloaded to, tensor overrides, Mixture-of-Experts and FFN
    weights kept in host memory; the same for the draft model."""

    device: str | None = option(("-dev", "--device"), "str", None,
        "comma-separated devices to offload to (none: no offload; default: every GPU); --list-devices names "
        "them", env="LLAMA_ARG_DEVICE", metavar="DEV1,DEV2")
    list_devices: bool = option(("--list-devices",), "bool", False, "print the devices llama.cpp sees, and exit")
    rpc: str | None = option(("--rpc",), "str", None,
        "comma-separated rpc-servers (HOST:PORT, llama.cpp's rpc-server) whose devices are offloaded to like GPUs "
        "(RPC0, RPC1, ...)", env="LLAMA_ARG_RPC", metavar="SERVERS")
    override_tensor: tuple[str, ...] = option(("-ot", "--override-tensor"), "texts", (),
        "tensors whose name matches a pattern go to a buffer type (CPU, CUDA0, ...): PATTERN=TYPE,... "
        "(repeatable; the first match wins)", env="LLAMA_ARG_OVERRIDE_TENSOR", metavar="PATTERN=TYPE,...")
    cpu_moe: bool = option(("-cmoe", "--cpu-moe"), "bool", False,
        "keep every Mixture-of-Experts expert weight in host memory (the rest of the layer on the GPU)",
        env="LLAMA_ARG_CPU_MOE")
    n_cpu_moe: int = option(("-ncmoe", "--n-cpu-moe"), "int", 0,
        "keep the expert weights of the first N layers in host memory", env="LLAMA_ARG_N_CPU_MOE", minimum=0,
        metavar="N")
    n_cpu_ffn: int = option(("-ncffn", "--n-cpu-ffn"), "int", 0,
        "keep the dense FFN weights of the first N layers in host memory (dense models)",
        env="LLAMA_ARG_N_CPU_FFN", minimum=0, metavar="N")
    mmproj_device: str | None = option(("-mmdev", "--mmproj-device"), "str", None,
        "the device the multimodal projector runs on (default: the first GPU)", env="MTMD_BACKEND_DEVICE",
        metavar="DEV")
    spec_draft_device: str | None = option(("--spec-draft-device", "-devd", "--device-draft"), "str", None,
        "the draft model's devices, as --device", metavar="DEV1,DEV2")
    spec_draft_override_tensor: tuple[str, ...] = option(
        ("--spec-draft-override-tensor", "-otd", "--override-tensor-draft"), "texts", (),
        "the draft model's tensor overrides, as --override-tensor", metavar="PATTERN=TYPE,...")
    spec_draft_cpu_moe: bool = option(("--spec-draft-cpu-moe", "-cmoed", "--cpu-moe-draft"), "bool", False,
        "keep the draft model's expert weights in host memory", env="LLAMA_ARG_SPEC_DRAFT_CPU_MOE")
    spec_draft_n_cpu_moe: int = option(
        ("--spec-draft-n-cpu-moe", "--spec-draft-ncmoe", "-ncmoed", "--n-cpu-moe-draft"), "int", 0,
        "keep the expert weights of the draft model's first N layers in host memory",
        env="LLAMA_ARG_SPEC_DRAFT_N_CPU_MOE", minimum=0, metavar="N")

    @property
    def tensor_overrides(self) -> tuple[TensorOverride, ...]:
        """The model's overrides in llama-server's order: --override-tensor's, then --cpu-moe's, then
        --n-cpu-moe's and --n-cpu-ffn's."""
        return (parse_overrides(self.override_tensor, "--override-tensor")
                + ((TensorOverride(FFN_EXPERTS, HOST),) if self.cpu_moe else ())
                + layer_overrides(self.n_cpu_moe, FFN_EXPERTS) + layer_overrides(self.n_cpu_ffn, FFN_DENSE))

    @property
    def draft_tensor_overrides(self) -> tuple[TensorOverride, ...]:
        return (parse_overrides(self.spec_draft_override_tensor, "--spec-draft-override-tensor")
                + ((TensorOverride(FFN_EXPERTS, HOST),) if self.spec_draft_cpu_moe else ())
                + layer_overrides(self.spec_draft_n_cpu_moe, FFN_EXPERTS))

    @property
    def devices(self) -> tuple[str, ...] | None:
        return device_list(self.device, "--device")

    @property
    def draft_devices(self) -> tuple[str, ...] | None:
        return device_list(self.spec_draft_device, "--spec-draft-device")

    @property
    def rpc_servers(self) -> tuple[str, ...]:
        """--rpc's endpoints, each HOST:PORT."""
        if self.rpc is None:
            return ()
        endpoints = tuple(item.strip() for item in self.rpc.split(",") if item.strip())
        if not endpoints:
            raise SettingsError("--rpc: no RPC servers specified")
        for endpoint in endpoints:
            try:
                split_endpoint(endpoint)
            except ValueError as exc:
                raise SettingsError(f"--rpc: {exc}") from None
        return endpoints

    def check(self) -> None:
        """Every override is PATTERN=TYPE and every device list names a device (the names themselves are
        checked against llama.cpp's devices when the model loads)."""
        _ = (self.tensor_overrides, self.draft_tensor_overrides, self.devices, self.draft_devices, self.rpc_servers)
