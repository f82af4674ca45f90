"""The store: one database (an SQLite file by default, PostgreSQL for a team) behind SQLAlchemy Core.

``Store.open(url)`` connects, reads the schema revision and migrates it (Alembic) when it is older; a store
of a revision this code does not know (a newer tune-remote wrote it) is refused with a hint. Every write is
an ``INSERT ... ON CONFLICT`` on the table's natural key (schema.py): a re-sync writes nothing twice."""

from __future__ import annotations

import os
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy import event

from ..errors import ConnectError, TuneRemoteError, UsageError
from . import schema

HEAD = "0002"                  # the newest revision in migrations/versions (a test checks it is Alembic's head)
KNOWN = ("0001", "0002")          # every revision this code can read or migrate from
MIGRATIONS = Path(__file__).resolve().parent / "migrations"


class StoreUnreachable(ConnectError):
    """The store's database cannot be opened (exit 3)."""


class StoreTooNew(UsageError):
    """The store's schema is of a newer tune-remote (exit 2)."""


class PromotionConflict(TuneRemoteError):
    """Another job holds the team's row for this GPU kind and key."""

    def __init__(self, message: str, holder: dict):
        super().__init__(message, hint="the team's row is the first one promoted; `tune-remote rows` shows it")
        self.holder = holder


def default_url() -> str:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return "sqlite:///" + os.path.join(base, "tune-remote", "store.sqlite")


def resolve_url(value: str | None) -> str | None:
    """The store a command uses: --store, else $TUNE_REMOTE_STORE, else the per-user SQLite file; ``none``:
    no store."""
    url = value or os.environ.get("TUNE_REMOTE_STORE") or default_url()
    return None if url.strip().lower() == "none" else url


def shown(url: str) -> str:
    """The URL without its password (for messages)."""
    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
    except Exception:   # a URL SQLAlchemy cannot parse: shown as given (it is refused anyway)
        return url


def _engine(url: str) -> sa.Engine:
    u = sa.engine.make_url(url)
    if u.drivername in ("postgresql", "postgres"):
        u = u.set(drivername="postgresql+psycopg")
    if u.get_backend_name() == "sqlite":
        if u.database and u.database != ":memory:":
            Path(u.database).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        eng = sa.create_engine(u, connect_args={"timeout": 30})

        @event.listens_for(eng, "connect")
        def _pragmas(dbapi, _record):
            cur = dbapi.cursor()
            cur.execute("PRAGMA journal_mode=WAL")     # readers never block the writer (two commands at once)
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()
        return eng
    if u.get_backend_name() != "postgresql":
        raise UsageError(f"store {shown(url)}: only sqlite:///FILE and postgresql://... stores are supported",
                         hint="--store postgresql://user@host/db, or --store none")
    return sa.create_engine(u, connect_args={"connect_timeout": 5}, pool_pre_ping=True)


class Store:
    def __init__(self, url: str, engine: sa.Engine):
        self.url = url
        self.engine = engine
        self.dialect = engine.dialect.name

    @classmethod
    def open(cls, url: str) -> "Store":
        """Connect and migrate; StoreUnreachable (exit 3) or StoreTooNew (exit 2) with a hint."""
        try:
            engine = _engine(url)
        except sa.exc.ArgumentError as exc:
            raise UsageError(f"store {url!r} is not a database URL: {exc}",
                             hint="--store postgresql://user@host/db, or --store none") from None
        store = cls(url, engine)
        try:
            store.migrate()
        except sa.exc.OperationalError as exc:
            engine.dispose()
            first = str(exc.orig or exc).strip().splitlines()[0] if str(exc.orig or exc).strip() else type(exc).__name__
            raise StoreUnreachable(f"store {shown(url)} unreachable: {first}",
                                   hint="check the database, or run with --store none (the job's records stay "
                                        "in its directory: `tune-remote store import WORKSPACE` later)") from None
        return store

    def revision(self, conn) -> str | None:
        if not sa.inspect(conn).has_table("alembic_version"):
            return None
        return conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()

    def migrate(self) -> None:
        with self.engine.begin() as conn:
            if self.dialect == "postgresql":      # two laptops opening a fresh store at once migrate it once
                conn.execute(sa.text("SELECT pg_advisory_xact_lock(3939)"))
            rev = self.revision(conn)
            if rev == HEAD:
                return
            if rev is not None and rev not in KNOWN:
                raise StoreTooNew(f"store {shown(self.url)} has schema revision {rev}, newer than this tune-remote "
                                  f"knows (newest {HEAD})",
                                  hint="upgrade tune-remote to the version the team uses, or pass --store none")
            from alembic.config import Config
            from alembic import command
            cfg = Config()
            cfg.set_main_option("script_location", str(MIGRATIONS))
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")

    def close(self) -> None:
        self.engine.dispose()

    # ------------------------------------------------------------------ writes (idempotent)
    def insert(self, table: sa.Table):
        if self.dialect == "postgresql":
            from sqlalchemy.dialects.postgresql import insert
        else:
            from sqlalchemy.dialects.sqlite import insert
        return insert(table)

    def upsert(self, conn, table: sa.Table, rows: list[dict], keys: list[str], update: bool = True) -> None:
        if not rows:
            return
        stmt = self.insert(table)
        cols = [c for c in rows[0] if c not in keys]
        if update and cols:
            stmt = stmt.on_conflict_do_update(index_elements=keys, set_={c: stmt.excluded[c] for c in cols})
        else:
            stmt = stmt.on_conflict_do_nothing(index_elements=keys)
        conn.execute(stmt, rows)

    def result_ids(self, conn, job_uid: str) -> dict[str, int]:
        t = schema.results
        return {k: i for i, k in conn.execute(sa.select(t.c.id, t.c.row_key).where(t.c.job_uid == job_uid))}

    def claim(self, conn, job_uid: str, rows: list[dict]) -> list[dict]:
        """The team's row for each (gfx, cu_num, table_name, row_key) of ``rows``: taken for job_uid where no
        job holds it; the keys another job holds first come back with that job (the one told)."""
        if not rows:
            return []
        t, j = schema.team_rows, schema.jobs
        self.upsert(conn, t, [{**r, "job_uid": job_uid} for r in rows], ["gfx", "cu_num", "table_name", "row_key"],
                    update=False)
        lost = []
        for r in rows:
            held = conn.execute(sa.select(t.c.job_uid, j.c.job_id, j.c.origin).join(j, j.c.uid == t.c.job_uid)
                                .where(t.c.gfx == r["gfx"], t.c.cu_num == r["cu_num"],
                                       t.c.table_name == r["table_name"], t.c.row_key == r["row_key"])).first()
            if held is not None and held.job_uid != job_uid:
                lost.append({**r, "held_by": held.job_id, "origin": held.origin})
        return lost

    def claim_one(self, job_uid: str, row: dict) -> None:
        """One key, in its own transaction: PromotionConflict naming the holder when another job has it."""
        with self.engine.begin() as conn:
            lost = self.claim(conn, job_uid, [row])
        if lost:
            h = lost[0]
            raise PromotionConflict(f"{h['table_name']} {h['row_key']} on {h['gfx']}/cu_num={h['cu_num']} was "
                                    f"promoted first by job {h['held_by']} ({h['origin']})", h)

    def release(self, conn, job_uid: str, table_name: str | None = None, row_keys=None) -> None:
        t = schema.team_rows
        where = [t.c.job_uid == job_uid] + ([t.c.table_name == table_name] if table_name else [])
        if row_keys is not None:
            where.append(t.c.row_key.in_(list(row_keys)))
        conn.execute(t.delete().where(*where))

    def counts(self) -> dict[str, int]:
        with self.engine.connect() as conn:
            return {t.name: conn.execute(sa.select(sa.func.count()).select_from(t)).scalar()
                    for t in schema.metadata.sorted_tables}
