"""Mistral's fill-in-the-middle API (``POST /v1/fim/completions``, Codestral's) as a translation.

Sans-IO, like the rest of :mod:`skippy.engine`: :mod:`.types` holds the request Struct, :mod:`.translate`
the pure functions between it and the OpenAI shapes the engine already serves. A FIM request becomes a
legacy :class:`~skippy.engine.protocols.openai.types.CompletionRequest` with ``suffix`` (the vocabulary's FIM
tokens, as ``/v1/completions`` and llama-server's ``/infill`` use them), and its ``text_completion`` (or
chunks) becomes the ``chat.completion`` (or ``chat.completion.chunk`` events) Mistral answers with.
"""
