"""Model runtimes: the protocol (:mod:`.base`) and llama.cpp (:mod:`.llama`, with one module per
concern: :mod:`.params` options and llama.cpp parameters, :mod:`.load` backend and log, :mod:`.vocab`,
:mod:`.decode` decode and logits, :mod:`.samplers` sampler chains, :mod:`.kv` KV cache and sequence
state; :mod:`.backends` devices and offload)."""

from skippy.engine.runtime.base import BatchEntry, ModelMeta, Runtime, Vocab

__all__ = ["BatchEntry", "ModelMeta", "Runtime", "Vocab"]
