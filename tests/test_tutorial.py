"""docs/tutorial.md, followed verbatim in a temporary directory: a new site, from install to upload.

The steps are read from the page itself: each fenced block preceded by a marker comment is run
as written, so the page and this test cannot drift apart.

- ``<!-- tutorial: run -->``: a ``sh`` block, run by bash in the reader's current directory (a
  ``cd`` in it carries over to the next block);
- ``<!-- tutorial: background -->``: a long-running command (``runserver``, ``db_worker``), left
  running until the end;
- ``<!-- tutorial: append PATH -->`` / ``<!-- tutorial: write PATH -->``: a file the reader edits;
- ``<!-- tutorial: shell -->``: Python typed into ``python manage.py shell``.

Then the test does what the reader does in a browser: opens ``/kb/`` anonymously (a login
page, not a 404), logs in, searches on the app's page and through the view of section 5, and
uploads a file at the admin's add page of the registered model, which ``db_worker`` ingests.

What differs from a reader's machine lies outside the page's text:

- Install: the tutorial's own ``pip install "/path/to/django-rag[...]"`` line runs, on a copy of
  this checkout, in a fresh virtualenv. Resolving and downloading every dependency into a new
  venv would take minutes and the network, so the venv sees this suite's site-packages through a
  ``.pth`` file (its ``pip`` command runs the suite's pip package), and pip runs with
  ``PIP_NO_INDEX`` (nothing is downloaded: every dependency is already satisfied) and without
  build isolation (the dev extra's setuptools builds the wheel). pip still resolves the extras,
  builds django-rag from the checkout and installs it into the new venv; the test checks that the
  site imports that copy, not this worktree.
- ``runserver`` is given a free port (the reader's default 8000 may be taken here), and
  ``DJANGO_RAG_PGSERVER_KEEP=1`` keeps the site's database running between commands instead of
  starting it for each one (the test stops it at the end).
- The reader's documents (``handbook/``) are the example project's sample handbook.

The site's database is the embedded server the tutorial's settings start in the project's own
``pgdata/`` (DATABASE_URL and DJANGO_RAG_PGDATA are removed from its environment), so it never
touches the suite's or the demo's data; the whole directory is deleted at the end.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import site
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests

ROOT = Path(__file__).resolve().parent.parent
TUTORIAL = ROOT / "docs" / "tutorial.md"
STEP = re.compile(r"^<!-- tutorial: (\w+)(?: (\S+))? -->\n```(\w*)\n(.*?)^```$", re.M | re.S)
CHECKOUT_PLACEHOLDER = "/path/to/django-rag"
NO_ISSUES = "System check identified no issues (0 silenced)."

pytestmark = pytest.mark.slow


@dataclass
class Step:
    action: str
    path: str
    language: str
    text: str


@dataclass
class Reader:
    """The reader's machine: a directory, a shell environment, and what each step printed."""

    home: Path
    env: dict[str, str]
    cwd: Path
    background: list[subprocess.Popen[bytes]] = field(default_factory=list)
    transcript: list[tuple[Step, str]] = field(default_factory=list)

    def output(self, contains: str) -> list[str]:
        return [out for step, out in self.transcript if contains in step.text]


def tutorial_steps() -> list[Step]:
    return [Step(*match.groups(default="")) for match in STEP.finditer(TUTORIAL.read_text())]


def test_the_tutorial_marks_every_step_the_issue_asks_for() -> None:
    steps = tutorial_steps()
    text = "\n".join(step.text for step in steps)
    for needed in (
        f'pip install "{CHECKOUT_PLACEHOLDER}[embedded,local,pdf]"',
        "django-admin startproject mysite",
        "python manage.py startapp kb",
        "python manage.py migrate",
        "python manage.py rag_migration --app kb",
        "python manage.py rag_ingest handbook/",
        ".nearest(",
        '"django_tasks_db.DatabaseBackend"',
        'include("django.contrib.auth.urls")',
        "@rag.register(",
        "python manage.py runserver",
        "python manage.py db_worker",
    ):
        assert needed in text, f"docs/tutorial.md no longer runs {needed!r}"
    assert {step.action for step in steps} == {"run", "append", "write", "shell", "background"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _new_reader(home: Path) -> Reader:
    """A fresh virtualenv that sees this suite's packages (see the module docstring)."""
    venv = home / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    purelib = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(purelib) / "tutorial_test_dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    # The venv's own `pip` command (what ensurepip would write), running the suite's pip package: it
    # installs into this venv, whose interpreter runs it.
    pip = venv / "bin" / "pip"
    main = "import sys\nfrom pip._internal.cli.main import main\nsys.exit(main())\n"
    pip.write_text(f"#!{venv / 'bin' / 'python'}\n{main}")
    pip.chmod(0o755)
    checkout = home / "django-rag"
    checkout.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, checkout / name)
    no_cache = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "django_rag", checkout / "django_rag", ignore=no_cache)
    drop = ("DATABASE_URL", "DJANGO_RAG_PGDATA", "DJANGO_SETTINGS_MODULE", "PYTHONPATH", "CELERY_BROKER_URL")
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("DJANGO_RAG_TEST")}
    env.update(
        PATH=f"{venv / 'bin'}:{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}",
        VIRTUAL_ENV=str(venv),
        PIP_NO_INDEX="1",
        # pip's negative options read inverted from the environment: this turns build isolation off.
        PIP_NO_BUILD_ISOLATION="0",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        # One server start for the whole tutorial rather than one per command; stopped at the end.
        DJANGO_RAG_PGSERVER_KEEP="1",
        PYTHONUNBUFFERED="1",
    )
    return Reader(home=home, env=env, cwd=home)


def _run(reader: Reader, step: Step, port: int) -> None:
    if step.action in ("append", "write"):
        target = reader.cwd / step.path
        target.parent.mkdir(parents=True, exist_ok=True)
        before = target.read_text() if step.action == "append" else ""
        target.write_text(before + ("\n" if before else "") + step.text)
        reader.transcript.append((step, ""))
        return
    if step.action == "shell":
        code = reader.home / "shell-input.py"
        code.write_text(step.text)
        with code.open() as stdin:  # a file, so the shell sees its input at once
            done = subprocess.run(
                ["bash", "-c", "python manage.py shell"],
                stdin=stdin,
                cwd=reader.cwd,
                env=reader.env,
                capture_output=True,
                text=True,
                timeout=300,
            )
        assert done.returncode == 0, f"{step.text}\n{done.stdout}\n{done.stderr}"
        reader.transcript.append((step, done.stdout + done.stderr))
        return
    command = step.text.replace(CHECKOUT_PLACEHOLDER, str(reader.home / "django-rag"))
    command = re.sub(r"manage\.py runserver$", f"manage.py runserver 127.0.0.1:{port}", command, flags=re.M)
    if "rag_ingest handbook/" in command:
        # The reader's own documents: the example project's sample handbook.
        handbook = ROOT / "example_project" / "sample_docs"
        shutil.copytree(handbook, reader.cwd / "handbook", ignore=_only_top_md)
    if step.action == "background":
        log = (reader.home / f"background-{len(reader.background)}.log").open("wb")
        reader.background.append(
            subprocess.Popen(
                ["bash", "-c", command],
                cwd=reader.cwd,
                env=reader.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
        reader.transcript.append((step, ""))
        return
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", command + '\necho "tutorial-cwd=$PWD"'],
        cwd=reader.cwd,
        env=reader.env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"{command}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    reader.cwd = Path(done.stdout.rstrip().rsplit("tutorial-cwd=", 1)[1])
    reader.transcript.append((step, done.stdout + done.stderr))


def _only_top_md(directory: str, names: list[str]) -> list[str]:
    return [name for name in names if not name.endswith(".md") or name == "README.md"]


def _stop(reader: Reader) -> None:
    for process in reader.background:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGINT)  # Ctrl-C: Django exits, and so does its database user
    for process in reader.background:
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
    postmaster = reader.home / "mysite" / "pgdata" / "postmaster.pid"
    if postmaster.exists():  # a step failed half-way: stop the site's server ourselves
        pid = int(postmaster.read_text().split()[0])
        with_server = True
        try:
            os.kill(pid, signal.SIGINT)
        except ProcessLookupError:
            with_server = False
        deadline = time.monotonic() + 30
        while with_server and postmaster.exists() and time.monotonic() < deadline:
            time.sleep(0.2)


@pytest.fixture
def reader() -> Iterator[Reader]:
    # Not pytest's tmp_path (mode 0700 under /tmp/pytest-of-root): started by root, the site's
    # embedded server runs as the OS user pgserver, which must reach the project's pgdata/.
    home = Path(tempfile.mkdtemp(prefix="django-rag-tutorial-"))
    home.chmod(0o755)
    reader = _new_reader(home)
    try:
        yield reader
    finally:
        _stop(reader)
        shutil.rmtree(home, ignore_errors=True)


def _wait_for(url: str, reader: Reader, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if requests.get(url, timeout=5).status_code == 200:
                return
        except requests.ConnectionError:
            pass  # not listening yet, or restarting after the reader edited a file
        if time.monotonic() > deadline:
            logs = "\n".join(log.read_text()[-3000:] for log in sorted(reader.home.glob("background-*.log")))
            raise AssertionError(f"{url} did not answer within {timeout}s\n{logs}")
        time.sleep(0.5)


def _post_form(
    session: requests.Session, url: str, data: dict[str, str], **kwargs: object
) -> requests.Response:
    page = session.get(url, timeout=30)
    assert page.status_code == 200, page.text[-2000:]
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert token, page.text[-2000:]
    return session.post(
        url,
        data={**data, "csrfmiddlewaretoken": token.group(1)},
        headers={"Referer": url},
        allow_redirects=False,
        timeout=60,
        **kwargs,  # type: ignore[arg-type]
    )


def test_the_tutorial_runs_verbatim_from_a_new_project_to_an_indexed_upload(
    reader: Reader, report: Callable[[str], None]
) -> None:
    port = _free_port()
    started = time.monotonic()
    for step in tutorial_steps():
        _run(reader, step, port)
    ran = time.monotonic() - started
    project = reader.home / "mysite"

    # Section 1: the checkout was built and installed into the reader's venv, and the site uses it.
    assert "Successfully installed django-rag-" in reader.output("pip install")[0]
    where = subprocess.run(
        ["python", "-c", "import django_rag; print(django_rag.__file__)"],
        env=reader.env,
        cwd=project,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert where.startswith(str(reader.home / "venv")), where
    # Section 3: a database of the project's own, named; no check complains, before or after section 6.
    first_migrate = reader.output("python manage.py migrate")[0]
    assert f"django-rag: embedded PostgreSQL in a new data directory {project}/pgdata (" in first_migrate
    assert all(NO_ISSUES in out for out in reader.output("manage.py check --database default"))
    assert len(reader.output("manage.py check --database default")) == 2
    assert (project / "kb" / "migrations" / "0001_rag_indexes.py").exists()
    # Section 4: the shell's index() calls, the second one embedding nothing.
    indexed = reader.output("kb.index(docs")[0]
    assert "SyncResult(added=1, removed=0, unchanged=0, documents=1, skipped=0, embedded=1)" in indexed
    assert "SyncResult(added=0, removed=0, unchanged=1, documents=1, skipped=0, embedded=0)" in indexed
    # Section 5: each mode found the FAQ or the handbook's page on backups.
    searched = reader.output('for mode in ("vector", "text", "hybrid")')[0]
    for mode in ("vector", "text", "hybrid"):
        found = rf"^{mode} \d\.\d{{3}} (Backup FAQ|Backups and restores) \|"
        assert re.search(found, searched, re.M), searched

    site = f"http://127.0.0.1:{port}"
    _wait_for(f"{site}/accounts/login/", reader)
    anonymous = requests.get(f"{site}/kb/", allow_redirects=False, timeout=30)
    assert (anonymous.status_code, anonymous.headers["Location"]) == (302, "/accounts/login/?next=/kb/")
    username = re.search(r"--username (\S+)", "\n".join(s.text for s, _ in reader.transcript))
    password = re.search(r"DJANGO_SUPERUSER_PASSWORD=(\S+)", "\n".join(s.text for s, _ in reader.transcript))
    assert username and password
    session = requests.Session()
    login = _post_form(
        session,
        f"{site}/accounts/login/?next=/kb/",
        {"username": username.group(1), "password": password.group(1), "next": "/kb/"},
    )
    assert (login.status_code, login.headers["Location"]) == (302, "/kb/"), login.text[-2000:]
    page = session.get(f"{site}/kb/", params={"q": "how long are backups kept?"}, timeout=60)
    assert page.status_code == 200 and "Backup" in page.text, page.text[-2000:]
    view = session.get(f"{site}/search/", params={"q": "how long are backups kept?"}, timeout=60)
    titles = [hit["title"] for hit in view.json()["hits"]]
    assert {"Backup FAQ", "Backups and restores"} & set(titles), titles

    # Section 6: a file uploaded at the admin's add page is queued and ingested by db_worker.
    note = b"The espresso machine on the third floor is descaled every Friday at noon by facilities."
    added = _post_form(
        session,
        f"{site}/admin/kb/attachment/add/",
        {"org_slug": "acme", "_save": "Save"},
        files={"file": ("espresso.txt", note, "text/plain")},
    )
    assert added.status_code == 302, added.text[-3000:]
    deadline = time.monotonic() + 120
    while True:
        question = {"q": "when is the espresso machine descaled?"}
        hits = session.get(f"{site}/search/", params=question, timeout=60)
        if any("descaled every Friday" in hit["text"] for hit in hits.json()["hits"]):
            break
        assert time.monotonic() < deadline, (reader.home / "background-1.log").read_text()[-4000:]
        time.sleep(1)
    report(
        f"docs/tutorial.md verbatim: {len(reader.transcript)} steps in {ran:.0f} s, the site's checks and "
        f"the indexed upload {time.monotonic() - started - ran:.0f} s more"
    )
