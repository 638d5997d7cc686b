"""Reranking: the Jina / Cohere ``POST /v1/rerank`` shape llama-server and vLLM accept (also ``/rerank``,
``/v2/rerank``), and vLLM's ``POST /score``: request Structs (:mod:`.types`), reply Structs (:mod:`.wire`),
and the checks and reply builders (:mod:`.translate`)."""
