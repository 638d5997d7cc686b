"""Scheduling: the sans-IO request lifecycle of the decode scheduler (admission, prefix reuse,
prefill budget, hook parking, finish) and batch planning."""
