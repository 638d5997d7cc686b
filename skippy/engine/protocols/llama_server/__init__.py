"""llama-server's own routes: request types (:mod:`.types`), wire Structs (:mod:`.wire`), reply builders
(:mod:`.translate`)."""
