"""The router's models and their states (llama-server's ``unloaded``, ``loading``, ``loaded``), the
most that run at once (``--models-max``: the least recently used idle model makes room), and the
requests each serves (a model is unloaded only once they finish, or its ``stop-timeout`` ends)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from app.protocol.errors import InvalidRequestError, ServerError
from app.router.catalog import ModelEntry
from app.router.children import Child, Spawner, exit_status, terminate

log = logging.getLogger(__name__)

WAIT_STEP_SECONDS = 0.1  # how often a waiting request looks at its client


@dataclass
class ModelState:
    """One model: its entry, its status, its child (while one runs), how its last child ended."""

    entry: ModelEntry
    status: str = "unloaded"
    child: Child | None = None
    stopping: bool = False
    exit_code: int | None = None
    failed: bool = False
    args: list[str] = field(default_factory=list)
    last_used: float = 0.0
    in_flight: int = 0
    info: dict[str, Any] = field(default_factory=dict)  # the child's own /v1/models entry

    @property
    def running(self) -> bool:
        return self.status in ("loading", "loaded")


class RouterModels:
    """Every model of the catalog, and the one lock their states change under."""

    def __init__(self, catalog: dict[str, ModelEntry], spawner: Spawner, models_max: int) -> None:
        self._models = {name: ModelState(entry) for name, entry in catalog.items()}
        self._spawner = spawner
        self._max = models_max
        self._changed = threading.Condition()
        self._closed = False

    # ---- what the routes read ----------------------------------------------------------------

    def state(self, name: str) -> ModelState | None:
        with self._changed:
            return self._models.get(name)

    def require(self, name: str) -> None:
        """llama-server's 400 for a model the router does not know."""
        with self._changed:
            self._known(name)

    def snapshot(self) -> list[ModelState]:
        with self._changed:
            return [ModelState(**vars(state)) for state in self._models.values()]

    def any_loaded(self) -> bool:
        with self._changed:
            return any(state.status == "loaded" and not state.stopping for state in self._models.values())

    def replace_catalog(self, catalog: dict[str, ModelEntry]) -> None:
        """``GET /models?reload=1``: new models are added, changed ones take their new entry (a running one
        is unloaded first), removed ones are unloaded and dropped."""
        with self._changed:
            for name, state in list(self._models.items()):
                new = catalog.get(name)
                if new != state.entry and state.running:
                    self._begin_unload(state)
                if new is None and not state.running:
                    del self._models[name]
                elif new is not None and not state.running:
                    state.entry = new
            for name, entry in catalog.items():
                self._models.setdefault(name, ModelState(entry))

    # ---- serving a request -------------------------------------------------------------------

    def release(self, name: str) -> None:
        """A request that ``acquire`` let through has ended."""
        with self._changed:
            state = self._models.get(name)
            if state is not None:
                state.in_flight -= 1
                state.last_used = time.monotonic()
            self._changed.notify_all()

    def acquire(self, name: str, autoload: bool, should_stop: Callable[[], bool]) -> Child:
        """The model's child, ready, for one request (loaded first where ``autoload``); the model is not
        unloaded until the request is released (``release``)."""
        with self._changed:
            started_load = False
            while True:
                state = self._known(name)
                if state.status == "loaded" and not state.stopping and state.child is not None:
                    state.in_flight += 1
                    state.last_used = time.monotonic()
                    return state.child
                if state.status == "unloaded" and not state.stopping:
                    if started_load and state.failed:
                        raise ServerError(f"model name={name} failed to load (exit code {state.exit_code})")
                    if not autoload:
                        raise InvalidRequestError("model is not loaded")
                    if self._has_room():
                        self._start(state)
                        started_load = True
                    elif not self._any_stopping():
                        self._evict_one()
                if should_stop():
                    raise ServerError(f"request cancelled while waiting for model name={name}")
                if self._closed:
                    raise ServerError("the router is shutting down")
                self._changed.wait(WAIT_STEP_SECONDS)

    def _known(self, name: str) -> ModelState:
        state = self._models.get(name)
        if state is None:
            raise InvalidRequestError(f"model '{name}' not found")
        return state

    # ---- loading and unloading ---------------------------------------------------------------

    def load(self, name: str) -> None:
        """``POST /models/load``: start the model's child (its load goes on in the background)."""
        with self._changed:
            state = self._known(name)
            if state.running:
                raise InvalidRequestError("model is already running")
            while not self._has_room():
                if not self._any_stopping() and not self._evict_one():
                    raise ServerError("model limit reached, try again later")
                self._changed.wait(WAIT_STEP_SECONDS)
            if state.running:
                raise InvalidRequestError("model is already running")
            self._start(state)

    def unload(self, name: str) -> None:
        """``POST /models/unload``: stop the model once its requests end (or its stop-timeout does)."""
        with self._changed:
            state = self._known(name)
            if not state.running or state.stopping:
                raise InvalidRequestError("model is not running")
            self._begin_unload(state)

    def stop_all(self) -> None:
        """The router is stopping: every child is asked to stop, and waited for."""
        with self._changed:
            self._closed = True
            for state in self._models.values():
                if state.running and not state.stopping:
                    self._begin_unload(state)
            deadline = time.monotonic() + max((s.entry.stop_timeout for s in self._models.values()), default=0) + 20
            while any(state.running for state in self._models.values()) and time.monotonic() < deadline:
                self._changed.wait(0.2)

    def _has_room(self) -> bool:
        """Under --models-max: a model that is stopping holds its place until its child has exited."""
        running = sum(1 for state in self._models.values() if state.running)
        return self._max <= 0 or running < self._max

    def _any_stopping(self) -> bool:
        return any(state.stopping for state in self._models.values())

    def _evict_one(self) -> bool:
        """Begin unloading the least recently used loaded model with no request (True); False where none
        is idle. Its place is taken until its child has exited."""
        idle = [state for state in self._models.values()
                if state.status == "loaded" and not state.stopping and state.in_flight == 0]
        if not idle:
            return False
        victim = min(idle, key=lambda state: state.last_used)
        log.info("--models-max %d reached: unloading the least recently used model, %s", self._max, victim.entry.name)
        self._begin_unload(victim)
        return True

    def _start(self, state: ModelState) -> None:
        state.status, state.failed, state.exit_code, state.info = "loading", False, None, {}
        state.last_used = time.monotonic()
        try:
            state.child = self._spawner.start(state.entry, self._on_ready, self._on_exit)
        except OSError as exc:
            state.status, state.failed = "unloaded", True
            raise ServerError(f"failed to spawn server instance for model name={state.entry.name}: {exc}") from None
        state.args = state.child.args
        self._changed.notify_all()

    def _begin_unload(self, state: ModelState) -> None:
        state.stopping = True
        child = state.child
        if child is None:
            return
        loading = state.status == "loading"
        threading.Thread(target=self._stop_child, args=(state, child, loading), name=f"unload-{state.entry.name}",
                         daemon=True).start()

    def _stop_child(self, state: ModelState, child: Child, loading: bool) -> None:
        """Wait for the model's requests (at most its stop-timeout), then stop its child."""
        deadline = time.monotonic() + state.entry.stop_timeout
        with self._changed:
            while not loading and state.in_flight > 0 and time.monotonic() < deadline:
                self._changed.wait(WAIT_STEP_SECONDS)
            force = loading or state.in_flight > 0
        if force and not loading:
            log.warning("model %s: %d request(s) still running after stop-timeout %.0f s: ending its child",
                        state.entry.name, state.in_flight, state.entry.stop_timeout)
        terminate(child, force)

    def _on_ready(self, child: Child) -> None:
        info = child.get_json("/v1/models")
        with self._changed:
            state = self._models.get(child.name)
            if state is None or state.child is not child or state.status != "loading":
                return
            data = info.get("data") if isinstance(info, dict) else None
            state.info = data[0] if isinstance(data, list) and data and isinstance(data[0], dict) else {}
            state.status = "loaded"
            log.info("model %s: loaded", child.name)
            self._changed.notify_all()

    def _on_exit(self, child: Child) -> None:
        with self._changed:
            state = self._models.get(child.name)
            if state is None or state.child is not child:
                return
            code = exit_status(child.process)
            child.connections.close()
            state.status, state.child, state.stopping, state.info = "unloaded", None, False, {}
            state.exit_code, state.failed = code, not child.stop_requested
            if state.failed:
                log.error("model %s: its child exited unexpectedly (exit code %d)", child.name, code)
            else:
                log.info("model %s: unloaded", child.name)
            self._changed.notify_all()
