"""--cpu-range, --poll and --prio on a real server: llama.cpp's threads run on the CPUs given (the HTTP
threads keep the others), libgomp's threads sleep at once instead of spinning, and the process runs
at the lower priority; generation works as before."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import requests

from app.model_sources.files import embedded_model_path
from tests.integration.conftest import start


def worker_pid(master: int) -> int:
    children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
    assert len(children) == 1, children
    return int(children[0])


def thread_cpus(pid: int) -> dict[int, str]:
    """Each thread of ``pid``: the CPUs it may run on, as /proc lists them."""
    cpus = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        for line in (task / "status").read_text().splitlines():
            if line.startswith("Cpus_allowed_list:"):
                cpus[int(task.name)] = line.split(":", 1)[1].strip()
    return cpus


def test_llama_cpp_threads_placed_waiting_passively_at_low_priority(tmp_path: Path) -> None:
    allowed = sorted(os.sched_getaffinity(0))
    first = allowed[0]
    server = start(tmp_path, ["-np", "1", "--cpu-range", f"{first}-{first}", "--poll", "0", "--prio", "-1"])
    try:
        reply = requests.post(server.url("/completion"), timeout=120, json={
            "prompt": "Once upon a time", "n_predict": 8, "temperature": 0, "ignore_eos": True})
        assert reply.status_code == 200 and reply.json()["tokens_predicted"] == 8
        worker = worker_pid(server.process.pid)
        assert "llama.cpp's OpenMP threads: OMP_WAIT_POLICY=passive" in server.log()
        nice = int(Path(f"/proc/{worker}/stat").read_text().rsplit(")", 1)[1].split()[16])
        assert nice == 5  # llama.cpp's "low"
        placed = thread_cpus(worker)
        assert str(first) in placed.values()  # the engine thread (and any OpenMP thread it made)
        if len(allowed) > 1:
            assert placed[worker] != str(first)  # the main thread, and the HTTP threads, keep every CPU
        assert "llama.cpp's threads run on CPUs" in server.log()
    finally:
        assert server.stop() == 0, server.log()


def test_libgomp_reads_the_settings_made_before_llama_cpp_loads() -> None:
    """The order app/server/cli.py relies on: variables set by prepare_process, then the import that loads
    libgomp, which takes them (OMP_PROC_BIND is the one it can be asked about)."""
    probe = (
        "import ctypes, os; from app.host.cpu_placement import prepare_process; "
        "prepare_process(frozenset(os.sched_getaffinity(0)), True, 50, 0); import llama_cpp; "
        "omp = ctypes.CDLL('libgomp.so.1'); print(omp.omp_get_proc_bind())"
    )
    environment = {key: value for key, value in os.environ.items() if not key.startswith(("OMP_", "GOMP_"))}
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                            env=environment, cwd=Path(__file__).resolve().parents[2])
    assert result.stdout.strip() == "3"  # omp_proc_bind_close


def llama_threads_on(pid: int, cpu: int) -> set[int]:
    return {task for task, cpus in thread_cpus(pid).items() if cpus == str(cpu)}


def test_prompts_and_generation_run_on_their_own_cpus(tmp_path: Path) -> None:
    """-Crb places prompt processing's thread pool apart from generation's (-Cr), as llama-server's two pools:
    after a completion (its last graph a one-token step) llama.cpp's threads are on generation's CPU; after an
    embedding (a batch: the prompt pool, which the embedding context shares) the same threads are on the other."""
    allowed = sorted(os.sched_getaffinity(0))
    generation, prompts = allowed[0], allowed[-1]
    server = start(tmp_path, ["-np", "1", "-t", "2", "-tb", "2", "--cpu-range", f"{generation}-{generation}",
                              "--cpu-range-batch", f"{prompts}-{prompts}"])
    try:
        reply = requests.post(server.url("/completion"), timeout=120, json={
            "prompt": "Once upon a time", "n_predict": 4, "temperature": 0, "ignore_eos": True})
        assert reply.status_code == 200 and reply.json()["tokens_predicted"] == 4
        worker = worker_pid(server.process.pid)
        placed = llama_threads_on(worker, generation)
        assert len(placed) >= 2, thread_cpus(worker)  # the engine thread and its OpenMP thread
        reply = requests.post(server.url("/embedding"), timeout=120, json={"content": "a prompt to embed"})
        assert reply.status_code == 200, reply.text
        assert placed <= llama_threads_on(worker, prompts), thread_cpus(worker)
        assert (f"generation: 2 threads on CPUs {generation}, priority 0, poll 50; "
                f"prompts: 2 threads on CPUs {prompts}") in server.log()
    finally:
        assert server.stop() == 0, server.log()


def test_the_draft_models_pools_take_their_own_placement(tmp_path: Path) -> None:
    """--spec-draft-cpu-range and --spec-draft-cpu-strict-batch reach the draft model's pools (its prompt pool
    otherwise follows the target's prompt pool, placed nowhere here, as llama-server's); it still drafts."""
    last = sorted(os.sched_getaffinity(0))[-1]
    model = str(embedded_model_path())
    server = start(tmp_path, ["-np", "1", "-t", "2", "-md", model, "-td", "1", "-tbd", "2",
                              "--spec-draft-cpu-range", f"{last}-{last}", "--spec-draft-cpu-strict-batch", "1"])
    try:
        reply = requests.post(server.url("/completion"), timeout=120, json={
            "prompt": "1, 2, 3, 4, 5,", "n_predict": 8, "temperature": 0, "ignore_eos": True})
        assert reply.status_code == 200 and reply.json()["tokens_predicted"] == 8
        assert reply.json()["timings"].get("draft_n", 0) > 0, reply.json()["timings"]
        assert (f"generation: 1 threads on CPUs {last}, priority 0, poll 50; "
                "prompts: 2 threads on any CPU, priority 0, poll 50") in server.log()
    finally:
        assert server.stop() == 0, server.log()
