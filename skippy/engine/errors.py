"""Errors the engine raises, each mapped to an OpenAI error envelope (:meth:`ErrorEnvelope.of
<skippy.engine.protocols.openai.wire.ErrorEnvelope.of>`).

The HTTP layer turns any :class:`EngineError` into
``{"error": {"message", "type", "param", "code"}}`` with :attr:`status`.
User input never produces a 5xx: everything a request can cause is one of
the 4xx classes below.
"""

from __future__ import annotations


class EngineError(Exception):
    """Base class. ``status`` is the HTTP status, ``type``/``code`` the OpenAI fields."""

    status = 500
    type = "server_error"
    code: str | None = None

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code


class InvalidRequest(EngineError):
    """400: malformed body, wrong types, template errors, bad tool history or grammar."""

    status = 400
    type = "invalid_request_error"


class ContextLengthExceeded(InvalidRequest):
    """400: prompt plus ``max_tokens`` does not fit the sequence context (``n_ctx``). ``n_prompt``, ``n_ctx`` and
    ``max_tokens`` (``None``: the prompt alone does not fit) give the numbers, for the routes that word the
    message their API's way (Anthropic's ``prompt is too long: N tokens > M maximum``)."""

    code = "context_length_exceeded"

    def __init__(self, message: str, *, param: str | None = None, n_prompt: int | None = None,
                 n_ctx: int | None = None, max_tokens: int | None = None):
        super().__init__(message, param=param)
        self.n_prompt, self.n_ctx, self.max_tokens = n_prompt, n_ctx, max_tokens


class PermissionDenied(EngineError):
    """403: a hook policy denied the request."""

    status = 403
    type = "permission_error"


class ModelNotFound(EngineError):
    """404: the request names a model this server does not serve."""

    status = 404
    type = "invalid_request_error"
    code = "model_not_found"


class QueueFull(EngineError):
    """429: the admission queue is full; retry after ``retry_after`` seconds."""

    status = 429
    type = "rate_limit_error"
    retry_after = 1


class ModelLoading(EngineError):
    """503: the model is still loading."""

    status = 503
    type = "unavailable_error"
    code = "model_loading"


class DeviceLost(EngineError):
    """503: a device holding layers of the model is gone (an RPC worker stopped); the server cannot recover.

    llama.cpp aborts the process when it next needs the worker, so requests are refused before they
    reach it, and ``/health`` answers 503 so that a supervisor restarts the workers and the server.
    """

    status = 503
    type = "unavailable_error"
    code = "device_lost"


class EngineClosed(EngineError):
    """503: the engine is shutting down or has stopped."""

    status = 503
    type = "unavailable_error"
    code = "engine_closed"


class NotSupported(EngineError):
    """501: a llama-server feature this server was started without (llama-server's ``not_supported_error``,
    e.g. ``/v1/embeddings`` without ``--embeddings``): a setting of the server, not a fault of the request."""

    status = 501
    type = "not_supported_error"


class SlotFileError(EngineError):
    """500: a slot file could not be written (a full disk, a folder that became unwritable); the slot is
    unchanged. A filename naming a folder is the request's fault: :class:`InvalidRequest`."""

    status = 500
    type = "server_error"
    code = "slot_save_failed"


class SlotBusy(EngineError):
    """409: the slot runs a request; its KV can be saved, restored or erased once it is idle.

    llama-server defers such a slot action until the slot is idle; here the client retries.
    """

    status = 409
    type = "invalid_request_error"
    code = "slot_busy"
