"""Typed JSON: the one conversion between JSON values and annotated dataclass fields, shared by the
configuration sections (``lnrepro.config.settings.Section``) and the run records (``lnrepro.records.Record``),
which differ only in how they name keys and which keys may be absent."""

from __future__ import annotations

import functools
import re
import types
import typing
from enum import Enum
from typing import Any, Callable, Mapping

from .errors import LnReproError

Key = Callable[[str, str], str]  # (where, key) -> the name of the key in an error


@functools.cache
def type_hints(cls: type) -> dict[str, Any]:
    """``typing.get_type_hints`` of a typed class, made once per class (it evaluates every annotation again on
    each call: a fifth of reading a config, which builds hundreds of sections)."""
    return typing.get_type_hints(cls)


def convert(tp: Any, value: Any, where: str, key: Key, ints_as_floats: bool = False) -> Any:
    """``value`` read from JSON as the annotated type ``tp``: nested typed classes built (``tp.from_dict``),
    enumerations from their value, lists as tuples, mappings value by value; ``ints_as_floats``: an int where
    a float is declared becomes one (YAML reads ``1`` as an int)."""
    if value is None:
        return None
    origin = typing.get_origin(tp)

    def again(inner_tp: Any, inner_value: Any, inner_where: str) -> Any:
        return convert(inner_tp, inner_value, inner_where, key, ints_as_floats)

    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        return again(inner[0], value, where) if len(inner) == 1 else value
    if isinstance(tp, type) and issubclass(tp, Enum):
        try:
            return tp(value)
        except ValueError:
            what = re.findall(r"[A-Z][a-z]*", tp.__name__)[-1].lower()  # RunStatus: "status"
            raise LnReproError(f"{where}: {value!r} is not a {what}; expected one of "
                               f"{', '.join(repr(s.value) for s in tp)}") from None
    if isinstance(tp, type) and hasattr(tp, "from_dict"):
        return tp.from_dict(value, where)
    if origin is tuple:
        return tuple(value)
    if origin in (dict, Mapping, typing.Mapping) or tp is dict:
        if not isinstance(value, Mapping):
            raise LnReproError(f"{where}: expected a mapping, got {type(value).__name__}")
        args = typing.get_args(tp)
        if len(args) == 2:
            return {k: again(args[1], v, key(where, k)) for k, v in value.items()}
        return dict(value)
    if ints_as_floats and tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def plain(value: Any) -> Any:
    """The JSON value of a field: typed objects as their ``to_dict()``, enumerations as their value, tuples
    as lists (as JSON reads them back)."""
    if hasattr(value, "to_dict") and not isinstance(value, type):
        return value.to_dict()
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value
