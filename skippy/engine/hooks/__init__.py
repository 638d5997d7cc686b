"""Signals and hooks: per-token uncertainty signals (entropy, margin, windows) and hook-policy types."""
