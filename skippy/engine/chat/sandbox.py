"""A jinja2 sandbox with a resource budget for chat templates (sans-IO: no trio).

jinja2's ``ImmutableSandboxedEnvironment`` already refuses attribute walking
(``__class__``, ``__globals__``, ``mro``...), mutation of lists and dicts,
and ``range()`` over more than 100 000 items. It does not bound *work*:
nested loops, ``'a' * 10**9``, doubling a string through a ``namespace``,
``9 ** 9 ** 9``, printf widths, ``replace``/``join``/``center`` blow-ups.
A chat template can be a request field, so rendering must end in bounded
time and memory whatever the template does; and since a thread cannot be
killed, the checks run inside rendering.

:class:`BoundedSandbox` meters every render (see :class:`RenderBudget`):

- **ops**: each loop iteration, call, filter, test, attribute or item
  lookup, arithmetic operation, comparison, literal and output piece counts
  one op; a render may spend ``max_ops`` plus ``ops_per_input_char`` for
  each character of its input (messages, tools, variables).
- **time**: the wall clock is checked at every op against ``max_seconds``.
- **size**: every value an op produces is measured by its printed size
  (shared sub-objects count as often as they would print). No value may be
  larger than ``max_value_chars`` and all produced values together may not
  exceed ``max_produced_chars`` (both plus an allowance per input
  character). Operations whose result size follows from their arguments
  (sequence repetition, powers, padding and printf widths, ``replace``,
  ``join``, ``indent``, ``center``, ``tojson(indent)``...) are checked
  *before* they run.

How: each template's AST is rewritten before it is compiled so that
for-loop iterables, comparisons, list/tuple/dict literals, ``~``
concatenations and output pieces pass through internal metering filters;
user-visible filters and tests are wrapped (and marked ``pass_context`` so
jinja2 never folds them at compile time); calls, attribute and item access
and arithmetic use the sandbox hooks. Going over a limit raises
:class:`BudgetExceeded`, a ``jinja2.sandbox.SecurityError``.

Lists and dicts the template itself creates (``[]``, ``{}`` literals) may be
mutated (``append``, ``pop``, ``update``...; metered like any call): input
data (``messages``, ``tools``, variables) stays immutable, as in
transformers' ``ImmutableSandboxedEnvironment``, but templates written for
llama.cpp's engine (Kimi K2's ``ns.ids.append(...)``) render. transformers
itself refuses every such call; llama.cpp allows all of them.

Also refused (``SecurityError`` instead of jinja2's silent undefined):
unsafe attributes such as ``__class__`` or ``__globals__``. The environment
has no loader (``include``/``import``/``extends`` cannot read files) and no
global reaches the OS, files or the process environment; ``lipsum`` (a
work amplifier) and the debug filter ``pprint`` are removed.
"""

from __future__ import annotations

import functools
import re
import threading
import time
import types
from collections.abc import Callable, ItemsView
from typing import Any, TypeVar

import attrs
import jinja2
import jinja2.nodes as nodes
import jinja2.sandbox
from jinja2.runtime import LoopContext
from jinja2.utils import Namespace, _PassArg
from jinja2.visitor import NodeTransformer

__all__ = ["BoundedSandbox", "BudgetExceeded", "RenderBudget"]

_V = TypeVar("_V")


@attrs.frozen
class RenderBudget:
    """Limits of one render; the ``*_per_input_char`` terms scale with the input's printed size.

    ``max_ops`` (ops), ``max_seconds`` (wall clock, not scaled),
    ``max_value_chars`` (largest single value), ``max_produced_chars``
    (all values produced, output included), ``max_int_bits`` (largest
    integer an operation may produce). ``small_input_chars``: a template
    that goes over budget on an input this small is a runaway on any input
    (see :meth:`skippy.engine.chat.templates.ChatTemplate.render`).
    """

    max_ops: int = 1_000_000
    ops_per_input_char: int = 32
    max_seconds: float = 30.0
    max_value_chars: int = 16 * 1024 * 1024
    value_chars_per_input_char: int = 4
    max_produced_chars: int = 32 * 1024 * 1024
    produced_chars_per_input_char: int = 16
    max_int_bits: int = 1 << 16
    small_input_chars: int = 64 * 1024


class BudgetExceeded(jinja2.sandbox.SecurityError):
    """A render went over its :class:`RenderBudget`; ``kind`` is ``ops``, ``time`` or ``size``."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


_SCALARS = (bool, type(None), float, complex)


class Meter:
    """The running account of one render (one thread; not shared)."""

    def __init__(self, budget: RenderBudget, input_chars: int = 0) -> None:
        self.budget = budget
        self.deadline = time.monotonic() + budget.max_seconds
        self.ops = 0
        self.produced = 0
        self._memo: dict[int, tuple[Any, int, int]] = {}  # id -> (object kept alive, size, depth)
        self._scale(input_chars)

    def _scale(self, input_chars: int) -> None:
        b = self.budget
        self.input_chars = input_chars
        self.max_ops = b.max_ops + b.ops_per_input_char * input_chars
        self.max_value = b.max_value_chars + b.value_chars_per_input_char * input_chars
        self.max_produced = b.max_produced_chars + b.produced_chars_per_input_char * input_chars

    def measure_input(self, context: Any) -> int:
        """Measure the render's input (its printed size) and scale the limits to it; returns the size."""
        size = self._walk(context, 1 << 62, 0)[0]
        self._scale(size)
        return size

    def tick(self, n: int = 1) -> None:
        """Count ``n`` ops; raise :class:`BudgetExceeded` past the op budget or the deadline."""
        self.ops += n
        if self.ops > self.max_ops:
            raise BudgetExceeded("ops", f"the template exceeded its budget of {self.max_ops} operations")
        if time.monotonic() > self.deadline:
            raise BudgetExceeded("time", f"the template exceeded its render time of {self.budget.max_seconds:g} s")

    def tick_for(self, *values: Any) -> None:
        """Count the ops of one operation over ``values``: one, plus one per 4 KiB of their printed size
        (comparing or scanning big strings costs in proportion)."""
        n = 1
        for v in values:
            if isinstance(v, (str, bytes)):
                n += len(v) >> 12
            elif isinstance(v, _CONTAINERS):
                n += self.size(v) >> 12
        self.tick(n)

    def allow(self, chars: int, what: str = "a value") -> None:
        """Refuse (before it is built) a value of ``chars`` printed characters over the value limit."""
        if chars > self.max_value:
            raise BudgetExceeded("size", f"{what} of about {chars} characters exceeds the template limit "
                                         f"of {self.max_value} characters")

    def produce(self, value: _V) -> _V:
        """Check and account a value an op produced; returns it."""
        if isinstance(value, (str, bytes)):
            n = len(value)
            self.allow(n)
        elif isinstance(value, int):
            if value.bit_length() > self.budget.max_int_bits:
                raise BudgetExceeded("size", f"an integer of {value.bit_length()} bits exceeds the template "
                                             f"limit of {self.budget.max_int_bits} bits")
            n = 1
        elif isinstance(value, _SCALARS):
            n = 1
        else:
            self.allow(self.size(value))
            n = len(value) + 1 if isinstance(value, (list, tuple, dict, set, frozenset)) else 1
        self.produced += n
        if self.produced > self.max_produced:
            raise BudgetExceeded("size", f"the template produced more than {self.max_produced} characters")
        return value

    def size(self, value: Any) -> int:
        """Printed size of ``value`` in characters (an upper estimate); stops counting past the value limit."""
        return self._walk(value, self.max_value, 0)[0]

    def depth(self, value: Any) -> int:
        """Nesting depth of ``value`` (containers)."""
        return self._walk(value, self.max_value, 0)[1]

    def _walk(self, value: Any, limit: int, level: int) -> tuple[int, int, bool]:
        """(size, depth, contains a namespace); containers without namespaces are memoized by id."""
        if isinstance(value, (str, bytes)):
            return len(value) + 2, 0, False
        if isinstance(value, int):
            return value.bit_length() // 3 + 2, 0, False
        if isinstance(value, _SCALARS):
            return 24, 0, False
        if not isinstance(value, _CONTAINERS):
            return 16, 0, False  # functions, macros, loop contexts, undefined, ranges...
        if level > 200:
            raise BudgetExceeded("size", "a value nested more than 200 levels deep")
        hit = self._memo.get(id(value))
        if hit is not None:
            return hit[1], hit[2], False
        is_ns = isinstance(value, Namespace)
        items: Any = object.__getattribute__(value, "_Namespace__attrs") if is_ns else value
        if isinstance(items, dict):
            children: Any = (x for kv in items.items() for x in kv)
        elif isinstance(items, _ITEMS_VIEW):
            children = (x for kv in items for x in kv)
        else:
            children = items
        total, depth, has_ns = 16, 0, is_ns
        for child in children:
            s, d, ns = self._walk(child, limit - total, level + 1)
            total += s + 4
            depth = max(depth, d + 1)
            has_ns = has_ns or ns
            if total > limit:
                return total, depth, True  # partial: never cached
        if not has_ns:  # a namespace can change later; anything holding one is measured afresh
            self._memo[id(value)] = (value, total, depth)
        return total, depth, has_ns


_ITEMS_VIEW: type[ItemsView[Any, Any]] = type({}.items())
_CONTAINERS: tuple[type[Any], ...] = (list, tuple, dict, set, frozenset, Namespace, type({}.keys()),
                                      type({}.values()), _ITEMS_VIEW)


class _MeteredIterable:
    """A for-loop iterable that counts one op per iteration (``len()`` passes through)."""

    __slots__ = ("_iterable", "_meter")

    def __init__(self, iterable: Any, meter: Meter) -> None:
        self._iterable = iterable
        self._meter = meter

    def __len__(self) -> int:
        return len(self._iterable)

    def __iter__(self) -> Any:
        tick = self._meter.tick
        for item in self._iterable:
            tick()
            yield item


# -- pre-checks of operations whose result size follows from their arguments ----------------------

_PRINTF = re.compile(r"%(?:\([^)]*\))?[#0\- +]*(\*|\d+)?(?:\.(\*|\d+))?[hlL]?[a-zA-Z%]")
_FORMAT_FIELD = re.compile(r"\{([^{}]*)\}")
_NUMBER = re.compile(r"\d+")
_MAX_WIDTH = 100_000


def _check_widths(m: Meter, widths: list[str], what: str) -> int:
    total = 0
    for w in widths:
        if not w:
            continue
        if w == "*":
            raise BudgetExceeded("size", f"{what}: '*' widths are not allowed in chat templates")
        n = int(w) if len(w) < 8 else _MAX_WIDTH + 1
        if n > _MAX_WIDTH:
            raise BudgetExceeded("size", f"{what}: a width or precision of {w} exceeds {_MAX_WIDTH}")
        total += n
    return total


def _check_printf(m: Meter, fmt: Any, args: Any) -> None:
    if not isinstance(fmt, str):
        return
    specs = _PRINTF.findall(fmt)
    widths = _check_widths(m, [w for spec in specs for w in spec], "printf formatting")
    m.allow(len(fmt) + widths + 4 * m.size(args), "a formatted string")


def _check_format(m: Meter, fmt: str, args: Any, kwargs: Any) -> None:
    fields = _FORMAT_FIELD.findall(fmt)
    if re.search(r"\{[^{}]*\{", fmt.replace("{{", "").replace("}}", "")):
        raise BudgetExceeded("size", "str.format: nested replacement fields are not allowed in chat templates")
    widths = _check_widths(m, [n for f in fields if ":" in f for n in _NUMBER.findall(f.split(":", 1)[1])],
                           "str.format")
    biggest = max([m.size(a) for a in args] + [m.size(v) for v in dict(kwargs).values()] + [0])
    m.allow(len(fmt) + widths + len(fields) * 4 * biggest, "a formatted string")


def _occurrences(s: str, old: str, count: Any) -> int:
    n = len(s) + 1 if old == "" else s.count(old)
    if isinstance(count, int) and count >= 0:
        n = min(n, count)
    return n


def _check_replace(m: Meter, s: Any, old: Any, new: Any, count: Any = None) -> None:
    s, old, new = str(s), str(old), str(new)
    m.allow(len(s) + _occurrences(s, old, count) * max(0, len(new) - len(old)), "the result of replace")


def _check_join(m: Meter, items: list[Any], sep: Any) -> None:
    m.allow(sum(m.size(x) for x in items) + max(0, len(items) - 1) * len(str(sep)), "the result of join")


def _width(value: Any) -> int:
    return value if isinstance(value, int) else len(str(value))


def _filter_center(m: Meter, value: Any, width: int = 80) -> None:
    m.allow(m.size(value) + _width(width), "the result of center")


def _filter_indent(m: Meter, s: Any, width: Any = 4, first: bool = False, blank: bool = False) -> None:
    s = str(s)
    m.allow(len(s) + (s.count("\n") + 1) * _width(width), "the result of indent")


def _filter_wordwrap(m: Meter, s: Any, width: int = 79, break_long_words: bool = True,
                     wrapstring: Any = None, *args: Any, **kwargs: Any) -> None:
    s = str(s)
    lines = s.count("\n") + 1 + (len(s) // max(1, width) if isinstance(width, int) else len(s))
    m.allow(len(s) + lines * len(str(wrapstring or "\n")), "the result of wordwrap")


def _filter_format(m: Meter, value: Any, *args: Any, **kwargs: Any) -> None:
    _check_printf(m, str(value), list(args) + list(kwargs.values()))


def _filter_replace(m: Meter, s: Any, old: Any, new: Any, count: Any = None) -> None:
    _check_replace(m, s, old, new, count)


def _filter_batch(m: Meter, value: Any, linecount: int, fill_with: Any = None) -> None:
    if fill_with is not None and isinstance(linecount, int):
        m.allow(m.size(fill_with) * linecount, "the result of batch")


def _filter_slice(m: Meter, value: Any, slices: int, fill_with: Any = None) -> None:
    if isinstance(slices, int) and slices > _MAX_WIDTH:
        raise BudgetExceeded("size", f"slice into {slices} parts exceeds {_MAX_WIDTH}")
    if fill_with is not None and isinstance(slices, int):
        m.allow(m.size(fill_with) * slices, "the result of slice")


def _filter_sum(m: Meter, iterable: Any, attribute: Any = None, start: Any = 0) -> None:
    if not isinstance(start, (int, float)):
        raise BudgetExceeded("size", "sum() of sequences is not allowed in chat templates (quadratic)")


def _filter_tojson(m: Meter, value: Any, ensure_ascii: bool = False, indent: Any = None,
                   separators: Any = None, sort_keys: bool = False) -> None:
    size = m.size(value)
    sep = sum(len(str(s)) for s in separators) if isinstance(separators, (list, tuple)) else 4
    width = 0 if indent is None else _width(indent)
    m.allow(size * (6 + sep) + size * (m.depth(value) + 1) * width, "the result of tojson")


_FILTER_CHECKS: dict[str, Callable[..., None]] = {
    "center": _filter_center, "indent": _filter_indent, "wordwrap": _filter_wordwrap,
    "format": _filter_format, "replace": _filter_replace, "batch": _filter_batch, "slice": _filter_slice,
    "sum": _filter_sum, "tojson": _filter_tojson,
}


def _check_str_method(m: Meter, method: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Pre-checks of the amplifying ``str``/``bytes`` methods (``ljust``, ``replace``, ``join``...)."""
    s = method.__self__
    name = method.__name__
    if name in ("ljust", "rjust", "center", "zfill"):
        width = args[0] if args else kwargs.get("width", 0)
        m.allow(len(s) + (width if isinstance(width, int) else 0), f"the result of {name}")
    elif name == "expandtabs":
        size = args[0] if args else kwargs.get("tabsize", 8)
        m.allow(len(s) + s.count("\t" if isinstance(s, str) else b"\t") * (size if isinstance(size, int) else 8),
                "the result of expandtabs")
    elif name == "replace" and len(args) >= 2:
        _check_replace(m, s, args[0], args[1], args[2] if len(args) > 2 else kwargs.get("count"))
    elif name == "translate":
        table = args[0] if args else None
        biggest = max((m.size(v) for v in table.values()), default=0) if isinstance(table, dict) else 1
        m.allow(len(s) * max(1, biggest), "the result of translate")
    elif name in ("format", "format_map") and isinstance(s, str):
        if name == "format_map":
            _check_format(m, s, (), args[0] if args and isinstance(args[0], dict) else {})
        else:
            _check_format(m, s, args, kwargs)


class OwnList(list[Any]):
    """A list literal of the template: mutable from inside the template (see module docstring)."""

    __slots__ = ()


class OwnDict(dict[Any, Any]):
    """A dict literal of the template: mutable from inside the template (see module docstring)."""

    __slots__ = ()


#: methods of template-made lists and dicts a template may call (``sort`` and ``reverse`` included)
_OWN_MUTATORS: dict[type[Any], frozenset[str]] = {
    OwnList: frozenset({"append", "extend", "insert", "pop", "remove", "clear", "reverse", "sort"}),
    OwnDict: frozenset({"update", "pop", "popitem", "setdefault", "clear"}),
}


def _own(value: Any) -> Any:
    if type(value) is list:
        return OwnList(value)
    if type(value) is dict:
        return OwnDict(value)
    return value


# -- the AST rewrite ------------------------------------------------------------------------------

def _metered(node: nodes.Node, name: str, *args: nodes.Expr) -> nodes.Filter:
    out = nodes.Filter(node, name, list(args), [], None, None)
    out.set_lineno(node.lineno or 1)
    return out


class _Instrument(NodeTransformer):
    """Route loop iterables, comparisons, literals, ``~`` and output through the meter filters."""

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)
        node.iter = _metered(node.iter, "__skippy_iter")
        return node

    def visit_Output(self, node: nodes.Output) -> nodes.Node:
        self.generic_visit(node)
        node.nodes = [_metered(n, "__skippy_out") for n in node.nodes]
        return node

    def visit_Compare(self, node: nodes.Compare) -> nodes.Node:
        self.generic_visit(node)
        node.expr = _metered(node.expr, "__skippy_tick")
        for operand in node.ops:
            operand.expr = _metered(operand.expr, "__skippy_tick")
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        self.generic_visit(node)
        return _metered(node.nodes[0], "__skippy_concat", *node.nodes[1:])

    def _literal(self, node: nodes.Expr) -> nodes.Node:
        self.generic_visit(node)
        if getattr(node, "ctx", "load") != "load":
            return node
        return _metered(node, "__skippy_value")

    visit_List = visit_Tuple = visit_Dict = _literal


# -- the environment -------------------------------------------------------------------------------

class BoundedSandbox(jinja2.sandbox.ImmutableSandboxedEnvironment):
    """An ``ImmutableSandboxedEnvironment`` whose renders are metered (see module docstring).

    Compile with :meth:`compile_template` (the metering rewrite) and render
    inside :meth:`metering`; outside it the size pre-checks still apply,
    with a fresh :class:`Meter` per operation.
    """

    intercepted_binops = frozenset({"+", "-", "*", "/", "//", "%", "**"})

    def __init__(self, *args: Any, budget: RenderBudget | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.budget = budget or RenderBudget()
        self._local = threading.local()
        self.globals.pop("lipsum", None)
        self.filters.pop("pprint", None)
        self._wrap_all()

    # metering context --------------------------------------------------------------------------
    def meter(self) -> Meter:
        """The current render's meter (a throwaway one outside :meth:`metering`)."""
        m = getattr(self._local, "meter", None)
        return m if m is not None else Meter(self.budget)

    def metering(self, meter: Meter) -> _Metering:
        """Context manager: renders in this thread account to ``meter``."""
        return _Metering(self._local, meter)

    def compile_template(self, source: str) -> jinja2.Template:
        """Parse, instrument and compile ``source``; raises jinja2 ``TemplateSyntaxError``."""
        tree = self.parse(source)
        tree = _Instrument().visit(tree)
        tree.set_environment(self)
        code = self.compile(tree)
        return self.template_class.from_code(self, code, self.make_globals(None), None)

    # filters and tests --------------------------------------------------------------------------
    def _wrap_all(self) -> None:
        for name, fn in list(self.filters.items()):
            self.filters[name] = self._wrap(fn, _FILTER_CHECKS.get(name))
        tests: dict[str, Any] = self.tests  # jinja2's DEFAULT_TESTS reads as dict[str, function]
        for name, fn in list(tests.items()):
            tests[name] = self._wrap(fn, None)
        env = self

        @jinja2.pass_context
        def _iter(_ctx: Any, iterable: Any) -> Any:
            return _MeteredIterable(iterable, env.meter())

        @jinja2.pass_context
        def _out(_ctx: Any, value: Any) -> Any:
            m = env.meter()
            m.tick_for(value)
            return m.produce(value) if isinstance(value, str) else _produce_printed(m, value)

        @jinja2.pass_context
        def _tick(_ctx: Any, value: Any) -> Any:
            env.meter().tick_for(value)
            return value

        @jinja2.pass_context
        def _value(_ctx: Any, value: Any) -> Any:
            m = env.meter()
            m.tick()
            return m.produce(_own(value))

        @jinja2.pass_context
        def _concat(_ctx: Any, *parts: Any) -> str:
            m = env.meter()
            m.tick()
            m.allow(sum(m.size(p) for p in parts), "a ~ concatenation")
            return m.produce("".join(map(str, parts)))

        self.filters.update({"__skippy_iter": _iter, "__skippy_out": _out, "__skippy_tick": _tick,
                             "__skippy_value": _value, "__skippy_concat": _concat})

    def wrap_filter(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` as a metered filter (with the size pre-check of the built-in filter ``name``, if any)."""
        return self._wrap(fn, _FILTER_CHECKS.get(name))

    def _wrap(self, fn: Callable[..., Any], check: Callable[..., None] | None) -> Callable[..., Any]:
        """``fn`` metered, as a ``pass_context`` callable (never folded at compile time)."""
        pass_arg = _PassArg.from_obj(fn)
        env = self

        def call(ctx: Any, *args: Any, **kwargs: Any) -> Any:
            m = env.meter()
            m.tick_for(args[0] if args else None)
            if check is not None:
                check(m, *args, **kwargs)
            if pass_arg is _PassArg.context:
                result = fn(ctx, *args, **kwargs)
            elif pass_arg is _PassArg.eval_context:
                result = fn(ctx.eval_ctx, *args, **kwargs)
            elif pass_arg is _PassArg.environment:
                result = fn(env, *args, **kwargs)
            else:
                result = fn(*args, **kwargs)
            return m.produce(result)

        metered: Callable[..., Any] = call
        if fn is jinja2.filters.do_join or getattr(fn, "__name__", "") == "do_join":

            def join(ctx: Any, value: Any, d: str = "", attribute: Any = None) -> Any:
                items = list(value) if not isinstance(value, (str, list, tuple)) else value
                m = env.meter()
                _check_join(m, list(items), d)
                return call(ctx, items, d, attribute)

            metered = join

        return jinja2.pass_context(functools.update_wrapper(metered, fn))

    # sandbox hooks ------------------------------------------------------------------------------
    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        m = __self.meter()
        m.tick_for(getattr(__obj, "__self__", None))
        if isinstance(__obj, LoopContext) and args:  # a recursive loop: loop(children)
            args = (_MeteredIterable(args[0], m), *args[1:])
        target = getattr(__obj, "__wrapped__", __obj)
        if isinstance(target, (types.BuiltinMethodType, types.MethodType)) and \
                isinstance(getattr(target, "__self__", None), (str, bytes)):
            _check_str_method(m, target, args, kwargs)
            if target.__name__ == "join" and args:
                items = list(args[0])
                _check_join(m, items, target.__self__)
                args = (items, *args[1:])
        elif isinstance(getattr(target, "__self__", None), (OwnList, OwnDict)):
            if target.__name__ in ("extend", "update") and args and not isinstance(args[0], (dict, str)):
                args = (list(_MeteredIterable(args[0], m)), *args[1:])  # materialised: one op per item
            # one op per item added: the growth of template-made lists is bounded by the op budget
            m.tick(1 + sum(len(a) for a in (*args, *kwargs.values()) if isinstance(a, (list, dict, str))))
        elif isinstance(target, (types.BuiltinMethodType,)) and target.__name__ == "to_bytes":
            length = args[0] if args else kwargs.get("length", 1)
            m.allow(length if isinstance(length, int) else 0, "the result of to_bytes")
        return m.produce(super().call(__context, __obj, *args, **kwargs))

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        m = self.meter()
        m.tick_for(left, right)
        if operator == "*":
            for seq, n in ((left, right), (right, left)):
                if isinstance(seq, (str, bytes)) and isinstance(n, int):
                    m.allow(len(seq) * max(n, 0), "a repeated string")
                elif isinstance(seq, (list, tuple)) and isinstance(n, int):
                    m.allow(m.size(seq) * max(n, 0), "a repeated sequence")
            if isinstance(left, int) and isinstance(right, int):
                self._check_bits(m, left.bit_length() + right.bit_length())
        elif operator == "**":
            if isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1:
                self._check_bits(m, left.bit_length() * min(right, 1 << 40))
        elif operator == "+":
            if isinstance(left, (str, bytes, list, tuple)) and isinstance(right, (str, bytes, list, tuple)):
                m.allow(m.size(left) + m.size(right), "a concatenation")
        elif operator == "%" and isinstance(left, str):
            _check_printf(m, left, right)
        return m.produce(super().call_binop(context, operator, left, right))

    def _check_bits(self, m: Meter, bits: int) -> None:
        if bits > self.budget.max_int_bits:
            raise BudgetExceeded("size", f"an integer of about {bits} bits exceeds the template limit "
                                         f"of {self.budget.max_int_bits} bits")

    def getattr(self, obj: Any, attribute: str) -> Any:
        self.meter().tick()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        m = self.meter()
        m.tick()
        value = super().getitem(obj, argument)
        return m.produce(value) if isinstance(argument, slice) else value

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        """jinja2's immutable sandbox, except the mutators of the template's own lists and dicts."""
        own = _OWN_MUTATORS.get(type(obj))
        if own is not None and attr in own:
            return True
        return super().is_safe_attribute(obj, attr, value)

    def unsafe_undefined(self, obj: Any, attribute: str) -> Any:
        """Attribute walking (``__class__``, ``__globals__``...) raises; mutating methods stay undefined."""
        if jinja2.sandbox.modifies_known_mutable(obj, attribute):
            return super().unsafe_undefined(obj, attribute)
        raise jinja2.sandbox.SecurityError(
            f"access to unsafe attribute {attribute!r} of {type(obj).__name__!r} object is not allowed")


def _produce_printed(m: Meter, value: Any) -> Any:
    """An output piece that is not a string: its printed form is what gets produced."""
    m.allow(m.size(value), "an output value")
    m.produced += m.size(value)
    if m.produced > m.max_produced:
        raise BudgetExceeded("size", f"the template produced more than {m.max_produced} characters")
    return value


class _Metering:
    def __init__(self, local: threading.local, meter: Meter) -> None:
        self._local = local
        self._meter = meter

    def __enter__(self) -> Meter:
        self._saved = getattr(self._local, "meter", None)
        self._local.meter = self._meter
        return self._meter

    def __exit__(self, *exc: Any) -> None:
        self._local.meter = self._saved
