"""A list whose items are made on first use: the batches the store passes around in columns.

A window's dispatch requests (:class:`~rocketq.store.record_scan.DispatchBatch`) and a batch
send held as its body (:class:`~rocketq.store.packed_batch.PackedBatch`) are read in bulk by
the code they are made for, without an object per item; anything else that takes them as a
``list`` gets real items, made once by the subclass's :meth:`LazyList._items` on the first
element access and kept. ``len`` and truth do not make them (the subclass knows its count).

Only Python-level access makes them: C code that reads a list's storage directly
(``PySequence_Fast`` on a list) would see it empty before that, so these batches are handed
only to Python code.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, TypeVar

T = TypeVar("T")


class LazyList(list[T]):
    """See the module docstring. Subclasses set ``_count`` and ``_built = False`` and define
    :meth:`_items`."""

    _count: int
    _built: bool

    def _items(self) -> list[T]:
        raise NotImplementedError

    def _build(self) -> None:
        if not self._built:
            self._built = True
            list.extend(self, self._items())

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def __iter__(self) -> Iterator[T]:
        self._build()
        return list.__iter__(self)

    def __reversed__(self) -> Iterator[T]:
        self._build()
        return list.__reversed__(self)

    def __getitem__(self, index: Any) -> Any:
        self._build()
        return list.__getitem__(self, index)

    def __contains__(self, item: object) -> bool:
        self._build()
        return list.__contains__(self, item)

    def __eq__(self, other: object) -> bool:
        self._build()
        return list.__eq__(self, other)

    __hash__ = None  # a list: unhashable
