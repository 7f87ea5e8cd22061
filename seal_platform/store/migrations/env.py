"""Alembic environment for the run store. The store passes an open connection in
``config.attributes["connection"]``; the ``alembic`` command line can instead set ``sqlalchemy.url``."""

from alembic import context
from sqlalchemy import create_engine

from seal_platform.store.models import Base

config = context.config
target_metadata = Base.metadata


def _migrate(connection) -> None:
    # Batch mode: SQLite cannot ALTER most things in place, so alembic rebuilds tables instead.
    context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is not None:
    _migrate(connection)
else:
    url = config.get_main_option("sqlalchemy.url")
    assert url, "alembic: no sqlalchemy.url"
    engine = create_engine(url)
    with engine.begin() as conn:
        _migrate(conn)
