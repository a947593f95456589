"""llama-server's reasoning budget: once a generation is inside its thinking (after the start tag,
or from the first token when the prompt opened it), it may take ``budget`` tokens; then the end tag
(after an optional message) is forced in as the next tokens, and the answer follows. A thinking
that ends by itself is left alone. ``end_now`` forces the end at once (the control route).

Pure bookkeeping over token ids, one per slot: the scheduler asks ``forced`` before sampling and
tells ``feed`` every token the slot takes."""

from __future__ import annotations

import enum
from collections import deque

from app.engine.types import ReasoningBudget


class Phase(enum.Enum):
    BEFORE = "before"  # not thinking yet: watching for the start tag
    THINKING = "thinking"
    FORCING = "forcing"  # the end tag is going in
    DONE = "done"


class BudgetGate:
    def __init__(self, budget: ReasoningBudget) -> None:
        self.budget = budget
        self.phase = Phase.THINKING if budget.opened else Phase.BEFORE
        self.spent = 0
        self._tail: deque[int] = deque(maxlen=max(len(budget.start), *(len(end) for end in budget.ends), 1))
        self._queue: deque[int] = deque()
        if self.phase is Phase.THINKING:
            self._check_budget()

    def forced(self) -> int | None:
        """The token to take instead of sampling, while the end tag is forced in."""
        return self._queue[0] if self._queue else None

    def feed(self, token: int) -> None:
        self._tail.append(token)
        if self.phase is Phase.FORCING:
            self._queue.popleft()
            if not self._queue:
                self.phase = Phase.DONE
        elif self.phase is Phase.BEFORE:
            if self._ends_with(self.budget.start):
                self.phase = Phase.THINKING
                self._check_budget()
        elif self.phase is Phase.THINKING:
            self.spent += 1
            if any(self._ends_with(end) for end in self.budget.ends):
                self.phase = Phase.DONE
            else:
                self._check_budget()

    def end_now(self) -> bool:
        """Force the end of the thinking now; False when it is not thinking."""
        if self.phase is not Phase.THINKING:
            return False
        self._force()
        return True

    def _check_budget(self) -> None:
        if 0 <= self.budget.tokens <= self.spent:
            self._force()

    def _force(self) -> None:
        self.phase = Phase.FORCING
        self._queue.extend(self.budget.forced)
        if not self._queue:
            self.phase = Phase.DONE

    def _ends_with(self, tag: tuple[int, ...]) -> bool:
        return bool(tag) and len(self._tail) >= len(tag) and tuple(self._tail)[-len(tag):] == tag
