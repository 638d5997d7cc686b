"""The Anthropic Messages API (``POST /v1/messages``, ``POST /v1/messages/count_tokens``) as a translation.

Sans-IO, like the rest of :mod:`skippy.engine`: :mod:`.types` holds the
request Structs (decoded with :func:`skippy.engine.protocols.base.decode_request`),
:mod:`.wire` the reply, stream-event and error Structs, and :mod:`.translate`
the pure functions between them and the OpenAI chat shapes the engine already
serves: a Messages request becomes a
:class:`~skippy.engine.protocols.openai.types.ChatCompletionRequest` (so templates, tool
emulation, chat formats, hooks and the scheduler are the chat route's), and
the engine's ``chat.completion`` / ``chat.completion.chunk`` objects become an
Anthropic ``message`` / its server-sent events. There is no second generation path.
"""
