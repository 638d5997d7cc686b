"""Signals and hooks: per-token uncertainty signals (entropy, margin, windows) and hook-policy types.

The names a hook policy uses are re-exported here (``from skippy.engine.hooks import Inject,
NO_ACTION, Stop, Deny``): outcomes from :mod:`.policy`, event payloads from :mod:`.signals`.
"""

from skippy.engine.hooks.policy import NO_ACTION, Deny, HookPolicy, Inject, NoAction, Outcome, Stop
from skippy.engine.hooks.signals import FinishInfo, GenerationSignals, PrefillSignals, WindowStats

__all__ = ["NO_ACTION", "Deny", "FinishInfo", "GenerationSignals", "HookPolicy", "Inject", "NoAction", "Outcome",
           "PrefillSignals", "Stop", "WindowStats"]
