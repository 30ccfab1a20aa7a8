"""Deep copies of JSON trees, the emulator's most frequent operation.

Every stored object, request body and response is a tree of dicts, lists and scalars (what
``json.loads`` yields). ``copy.deepcopy`` copies such a tree correctly but slowly: it keeps a
memo of every node (for cycles and shared references, which JSON trees do not have) and
dispatches through ``__deepcopy__``/``__reduce_ex__`` lookups. :func:`clone` walks dicts and
lists directly, shares immutable scalars, and leaves anything else to ``copy.deepcopy``, so
the result is the same for every tree that ``copy.deepcopy`` would copy.
"""

from __future__ import annotations

import copy
from typing import Any

_SCALARS = (str, int, float, bool, type(None))


def clone(value: Any) -> Any:
    """A deep copy of ``value`` (a JSON tree: dicts, lists, scalars; other nodes via ``copy.deepcopy``)."""
    kind = type(value)
    if kind is dict:
        return {k: v if type(v) in _SCALARS else clone(v) for k, v in value.items()}
    if kind is list:
        return [v if type(v) in _SCALARS else clone(v) for v in value]
    if kind in _SCALARS:
        return value
    return copy.deepcopy(value)
