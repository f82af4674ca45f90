"""Alembic's environment for the store: run on the connection the store opened (db.py passes it in
``config.attributes["connection"]``); never from alembic.ini or the command line."""

from __future__ import annotations

from alembic import context

from orchestrator.store.schema import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
