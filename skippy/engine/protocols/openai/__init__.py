"""The OpenAI API: request types (:mod:`.types`), wire Structs (:mod:`.wire`), reply builders (:mod:`.translate`)."""
