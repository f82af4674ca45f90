"""The stores this process opened: each opened (and migrated) once; an explicit one (--store URL or
$TUNE_REMOTE_STORE) before the command runs, so that an unreachable one stops it before anything ran."""

from __future__ import annotations

import os

from .db import Store, resolve_url

_OPEN: dict[str, Store] = {}        # url -> the opened Store of this process


def opened(url: str) -> Store:
    if url not in _OPEN:
        _OPEN[url] = Store.open(url)
    return _OPEN[url]


def forget(url: str) -> None:
    """A store whose write failed: opened again at the next try."""
    _OPEN.pop(url, None)


def check(value: str | None) -> None:
    """--store VALUE (or $TUNE_REMOTE_STORE) given: open it now (StoreUnreachable: exit 3). The default store
    is opened only when a job is saved, and never stops one."""
    url = resolve_url(value)
    if url is not None and (value or os.environ.get("TUNE_REMOTE_STORE")):
        opened(url)
