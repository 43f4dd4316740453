"""Shared fixtures. The database is real PostgreSQL + pgvector (see tests/settings.py)."""

from __future__ import annotations

import pytest

from django_rag.stores.base import _cached_store


@pytest.fixture(autouse=True)
def _fresh_store_cache():
    # The store is cached per backend path; tests that swap RAG["STORE"] must not leak it.
    yield
    _cached_store.cache_clear()


# --- Automatic ingestion (django_rag.ingest.rows, django_rag.tasks) ---------------------------------

_measurements: list[str] = []


@pytest.fixture
def report():
    """Record a measured figure; all are printed in the terminal summary of the run."""
    return _measurements.append


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if _measurements:
        terminalreporter.section("django-rag measurements")
        for line in _measurements:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session", autouse=True)
def _clean_media_root():
    # Uploads of this run (shared with the Celery workers it starts) go with the run.
    yield
    import shutil

    from django.conf import settings

    if "test-media" in str(getattr(settings, "MEDIA_ROOT", "")):
        shutil.rmtree(settings.MEDIA_ROOT, ignore_errors=True)


@pytest.fixture
def inline_ingestion(settings):
    """Ingestion runs in-process after commit (RAG["ASYNC"] = False), whatever Celery app is loaded."""
    settings.RAG = {**settings.RAG, "ASYNC": False}


@pytest.fixture
def no_broker():
    """A current Celery app without a broker: saves go to the Tasks API queue, never to Celery.

    The suite's Redis app stays current once a Celery test has run, and its session-wide worker
    would pick the task up and ingest it while the test looks at the queue.
    """
    from celery import Celery, current_app

    previous = current_app._get_current_object()
    Celery("django_rag_no_broker", set_as_current=True).conf.update(broker_url=None)
    yield
    previous.set_current()


@pytest.fixture
def committed(django_capture_on_commit_callbacks, inline_ingestion):
    """``with committed(): row.save()`` runs the on_commit callbacks as a real commit would."""
    from functools import partial

    return partial(django_capture_on_commit_callbacks, execute=True)


@pytest.fixture
def registry():
    """Lets a test re-register models; every registration is restored afterwards."""
    from dataclasses import fields

    from django_rag.ingest import registration as registry_module

    saved = registry_module.registrations()
    yield registry_module
    for registration in registry_module.registrations():
        registry_module.unregister(registration.model)
    for registration in saved:
        options = {f.name: getattr(registration, f.name) for f in fields(registration) if f.name != "model"}
        registry_module.register(registration.model, **options)


@pytest.fixture
def sent():
    """Every django_rag.signals signal sent during the test: {signal name: [kwargs, ...]}."""
    from django_rag import signals

    log: dict[str, list[dict]] = {name: [] for name in signals.__all__}
    receivers = []
    for name in signals.__all__:

        def receiver(sender, _name=name, **kwargs):
            log[_name].append({"sender": sender, **kwargs})

        getattr(signals, name).connect(receiver, weak=False, dispatch_uid=f"tests.sent.{name}")
        receivers.append(name)
    yield log
    for name in receivers:
        getattr(signals, name).disconnect(dispatch_uid=f"tests.sent.{name}")


@pytest.fixture(scope="session")
def celery_app():
    """The suite's Celery app (tests/celeryapp.py), current in this process; its Redis keys go afterwards."""
    import redis
    from django.conf import settings

    from tests.celeryapp import app

    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    try:
        client.ping()
    except redis.RedisError as exc:
        pytest.fail(f"Redis is not reachable at {settings.CELERY_BROKER_URL} ({exc}); .ci/run starts one")
    app.set_current()
    yield app
    prefix = settings.CELERY_BROKER_TRANSPORT_OPTIONS["global_keyprefix"]
    for key in client.scan_iter(match=f"{prefix}*"):
        client.delete(key)


@pytest.fixture(scope="session")
def s3_server():
    """moto's S3-compatible server on 127.0.0.1 (ephemeral port) with the tests' bucket; yields its URL."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    boto3.client(
        "s3",
        endpoint_url=url,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    ).create_bucket(Bucket="django-rag-tests")
    yield url
    server.stop()


@pytest.fixture(scope="session")
def worker_process(celery_app, s3_server, django_db_setup, tmp_path_factory):
    """A real worker (prefork, 2 processes) on this run's default queue, shared by the worker tests."""
    from django.conf import settings

    from tests.workers import Worker

    started = Worker(
        "main",
        settings.CELERY_TASK_DEFAULT_QUEUE,
        tmp_path_factory.mktemp("workers"),
        pool="prefork",
        concurrency=2,
        env={"DJANGO_RAG_TEST_S3_URL": s3_server},
    )
    try:
        yield started.start()
    finally:
        started.stop()


@pytest.fixture
def worker(worker_process):
    """The shared worker; the test ends only once the worker has finished the test's tasks."""
    yield worker_process
    worker_process.wait_idle()


@pytest.fixture
def via_celery(celery_app, settings):
    """Saves enqueue Celery tasks (RAG["ASYNC"] on, the suite's app current)."""
    celery_app.set_current()
    settings.RAG = {**settings.RAG, "ASYNC": True}
    return celery_app
