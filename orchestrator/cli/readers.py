"""The team's store for the commands that read it as they run (`recheck`, `audit`: every row promoted by any
laptop, where a suspicious row came from) and write their records to it.

An explicit store (``--store URL`` or ``$TUNE_REMOTE_STORE``) was opened before the command ran (base.py:
unreachable is one line and exit 3). The default store never stops these commands: when it cannot be
opened or asked, one warning line and the command goes on without it, exactly as before the store existed."""
from __future__ import annotations

from .base import Env


def store_of(env: Env):
    """The store this command reads and writes, or None (``--store none``, or the default store that cannot
    be opened: warned once)."""
    from ..store import resolve_url
    url = resolve_url(env.store_url)
    if url is None:
        return None
    from ..store.live import opened
    from .store import explicit     # here, not at import: cli/store.py adds --reuse to the commands defined before it
    if explicit(env):
        return opened(url)              # opened at start already; an unreachable one never gets here
    try:
        return opened(url)
    except Exception as exc:  # noqa: BLE001  the default store never stops a command
        gone(url, exc)
        return None


def gone(url: str, exc: Exception, what: str = "read without it") -> None:
    """One warning: the store failed (opened, asked or written); the command goes on."""
    from ..store import shown
    from ..store.live import forget
    from .store import warn
    forget(url)
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
    warn(f"store {shown(url)}: {first}; {what}")


def ask(env: Env, store, question, *args, **kw):
    """``question(store, ...)``'s answer; the store gone away (mid-command): an explicit one is exit 3 (one
    line), the default one a warning and None (the command goes on without it)."""
    import sqlalchemy as sa
    try:
        return question(store, *args, **kw)
    except (sa.exc.SQLAlchemyError, OSError) as exc:
        from .store import explicit
        if explicit(env):
            from ..store import StoreUnreachable, shown
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            raise StoreUnreachable(f"store {shown(store.url)} unreachable: {first}",
                                   hint="check the database, or run with --store none") from None
        gone(store.url, exc, "the command goes on without the team's store")
        return None


def promoted_on(store, nodes):
    """The store's live promoted rows on ``nodes`` (store.query, loaded only when asked)."""
    from ..store.query import promoted_on as query
    return query(store, nodes)
