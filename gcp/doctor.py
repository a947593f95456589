"""``python -m gcp doctor``: before a deploy, what will go wrong, each as a pass / warn / fail line
with its fix.

- the model: its GGUF header read from Cloud Storage with ranged reads (gcp/gguf_header.py), not a
  download: parameters, quantisation, file size;
- memory: the KV cache for the context and slots, whether weights, KV cache and compute buffers fit
  the GPUs (and how many layers do when they do not), or the machine's RAM on a CPU;
- the download: its time at the machine's network rate against the deployment timeout;
- access: whether the *serving* account may read the model. ``testIamPermissions`` answers only for
  the caller, so this asks the IAM Policy Troubleshooter about that account (the caller needs
  permission to troubleshoot; the answer says so when it cannot);
- quota: the project's Vertex AI serving quota for the accelerator in the region (Cloud Quotas API).

The memory figures are estimates (llama.cpp's own fitting is in a library the wheel does not ship).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import requests
from google.cloud import storage

from app.model_sources.gcs import GcsUri, model_blobs
from gcp.deploy import Target
from gcp.gguf_header import GgufHeader, read_gguf_header

IAM_TROUBLESHOOTER_HOST = "https://policytroubleshooter.googleapis.com"
CLOUD_QUOTAS_HOST = "https://cloudquotas.googleapis.com"
GIB = 1024**3
KV_BYTES_PER_VALUE = 2  # an f16 cache, llama.cpp's default
GPU_HEADROOM = 0.95  # what the CUDA context and fragmentation leave of a GPU's memory
HOST_OVERHEAD_GIB = 2.0  # the container, Python and llama.cpp beside the model
DOWNLOAD_EFFICIENCY = 0.5  # of the machine's network rate, for one Cloud Storage download
GPU_MEMORY_GIB = {"NVIDIA_TESLA_T4": 16, "NVIDIA_TESLA_P4": 8, "NVIDIA_TESLA_P100": 16, "NVIDIA_TESLA_V100": 16,
                  "NVIDIA_L4": 24, "NVIDIA_TESLA_A100": 40, "NVIDIA_A100_80GB": 80, "NVIDIA_H100_80GB": 80,
                  "NVIDIA_H100_MEGA_80GB": 80, "NVIDIA_H200_141GB": 141, "NVIDIA_B200": 180}
# machine -> (vCPUs, memory GiB), for the machines Vertex AI serves GPUs on; other families by rule
MACHINES = {**{f"g2-standard-{n}": (n, 4 * n) for n in (4, 8, 12, 16, 24, 32, 48, 96)},
            "a2-highgpu-1g": (12, 85), "a2-highgpu-2g": (24, 170), "a2-highgpu-4g": (48, 340),
            "a2-highgpu-8g": (96, 680), "a2-ultragpu-1g": (12, 170), "a2-ultragpu-2g": (24, 340),
            "a2-ultragpu-4g": (48, 680), "a2-ultragpu-8g": (96, 1360), "a3-highgpu-1g": (26, 234),
            "a3-highgpu-2g": (52, 468), "a3-highgpu-4g": (104, 936), "a3-highgpu-8g": (208, 1872),
            "a3-megagpu-8g": (208, 1872), "a3-ultragpu-8g": (224, 2952)}
_FAMILY = re.compile(r"^(n1|n2|n2d|e2|c2|c2d|c3|n4)-(standard|highmem|highcpu)-(\d+)$")
_GIB_PER_VCPU = {("n1", "standard"): 3.75, ("n1", "highmem"): 6.5, ("n1", "highcpu"): 0.9,
                 "standard": 4.0, "highmem": 8.0, "highcpu": 1.0}


@dataclass(frozen=True)
class Finding:
    status: str  # pass, warn or fail
    check: str
    detail: str
    fix: str = ""

    def lines(self) -> list[str]:
        head = f"{self.status.upper():4}  {self.check}: {self.detail}"
        return [head, f"      fix: {self.fix}"] if self.fix else [head]


@dataclass(frozen=True)
class Plan:
    """What the deployment will run: the machine, its accelerators, the context and slots."""

    machine_type: str
    accelerator_type: str | None
    accelerator_count: int
    ctx_size: int  # 0: the model's training context
    parallel: int
    deployment_timeout_s: int
    max_replicas: int


@dataclass(frozen=True)
class ModelShape:
    """What the estimates need from the header."""

    n_layer: int
    n_ctx_train: int
    kv_values_per_token: int  # K and V values a token takes over all layers
    n_embd: int
    n_vocab: int

    @classmethod
    def of(cls, header: GgufHeader) -> ModelShape:
        n_layer = int(header.arch_value("block_count", 0))
        n_embd = int(header.arch_value("embedding_length", 0))
        n_head = header.arch_value("attention.head_count", 1)
        n_head = max(n_head) if isinstance(n_head, list) else int(n_head)
        heads_kv = header.arch_value("attention.head_count_kv", n_head)
        per_layer = heads_kv if isinstance(heads_kv, list) else [int(heads_kv)] * n_layer
        head_k = int(header.arch_value("attention.key_length", n_embd // max(n_head, 1)))
        head_v = int(header.arch_value("attention.value_length", head_k))
        tokens = header.metadata.get("tokenizer.ggml.tokens")
        n_vocab = len(tokens) if isinstance(tokens, list) else int(header.arch_value("vocab_size", 32000))
        return cls(n_layer, int(header.arch_value("context_length", 4096)),
                   sum(int(h) * (head_k + head_v) for h in per_layer), n_embd, n_vocab)

    def kv_bytes(self, ctx: int) -> int:
        return ctx * self.kv_values_per_token * KV_BYTES_PER_VALUE

    def compute_bytes(self, ubatch: int = 512) -> int:
        """llama.cpp's compute buffers for one ubatch, roughly: logits plus activations."""
        return ubatch * (self.n_vocab + 8 * self.n_embd) * 4


def machine_resources(machine_type: str) -> tuple[int, float] | None:
    """(vCPUs, memory GiB) of a machine type, or None when this tool does not know it."""
    if machine_type in MACHINES:
        vcpus, memory = MACHINES[machine_type]
        return vcpus, float(memory)
    match = _FAMILY.match(machine_type)
    if match is None:
        return None
    family, kind, vcpus = match.group(1), match.group(2), int(match.group(3))
    per_vcpu = _GIB_PER_VCPU.get((family, kind), _GIB_PER_VCPU[kind])
    return vcpus, vcpus * float(per_vcpu)


def _gib(value: float) -> str:
    return f"{value / GIB:.1f} GiB" if value >= GIB / 10 else f"{value / 1024**2:.1f} MiB"


def _count(parameters: int) -> str:
    return f"{parameters / 1e9:.2f} B" if parameters >= 1e8 else f"{parameters / 1e6:.1f} M"


def model_finding(header: GgufHeader, file_bytes: int) -> Finding:
    return Finding("pass", "model", f"{header.architecture}, {_count(header.parameters)} parameters, "
                                    f"{header.quantization}, {_gib(file_bytes)} ({header.bytes_read / 1024:.0f} KiB "
                                    "read for the header)")


def memory_findings(shape: ModelShape, plan: Plan, weights: int) -> list[Finding]:
    ctx = plan.ctx_size or shape.n_ctx_train
    kv, compute = shape.kv_bytes(ctx), shape.compute_bytes()
    kv_line = f"KV cache {_gib(kv)} for {ctx} tokens ({plan.parallel} slots of {ctx // plan.parallel})"
    findings = [Finding("pass", "kv cache", kv_line)]
    resources = machine_resources(plan.machine_type)
    if plan.accelerator_type and plan.accelerator_count:
        gpu_gib = GPU_MEMORY_GIB.get(plan.accelerator_type)
        if gpu_gib is None:
            return [*findings, Finding("warn", "gpu memory", f"unknown accelerator {plan.accelerator_type}")]
        vram = gpu_gib * plan.accelerator_count * GIB * GPU_HEADROOM
        findings.append(_gpu_fit(shape, ctx, weights, kv, compute, vram, plan))
    if resources is None:
        return [*findings, Finding("warn", "host memory", f"unknown machine type {plan.machine_type}")]
    ram = resources[1] * GIB
    host_need = weights + HOST_OVERHEAD_GIB * GIB + (0 if plan.accelerator_type else kv + compute)
    if host_need <= ram:
        findings.append(Finding("pass", "host memory", f"{_gib(host_need)} of {_gib(ram)} on {plan.machine_type}"))
    else:
        findings.append(Finding("fail", "host memory", f"needs {_gib(host_need)}, {plan.machine_type} has "
                                                        f"{_gib(ram)}", "a machine type with more memory"
                                + ("" if plan.accelerator_type else ", or a lower --ctx-size")))
    return findings


def _gpu_fit(shape: ModelShape, ctx: int, weights: int, kv: int, compute: int, vram: float,
             plan: Plan) -> Finding:
    gpus = f"{plan.accelerator_count} x {plan.accelerator_type}"
    need = weights + kv + compute
    if need <= vram:
        return Finding("pass", "gpu memory", f"all {shape.n_layer} layers fit: {_gib(need)} of {_gib(vram)} "
                                             f"on {gpus}")
    per_token = shape.kv_values_per_token * KV_BYTES_PER_VALUE
    fitting_ctx = int((vram - weights - compute) // per_token) // 256 * 256 if per_token else 0
    lower = (f"--ctx-size {fitting_ctx} fits every layer" if fitting_ctx >= 256 * plan.parallel
             else "no context fits every layer")
    layers = math.floor((vram - kv - compute) / (weights / max(shape.n_layer, 1))) if weights else 0
    if layers <= 0:
        return Finding("fail", "gpu memory", f"needs {_gib(need)} (KV cache {_gib(kv)}), {gpus} has {_gib(vram)}: "
                                             "not one layer fits beside the KV cache",
                       f"{lower}; or more or larger GPUs")
    return Finding("warn", "gpu memory", f"needs {_gib(need)}, {gpus} has {_gib(vram)}: {min(layers, shape.n_layer)} "
                                         f"of {shape.n_layer} layers fit (the rest run on the CPU, much slower)",
                   f"{lower}; or --n-gpu-layers {min(layers, shape.n_layer)} to accept it")


def download_finding(file_bytes: int, plan: Plan) -> Finding:
    resources = machine_resources(plan.machine_type)
    if resources is None:
        return Finding("warn", "download", f"unknown machine type {plan.machine_type}: rate unknown")
    gbps = min(2 * resources[0], 32)  # Compute Engine's egress rate: 2 Gbps a vCPU, 32 at most here
    seconds = file_bytes * 8 / (gbps * 1e9 * DOWNLOAD_EFFICIENCY)
    detail = (f"about {seconds:.0f} s for {_gib(file_bytes)} at {gbps} Gbps (half used), against a "
              f"{plan.deployment_timeout_s} s deployment timeout")
    if seconds < plan.deployment_timeout_s / 2:
        return Finding("pass", "download", detail)
    fix = "upload --deployment-timeout (7200 at most), or a machine with more vCPUs (network rate)"
    return Finding("warn" if seconds < plan.deployment_timeout_s else "fail", "download", detail, fix)


def access_findings(session: requests.Session, iam_host: str, bucket: str, account: str | None) -> list[Finding]:
    if not account:
        return [Finding("warn", "model access", "not checked: the serving account is Vertex AI's default "
                                                "(service-PROJECT_NUMBER@gcp-sa-aiplatform-cc.iam.gserviceaccount.com)",
                        "pass --service-account (the account deploy --service-account will use) to check it")]
    findings = []
    for permission in ("storage.objects.get", "storage.objects.list"):
        body = {"accessTuple": {"principal": account, "permission": permission,
                                "fullResourceName": f"//storage.googleapis.com/projects/_/buckets/{bucket}"}}
        response = session.post(f"{iam_host}/v1/iam:troubleshoot", json=body, timeout=60)
        how = f"{permission} on gs://{bucket} for {account} (IAM Policy Troubleshooter)"
        if response.status_code >= 400:
            findings.append(Finding("warn", "model access", f"{how}: could not ask ({response.status_code}: "
                                                            f"{response.text[:200]})",
                                    "the caller needs iam.roles.get / troubleshooting rights, or check by hand"))
            continue
        access = response.json().get("access", "UNKNOWN")
        if access == "GRANTED":
            findings.append(Finding("pass", "model access", f"{how}: granted"))
        else:
            findings.append(Finding("fail" if access == "NOT_GRANTED" else "warn", "model access",
                                    f"{how}: {access.lower()}",
                                    f"gcloud storage buckets add-iam-policy-binding gs://{bucket} "
                                    f"--member=serviceAccount:{account} --role=roles/storage.objectViewer"))
    return findings


def _quota_key(name: str) -> str:
    """``NVIDIA_TESLA_T4`` and ``.../custom_model_serving_nvidia_t4_gpus`` both as ``t4``."""
    name = name.lower().rsplit("/", 1)[-1]
    for prefix in ("custom_model_serving_", "nvidia_", "tesla_"):
        name = name.removeprefix(prefix)
    return name.removesuffix("_gpus")


def quota_finding(session: requests.Session, target: Target, quotas_host: str, plan: Plan) -> Finding:
    if not plan.accelerator_type or not plan.accelerator_count:
        return Finding("pass", "quota", "no accelerator: no GPU quota needed")
    need = plan.accelerator_count * plan.max_replicas
    url = (f"{quotas_host}/v1/projects/{target.project}/locations/global/services/aiplatform.googleapis.com/"
           "quotaInfos")
    infos: list[dict[str, Any]] = []
    token = ""
    while True:
        response = session.get(url, params={"pageToken": token} if token else None, timeout=60)
        if response.status_code >= 400:
            return Finding("warn", "quota", f"could not read quotas ({response.status_code}: {response.text[:200]})",
                           "the caller needs cloudquotas.quotas.get (roles/cloudquotas.viewer)")
        page = response.json()
        infos += page.get("quotaInfos", [])
        token = page.get("nextPageToken", "")
        if not token:
            break
    key = _quota_key(plan.accelerator_type)
    for info in infos:
        metric = info.get("metric", "")
        if "custom_model_serving" not in metric or _quota_key(metric) != key:
            continue
        for dimension in info.get("dimensionsInfos", []):
            if dimension.get("dimensions", {}).get("region") in (target.region, None):
                limit = int(dimension.get("details", {}).get("value", 0))
                detail = (f"{info.get('quotaId')} in {target.region}: limit {limit}, the deployment needs up to "
                          f"{need} ({plan.accelerator_count} x {plan.max_replicas} replicas)")
                if limit >= need:
                    return Finding("pass", "quota", detail)
                return Finding("fail", "quota", detail, "request more in the console (IAM & Admin > Quotas) or "
                                                        "lower --max-replicas")
    return Finding("warn", "quota", f"no Vertex AI serving quota for {plan.accelerator_type} in {target.region} found",
                   "check IAM & Admin > Quotas for custom model serving GPUs in the region")


def _ranged_reader(blob: Any) -> Any:
    def read(start: int, length: int) -> bytes:
        if start >= blob.size:
            return b""
        return bytes(blob.download_as_bytes(start=start, end=min(start + length, blob.size) - 1))

    return read


def read_model(client: storage.Client, uri: str) -> tuple[GgufHeader, int]:
    """The model's header (every part's tensors, for a split GGUF) and its size in bytes, with ranged
    reads: only the header's bytes come down."""
    blobs = model_blobs(client, GcsUri.parse(uri))
    headers = [read_gguf_header(_ranged_reader(blob)) for blob in blobs]
    first = headers[0]
    for part in headers[1:]:
        first.tensors.update(part.tensors)
        first.bytes_read += part.bytes_read
    return first, sum(int(blob.size) for blob in blobs)


def diagnose(target: Target, client: storage.Client, uri: str, plan: Plan, account: str | None,
             iam_host: str = IAM_TROUBLESHOOTER_HOST, quotas_host: str = CLOUD_QUOTAS_HOST) -> list[Finding]:
    header, size = read_model(client, uri)
    session = target.session()  # one credential lookup for every REST call
    return [
        model_finding(header, size),
        *memory_findings(ModelShape.of(header), plan, size),
        download_finding(size, plan),
        *access_findings(session, iam_host, GcsUri.parse(uri).bucket, account),
        quota_finding(session, target, quotas_host, plan),
    ]
