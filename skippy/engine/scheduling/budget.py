"""Reasoning budget: end a model's thinking after N tokens by forcing its closing tag.

llama-server's ``--reasoning-budget N`` / per-request ``thinking_budget_tokens``, vLLM's
``thinking_token_budget``, Anthropic's ``thinking.budget_tokens``: once a sequence has generated
``budget`` tokens inside its reasoning block (``<think>`` ... ``</think>``, the chat format's
``think_tags``), the next tokens are not sampled but forced: the budget message (llama-server's
``--reasoning-budget-message``, empty by default) and the closing tag. The forced tokens are emitted
like sampled ones, so the output parser sees the closing tag and splits reasoning from content
exactly as when the model closes the block itself.

:class:`ReasoningBudget` is the request's rule (frozen; it travels in
:class:`~skippy.engine.scheduling.events.SeqRequest`); :class:`BudgetState` follows one sequence's
tokens on the decode thread. The reasoning block is found in the text of the generated tokens (their
pieces, as the output parser reads them): it opens at the start of the output (after whitespace) or
was opened by the prompt (``started``: the template's generation prompt ends inside ``<think>``).

Budget 0 forces the close at once (llama-server: "0 for immediate end"); a model that closes the
block itself, or never opens it, is never forced.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

__all__ = ["BudgetState", "ReasoningBudget"]


@attrs.frozen
class ReasoningBudget:
    """One request's reasoning cap.

    ``budget``: reasoning tokens allowed (>= 0); ``open`` / ``close``: the reasoning tags as text
    (e.g. ``"<think>"``, ``"</think>"``); ``forced``: the token ids that end reasoning (the budget
    message then the closing tag, tokenized with special tokens parsed; not empty); ``started``: the
    prompt already opened the block; ``piece``: token id -> its text bytes as the output parser reads
    them (control tokens of the tags included).
    """

    budget: int
    open: str
    close: str
    forced: tuple[int, ...]
    started: bool
    piece: Callable[[int], bytes] = attrs.field(eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        if self.budget < 0:
            raise ValueError(f"budget must be >= 0, got {self.budget}")
        if not self.forced:
            raise ValueError("forced must hold the closing tag's tokens")


#: tokens a spent budget waits at most for the rest of a character the last tokens began (byte tokens)
MAX_UTF8_WAIT = 3


def _ends_inside_utf8(data: bytes) -> bool:
    """True when ``data`` ends inside a UTF-8 sequence: its last lead byte still waits for continuation bytes."""
    for k in range(1, min(4, len(data)) + 1):
        byte = data[-k]
        if byte & 0xC0 == 0x80:  # a continuation byte: the lead is further back
            continue
        need = 2 if byte & 0xE0 == 0xC0 else 3 if byte & 0xF0 == 0xE0 else 4 if byte & 0xF8 == 0xF0 else 1
        return need > k
    return False


class BudgetState:
    """One sequence's place relative to its reasoning block: ``start`` (the output may still open
    it), ``think`` (inside it; :attr:`count` tokens so far) or ``done`` (closed, forced closed, or
    never opened)."""

    def __init__(self, rule: ReasoningBudget) -> None:
        self.rule = rule
        self._open = rule.open.encode()
        self._close = rule.close.encode()
        self.state = "think" if rule.started else "start"
        self.count = 0
        self._buf = b""

    @property
    def active(self) -> bool:
        """True while the block may still need a forced close (speculative drafts are off then)."""
        return self.state != "done"

    def at_start(self) -> tuple[int, ...]:
        """The tokens to force before the first sampled one: the whole close when the prompt opened
        the block and the budget is 0, else none."""
        if self.state == "think" and self.rule.budget == 0:
            self.state = "done"
            return self.rule.forced
        return ()

    def on_token(self, token: int) -> tuple[int, ...]:
        """Follow one accepted (sampled, not forced) token; returns the tokens to force next (empty
        unless this token used up the budget)."""
        if self.state == "done":
            return ()
        self._buf += self.rule.piece(token)
        if self.state == "start":
            stripped = self._buf.lstrip()
            if stripped.startswith(self._open):
                self.state, self._buf = "think", stripped[len(self._open):]
                if self._close in self._buf:
                    self.state = "done"
                    return ()
                return self._spent() if self.rule.budget == 0 else ()
            if not self._open.startswith(stripped):
                self.state = "done"
            return ()
        if self._close in self._buf:
            self.state = "done"
            return ()
        self._buf = self._buf[-max(len(self._close), 4):]  # a close split over pieces; a UTF-8 sequence's end
        self.count += 1
        if self.count < self.rule.budget:
            return ()
        if _ends_inside_utf8(self._buf) and self.count < self.rule.budget + MAX_UTF8_WAIT:
            return ()  # the rest of a character first: the tag after half of one would be broken text
        return self._spent()

    def _spent(self) -> tuple[int, ...]:
        self.state = "done"
        return self.rule.forced
