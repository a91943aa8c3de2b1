"""`opsctl up` grants its demo user the Pro plan with AI on at each start; on a warm SQLite
file that is already so, the grant is skipped by a read of the file with the standard
library (``schema_stamp.sqlite_file_grants_ai``): it must see what the grant wrote, and
no more than that."""

from __future__ import annotations

from pathlib import Path

from durable_ops.clock import utc_now
from durable_ops.storage import migrate, schema_stamp, workspace
from durable_ops.up import grant_ai


def test_the_read_sees_the_grant_and_a_switch_turned_off(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'demo.sqlite3'}"
    assert schema_stamp.sqlite_file_grants_ai(url, "demo") is False  # no file yet
    migrate.upgrade(url)
    db = migrate.open_migrated(url, pool_size=1)
    try:
        assert schema_stamp.sqlite_file_grants_ai(url, "demo") is False  # no row yet
        grant_ai(url, "demo")
        assert schema_stamp.sqlite_file_grants_ai(url, "demo") is True
        assert schema_stamp.sqlite_file_grants_ai(url, "alice") is False  # only the demo user
        db.run(
            lambda tx: workspace.update_ai_settings(tx, utc_now(), ai_enabled=False),
            owner_id="demo",
        )
        assert schema_stamp.sqlite_file_grants_ai(url, "demo") is False  # granted again
        db.run(
            lambda tx: workspace.update_ai_settings(tx, utc_now(), ai_enabled=True, plan="pro"),
            owner_id="demo",
        )
        db.run(lambda tx: workspace.update_ai_settings(tx, utc_now(), plan="free"), owner_id="demo")
        assert schema_stamp.sqlite_file_grants_ai(url, "demo") is False
    finally:
        db.dispose()


def test_any_other_database_is_granted_as_before() -> None:
    assert schema_stamp.sqlite_file_grants_ai("mysql+pymysql://root@127.0.0.1/x", "demo") is False
