"""The OpenAI Responses API as a translation onto Chat Completions: request types (:mod:`.types`), wire Structs
(:mod:`.wire`), the translation both ways (:mod:`.translate`) and stored responses (:mod:`.store`). No second
generation path."""
