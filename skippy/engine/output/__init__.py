"""Generation output (sans-IO): incremental text decoding and stop strings (textstream), the per-request
output pipeline (pipeline), a request's Generation fed by scheduler events (generation), the reply
builders (responses) and the msgspec wire model every response and chunk is encoded from (wire)."""
