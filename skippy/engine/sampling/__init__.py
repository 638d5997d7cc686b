"""Sampling: per-request sampling parameters (validated once) and GBNF grammars for structured output."""
