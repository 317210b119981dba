"""The 0.7 free functions of storage/batches.py and storage/control.py, which took a store
first: each is now a method of a subject store (``store.batches``, ``store.control``). The
old names still import from their modules, with a DeprecationWarning naming the method."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any


def moved_getattr(module: str, subject: str, names: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` answering each old name of ``names`` (old -> method) with a
    function that calls ``store.<subject>.<method>``."""

    def __getattr__(name: str) -> Any:
        method = names.get(name)
        if method is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warnings.warn(
            f"{module}.{name}(store, ...) is store.{subject}.{method}(...) since 0.8",
            DeprecationWarning,
            stacklevel=2,
        )

        def moved(store: Any, *args: Any, **kwargs: Any) -> Any:
            return getattr(getattr(store, subject), method)(*args, **kwargs)

        moved.__name__ = moved.__qualname__ = name
        return moved

    return __getattr__
