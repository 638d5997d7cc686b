"""Consulting another model when the model is unsure: the rules, without I/O (sans-IO; no trio, no httpx).

A model that starts unsure (its first token's entropy at or above ``consult_entropy``, or its margin at
or below ``consult_margin``: :func:`should_consult_start`), or whose signal window fires mid-generation,
asks a *different* model (a peer, ``--consult PEER``) the conversation's last user message and reads the
short answer as hidden context before it goes on. The I/O (asking the peers, the timeout, the hedged
second request) is :class:`skippy.actors.consult.ConsultPolicy`; this module decides:

- which peers are valid (:func:`peer_problem`, :func:`check_peers`): a model name this server serves, or
  the base URL of an OpenAI-compatible server (``http(s)://host[:port][/path]``, with or without ``/v1``);
- the peer order (:func:`peer_order`): never a peer serving the asker's own model, then the larger model
  (parameter count or file size, when known) first, then the faster (an observed latency average,
  :class:`PeerStats`), then the order of ``--consult``;
- the consultation request (:func:`consultation_request`): a short system instruction
  (:data:`INSTRUCTION`), the last user message only, ``temperature`` 0.2, ``max_tokens`` =
  ``consult_max_tokens``, ``mesh_hooks`` false (a consultation is never itself consulted, and two servers
  that consult each other terminate), not streamed;
- the hint (:func:`hint_text`): the answer without thinking blocks, on one line, cut to
  ``consult_max_chars`` at a sentence or word boundary; empty means no hint;
- the injected text (:func:`injection`): ``"\\n[Note from <model>: <hint>]\\n"``, prefilled into the asker's
  sequence as hidden context (the client never sees it in ``content``).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import attrs
import msgspec

from skippy.engine.protocols.openai.types import ChatCompletionRequest, ContentPart, Message

if TYPE_CHECKING:
    from skippy.engine.hooks.signals import PrefillSignals

__all__ = [
    "INSTRUCTION",
    "CONSULT_TEMPERATURE",
    "ConsultRules",
    "PeerInfo",
    "PeerStats",
    "should_consult_start",
    "is_url",
    "peer_problem",
    "check_peers",
    "peer_order",
    "last_user_text",
    "consultation_request",
    "answer_text",
    "hint_text",
    "injection",
    "max_reply_bytes",
]

#: The consultation's system instruction.
INSTRUCTION = ("Answer the question briefly and directly, in at most three sentences. Give only the answer: "
               "no preamble, no questions back.")

#: The consultation's sampling temperature: near-greedy, a little room for a model stuck on one token.
CONSULT_TEMPERATURE = 0.2

#: Peers consulted at once (the first good answer wins; the other request is cancelled).
MAX_PARALLEL = 2

#: The least a peer's reply may hold (bytes, as read: after any content-encoding is undone): 1 MiB.
MIN_REPLY_BYTES = 1 << 20

#: A peer's reply may hold this many bytes per character of ``consult_max_chars`` (when more than
#: :data:`MIN_REPLY_BYTES`): room for the whole answer of ``consult_max_tokens`` tokens, JSON escapes,
#: reasoning and the rest of a chat completion, of which the hint keeps ``consult_max_chars`` at most.
REPLY_BYTES_PER_CHAR = 256


def max_reply_bytes(max_chars: int) -> int:
    """The most bytes read of a peer's reply (a chat completion, a ``/v1/models`` list, ``/props``):
    ``max(MIN_REPLY_BYTES, REPLY_BYTES_PER_CHAR * max_chars)``; past it the reply is dropped unread (a
    consultation's outcome ``error``, ``too_large``)."""
    return max(MIN_REPLY_BYTES, REPLY_BYTES_PER_CHAR * max_chars)


@attrs.frozen
class ConsultRules:
    """The consultation settings of one model (:class:`~skippy.engine.config.EngineConfig`'s ``consult_*``).

    ``entropy`` / ``margin``: nats, the uncertain-start thresholds (consult at ``entropy >=`` or
    ``margin <=``); ``timeout``: seconds a consultation takes at most; ``max_tokens``: the peer's answer budget;
    ``max_chars``: the hint's length at most.
    """

    entropy: float = 3.5
    margin: float = 0.2
    timeout: float = 10.0
    max_tokens: int = 200
    max_chars: int = 512

    @classmethod
    def from_engine_config(cls, config: Any) -> ConsultRules:
        return cls(entropy=config.consult_entropy, margin=config.consult_margin, timeout=config.consult_timeout,
                   max_tokens=config.consult_max_tokens, max_chars=config.consult_max_chars)


def should_consult_start(signals: PrefillSignals, rules: ConsultRules) -> bool:
    """Whether the first token's signals say the model starts unsure: entropy at or above ``rules.entropy``
    or margin at or below ``rules.margin`` (nats; see :mod:`skippy.engine.hooks.signals`)."""
    return signals.entropy >= rules.entropy or signals.margin <= rules.margin


# -- peers ------------------------------------------------------------------------------------------

def is_url(peer: str) -> bool:
    """``peer`` names a remote server (``http://`` or ``https://``), not a model of this server."""
    return peer.lower().startswith(("http://", "https://"))


def peer_problem(peer: object) -> str | None:
    """Why ``peer`` cannot be a ``--consult`` value (``None``: it can): not a non-empty string without
    spaces, or a URL without a host, with a query or fragment, or with a bad port."""
    if not isinstance(peer, str) or not peer.strip():
        return f"a peer must be a model name or an http(s):// URL, got {peer!r}"
    if any(c.isspace() for c in peer):
        return f"a peer must not contain spaces, got {peer!r}"
    if not is_url(peer):
        if "://" in peer:
            return f"a peer URL must start with http:// or https://, got {peer!r}"
        return None
    try:
        parts = urlsplit(peer)
        parts.port  # noqa: B018 (raises ValueError for a bad port)
    except ValueError as exc:
        return f"bad peer URL {peer!r}: {exc}"
    if not parts.hostname:
        return f"a peer URL needs a host, got {peer!r}"
    if parts.query or parts.fragment:
        return f"a peer URL is a base URL (http://host:port or http://host:port/v1), got {peer!r}"
    return None


def check_peers(models: Sequence[tuple[Sequence[str], Sequence[str]]]) -> None:
    """Check every served model's ``--consult`` peers against the served models, at start-up.

    ``models``: one ``(names, peers)`` per served model: every name it answers to (its id first) and its
    ``consult`` tuple. A peer that is not a URL must be a name some served model answers to
    (case-insensitive). With one model served, a peer naming that model is refused (it would consult
    itself); with several, a model skips itself (:func:`peer_order`).

    Raises:
        ValueError: naming the peer and what is served.
    """
    served = {n.casefold() for names, _ in models for n in names}
    listing = ", ".join(repr(names[0]) for names, _ in models if names)
    for _, peers in models:
        for peer in peers:
            problem = peer_problem(peer)
            if problem is not None:
                raise ValueError(f"--consult: {problem}")
            if is_url(peer):
                continue
            if peer.casefold() not in served:
                raise ValueError(f"--consult {peer!r} is neither a model this server serves ({listing}) nor an "
                                 "http(s):// URL of another server")
            if len(models) == 1:
                raise ValueError(f"--consult {peer!r} names the model this server serves: a model cannot consult "
                                 "itself; serve another model too (--model) or give another server's URL")


@attrs.define
class PeerStats:
    """A peer's observed answer latency: ``mean_ms``, an exponential moving average (weight ``alpha`` for
    the newest), ``None`` before the first answer; ``n``: answers observed."""

    alpha: float = 0.3
    mean_ms: float | None = None
    n: int = 0

    def observe(self, ms: float) -> None:
        self.n += 1
        self.mean_ms = ms if self.mean_ms is None else self.mean_ms + self.alpha * (ms - self.mean_ms)


@attrs.frozen
class PeerInfo:
    """What the peer order knows of a peer: ``name`` (as given to ``--consult``), ``model`` (the model it
    serves: a local model's id, a remote's last answering model; ``None`` when unknown), ``size`` (its
    parameter count or file size in bytes, ``None`` when unknown: the order compares like with like only
    in that larger is preferred), ``latency_ms`` (:attr:`PeerStats.mean_ms`)."""

    name: str
    model: str | None = None
    size: int | None = None
    latency_ms: float | None = None


def peer_order(peers: Sequence[PeerInfo], asker: Collection[str]) -> list[PeerInfo]:
    """The peers to ask, best first.

    A peer whose ``model`` is one of ``asker`` (the names the asking model answers to, case-insensitive)
    is left out: consulting the same model adds nothing. The others: a known size before an unknown one,
    larger first; then a known latency before an unknown one, faster first; ties keep ``peers``' order
    (the order of ``--consult``).
    """
    own = {a.casefold() for a in asker}
    eligible = [p for p in peers if p.model is None or p.model.casefold() not in own]
    return sorted(eligible, key=lambda p: (p.size is None, -(p.size or 0),
                                           p.latency_ms is None, p.latency_ms or 0.0))


# -- the request and the answer ---------------------------------------------------------------------

def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # text parts only (ContentPart Structs, or dicts); images and the rest stay here
        texts = []
        for p in content:
            kind, text = (p.get("type"), p.get("text")) if isinstance(p, dict) else \
                (getattr(p, "type", None), getattr(p, "text", None))
            if kind == "text" and isinstance(text, str):
                texts.append(text)
        return "\n".join(texts)
    return ""


def last_user_text(request: Any) -> str | None:
    """The text of the last ``user`` message of a chat request (its text parts joined), ``None`` when
    there is none or it is empty."""
    for message in reversed(getattr(request, "messages", None) or []):
        if getattr(message, "role", None) == "user":
            text = _text(message.content).strip()
            return text or None
    return None


def consultation_request(request: Any, rules: ConsultRules, *,
                         model: str | None = None) -> ChatCompletionRequest | None:
    """The chat request sent to a peer about ``request`` (the asker's chat request), ``None`` when it has no
    user text to ask about.

    Messages: :data:`INSTRUCTION` as the system message and the last user message only (the rest of the
    conversation is not sent: shorter, and nothing else of the user's leaves); ``temperature``
    :data:`CONSULT_TEMPERATURE`, ``max_tokens`` ``rules.max_tokens``, ``mesh_hooks`` false (the recursion
    guard), not streamed; ``model``: the peer's model name, when it has one.
    """
    text = last_user_text(request)
    if text is None:
        return None
    return ChatCompletionRequest(model=model, messages=[Message("system", INSTRUCTION), Message("user", text)],
                                 temperature=CONSULT_TEMPERATURE, max_tokens=rules.max_tokens, mesh_hooks=False,
                                 stream=False)


_THINK = re.compile(r"<(think|thinking|reasoning)>.*?(</\1>|\Z)", re.DOTALL | re.IGNORECASE)
_THINK_END = re.compile(r"</(?:think|thinking|reasoning)>", re.IGNORECASE)
_SENTENCE_END = re.compile(r"[.!?…](?=\s|$)")
#: removed from a peer's text: C0 controls but tab and newline (ESC among them), DEL, C1 controls, and the
#: bidirectional embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def answer_text(content: Any) -> str | None:
    """The text of a peer's ``message.content``: a string, or a list of text parts (``{"type": "text",
    "text": ...}``, joined by newlines); ``None`` for anything else."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return _text(content)
    return None


def hint_text(answer: str | None, max_chars: int) -> str | None:
    """The hint in a peer's answer: only what follows the last closing thinking tag (``</think>``: R1-style
    reasoning, with or without its opening tag), thinking blocks (``<think>...</think>``, also unclosed)
    removed, control characters removed (C0 but tab and newline, DEL, C1, bidirectional overrides and
    isolates), whitespace collapsed to single spaces, cut to ``max_chars`` characters at the last sentence
    end past half of them, else at the last word boundary (marked ``...``); ``None`` when nothing is left."""
    if not answer:
        return None
    answer = _CONTROL.sub("", answer)  # first: a control character inside a tag must not hide it
    closings = list(_THINK_END.finditer(answer))
    if closings:  # R1-style: the reasoning ends at the last closing tag, its opening one maybe absent
        answer = answer[closings[-1].end():]
    text = " ".join(_THINK.sub(" ", answer).split())
    if not text:
        return None
    if len(text) <= max_chars:
        return text
    head = text[:max_chars + 1]
    ends = [m.end() for m in _SENTENCE_END.finditer(head) if m.end() <= max_chars]
    if ends and ends[-1] >= max_chars // 2:
        return head[:ends[-1]]
    cut = head[:max_chars - 3]
    space = cut.rfind(" ")
    if space > 0:
        cut = cut[:space]
    return cut.rstrip(" ,;:") + "..."


#: the longest peer model name a note carries (characters)
MAX_NAME_CHARS = 64


def injection(model: str, hint: str) -> str:
    """The text injected into the asker's sequence: ``"\\n[Note from <model>: <hint>]\\n"``. ``model`` (a peer's
    own word for itself) is cleaned as the hint is: whitespace collapsed to single spaces, square brackets
    dropped (they would close the note), control characters removed, cut to :data:`MAX_NAME_CHARS` characters."""
    name = " ".join(_CONTROL.sub("", model).replace("[", " ").replace("]", " ").split())[:MAX_NAME_CHARS].strip() \
        or "a peer"
    return f"\n[Note from {name}: {hint}]\n"


# -- media fallback: a text-only model asks a peer that reads images ------------------------------------------

#: What a peer that reads images is asked about each message holding images (the user's text follows).
DESCRIBE_INSTRUCTION = ("Describe the image(s) concisely, in at most three sentences, keeping what helps "
                        "answer the user's text; give only the description.")


def _parts(content: Any) -> list[Any]:
    return [p if isinstance(p, dict) else msgspec.to_builtins(p) for p in content] if isinstance(content, list) else []


def _image_parts(content: Any) -> list[dict[str, Any]]:
    return [p for p in _parts(content) if isinstance(p, dict) and p.get("type") == "image_url"]


def describe_requests(request: Any, rules: ConsultRules) -> list[tuple[int, ChatCompletionRequest]]:
    """For each message of the chat ``request`` holding ``image_url`` parts: ``(its index, the request that
    asks a peer to describe them)``: :data:`DESCRIBE_INSTRUCTION` as the system message, then one user
    message with the images and the message's own text (what the description should serve); temperature
    :data:`CONSULT_TEMPERATURE`, ``rules.max_tokens``, ``mesh_hooks`` false (the recursion guard)."""
    out = []
    for i, message in enumerate(getattr(request, "messages", None) or []):
        images = _image_parts(message.content)
        if not images:
            continue
        text = _text(_parts(message.content)).strip() or "(no text: describe what is shown)"
        parts = [ContentPart(type="image_url", image_url=p.get("image_url")) for p in images]
        parts.append(ContentPart(type="text", text=f"The user's text: {text}"))
        out.append((i, ChatCompletionRequest(
            messages=[Message("system", DESCRIBE_INSTRUCTION), Message("user", parts)],
            temperature=CONSULT_TEMPERATURE, max_tokens=rules.max_tokens, mesh_hooks=False, stream=False)))
    return out


def with_descriptions(request: Any, descriptions: dict[int, str]) -> Any:
    """``request`` with the image parts of message ``i`` replaced by one text part ``[Image description:
    ...]`` before the message's text, for each ``i`` in ``descriptions`` (``msgspec.structs.replace``: the
    request is not mutated)."""
    messages = list(request.messages)
    for i, description in descriptions.items():
        rest = [p for p in _parts(messages[i].content) if p.get("type") != "image_url"]
        parts = [ContentPart(type="text", text=f"[Image description: {description}]"),
                 *(ContentPart(type=str(p.get("type")), text=p.get("text")) for p in rest)]
        messages[i] = msgspec.structs.replace(messages[i], content=parts)
    return msgspec.structs.replace(request, messages=messages)
