"""Generation output: incremental text decoding, stop strings, the per-request output pipeline,
and the OpenAI response shapes."""
