"""The APIs the server speaks, one package each, all of the same shape (sans-IO).

Each package has ``types`` (the request Structs), ``wire`` (the reply, stream-chunk
and error Structs, encoded with msgspec and described in ``/openapi.json``) and
``translate`` (pure functions and builders between them and the engine):

- :mod:`.openai`: Chat Completions, legacy Completions, Embeddings, models. Its
  request types are the engine's request model; its ``translate`` builds replies
  from a :class:`~skippy.engine.output.generation.Generation`'s output.
- :mod:`.llama_server`: llama-server's own routes (``/completion``, ``/infill``,
  ``/tokenize``, ``/slots``, ``/props`` ...), built on the OpenAI types (llama-server
  is OpenAI-compatible and adds these).
- :mod:`.responses`: the OpenAI Responses API, a translation onto a chat request
  and back (plus ``store``, the stored responses).
- :mod:`.anthropic`: the Anthropic Messages API, the same kind of translation.

:mod:`.base` holds what all share (:class:`~.base.WireStruct`, request decoding).
Dependencies point one way, checked by import-linter (pyproject.toml):
``anthropic | responses`` -> ``llama_server`` -> ``openai`` -> ``base``; the two
translations know nothing of each other.
"""
