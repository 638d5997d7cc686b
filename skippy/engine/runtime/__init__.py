"""Model runtimes: the protocol (:mod:`.base`) and llama.cpp (:mod:`.llama`)."""

from skippy.engine.runtime.base import BatchEntry, ModelMeta, Runtime, Vocab

__all__ = ["BatchEntry", "ModelMeta", "Runtime", "Vocab"]
