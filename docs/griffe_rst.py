"""A griffe extension for the API reference (mkdocstrings): the docstrings' Sphinx markup as Markdown.

skippy's docstrings are written for Sphinx too (CONTRIBUTING.md, Conventions): cross-reference roles
such as ``:class:`~skippy.engine.protocols.openai.wire.HookEvent``` and ``::`` before a literal block. mkdocstrings
reads Markdown, where a role would show as ``:class:`` text. This rewrites each role as inline code of
the name (the last part with ``~``, as Sphinx shows it) and ``text::`` before an indented block as
``text:``; ````literal```` spans are already Markdown code. Loaded by ``mkdocs.yml`` (mkdocstrings'
``extensions`` option) as ``docs/griffe_rst.py:SphinxRoles``.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|data|mod|exc|obj|const|ref):`(~?)([^`<]+?)(?:\s*<([^>]+)>)?`")
_LITERAL_BLOCK = re.compile(r"(\S)::\n", re.M)


def markdown(text: str) -> str:
    """``text`` with Sphinx roles as inline code and ``::`` literal-block markers as ``:``."""

    def role(m: re.Match[str]) -> str:
        tilde, name, target = m.group(1), m.group(2).strip(), m.group(3)
        if target:  # :class:`text <target>`
            return f"`{name}`"
        return f"`{name.split('.')[-1] if tilde else name}`"

    return _LITERAL_BLOCK.sub(r"\1:\n", _ROLE.sub(role, text))


class SphinxRoles(griffe.Extension):
    """Rewrite every loaded docstring with :func:`markdown`."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown(obj.docstring.value)
