"""Load on the web endpoints: the search page, the search JSON endpoint and ask (JSON), N clients.

    .venv/bin/python bench/load.py [--clients 1,4,8,16] [--requests 30] [--seconds 60] [--docs 1000]
                                   [--chat-delay 0.5]

One run, one scratch database on the bench PostgreSQL server (see common.py), dropped at the
end. SciFact abstracts (hashing embedder, 64 dims: meaning does not matter here) split between
two tenants, acme and globex, with a user each and a scope hook that confines them. The site is
served by Django's threaded WSGI server on 127.0.0.1 (one thread per request, as ``runserver``
runs it); ask goes through the real openai client to django_rag.testing's chat server on
loopback. Nothing leaves the machine.

For each client count: every client sends ``--requests`` requests (search page, search JSON,
ask JSON in turn, abstract titles as questions), a new connection each, until done or
``--seconds`` have passed. Printed: p50/p99/max per endpoint, requests, errors (a failed request,
a status other than 200, an empty result or a title of the other tenant), requests not sent
before the deadline, and the largest number of database connections seen (``pg_stat_activity``,
sampled every 10 ms) against the bound ``2 x clients + 2``. The clients share the server's
process (and its GIL): the latencies include their own overhead, a pessimistic figure.
"""

from __future__ import annotations

import argparse
import random
import sys
from typing import Any

from common import ROOT, bench_database, load_abstracts, machine_line
from django.urls import include, path

from django_rag.testing import OpenAICompatibleServer

TENANTS = ("acme", "globex")


def __getattr__(name: str) -> Any:
    # This module is the site's ROOT_URLCONF; its patterns import the views, so only once Django is set up.
    if name == "urlpatterns":
        return [path("kb/", include("django_rag.urls"))]
    raise AttributeError(name)


def scope(request: Any) -> dict[str, Any]:
    """The scope hook: each user is confined to the tenant of the same name."""
    return {"tenant": request.user.get_username()}


def configure(url: str, chat_url: str) -> None:
    import django
    from django.conf import settings
    from django.core.management import call_command

    from django_rag.database import parse_database_url

    settings.configure(
        DEBUG=False,
        SECRET_KEY="bench-only",
        USE_TZ=True,
        ALLOWED_HOSTS=["127.0.0.1", "testserver"],
        DATABASES={"default": parse_database_url(url)},
        INSTALLED_APPS=[
            "django.contrib.auth",
            "django.contrib.contenttypes",
            "django.contrib.sessions",
            "django.contrib.messages",
            "django.contrib.postgres",
            "django_rag",
        ],
        MIDDLEWARE=[
            "django.contrib.sessions.middleware.SessionMiddleware",
            "django.contrib.auth.middleware.AuthenticationMiddleware",
            "django.contrib.messages.middleware.MessageMiddleware",
        ],
        TEMPLATES=[
            {
                "BACKEND": "django.template.backends.django.DjangoTemplates",
                "APP_DIRS": True,
                "OPTIONS": {
                    "context_processors": [
                        "django.template.context_processors.request",
                        "django.contrib.auth.context_processors.auth",
                        "django.contrib.messages.context_processors.messages",
                    ]
                },
            }
        ],
        ROOT_URLCONF=__name__,
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
        RAG={
            "EMBEDDERS": {
                "default": {"BACKEND": "django_rag.embedders.hashing.HashingEmbedder", "DIMENSIONS": 64}
            },
            "COLLECTIONS": {"docs": {"TEXT_CONFIG": "english"}},
            "CHAT": {
                "BACKEND": "django_rag.answer.chat.OpenAIChat",
                "MODEL": "gpt-4o-mini",
                "BASE_URL": chat_url,
                "API_KEY": "bench",
                "MAX_RETRIES": 0,
            },
            "WEB": {"SCOPE": f"{__name__}.scope", "ASK_RATE": None, "PAGE_SIZE": 10},
        },
    )
    django.setup()
    call_command("migrate", verbosity=0, interactive=False)


def load_data(docs: int) -> dict[str, list[str]]:
    """Index ``docs`` abstracts, alternately per tenant; the titles of each tenant (the questions)."""
    import django_rag as rag

    kb = rag.collection("docs")
    abstracts = load_abstracts()[:docs]
    titles: dict[str, list[str]] = {}
    for number, tenant in enumerate(TENANTS):
        mine = abstracts[number :: len(TENANTS)]
        kb.index(
            [
                rag.RagDocument(f"{tenant}/{cid}", text, {"title": f"{tenant}: {title}"})
                for cid, title, text in mine
            ],
            tenant=tenant,
        )
        titles[tenant] = [title for _, title, _ in mine]
    return titles


def sessions() -> dict[str, str]:
    from django.conf import settings
    from django.contrib.auth.models import User
    from django.test import Client

    cookies = {}
    for tenant in TENANTS:
        client = Client()
        client.force_login(User.objects.create_user(tenant))
        cookies[tenant] = client.cookies[settings.SESSION_COOKIE_NAME].value
    return cookies


def main() -> int:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--clients", default="1,4,8,16", help="client counts, comma-separated")
    parser.add_argument("--requests", type=int, default=30, help="requests per client (3 endpoints in turn)")
    parser.add_argument("--seconds", type=float, default=60.0, help="hard cap per client count")
    parser.add_argument("--docs", type=int, default=1000, help="SciFact abstracts to index")
    parser.add_argument("--timeout", type=float, default=30.0, help="per request")
    parser.add_argument("--chat-delay", type=float, default=0.0, help="seconds per chat answer")
    args = parser.parse_args()
    counts = [int(n) for n in args.clients.split(",")]
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))

    failed = False
    with OpenAICompatibleServer(dimensions=64) as chat, bench_database("django_rag_load") as db:
        configure(db.url, chat.base_url)
        from tests.load_support import endpoint_calls, run_load, serve

        titles = load_data(args.docs)
        cookies = sessions()
        rng = random.Random(13)
        print(f"# bench/load.py: {args.docs} abstracts, {db.server}")
        print(f"# {machine_line()}")
        with serve() as port:
            # The first question imports openai and builds its client: start-up, not load.
            first = endpoint_calls(titles["acme"][0], cookies["acme"], mine="acme:", theirs="globex:")
            warm = run_load(port, [first], seconds=120, timeout=120)
            failed |= bool(warm.errors)
            for clients in counts:
                plans = []
                for client in range(clients):
                    tenant, other = TENANTS[client % 2], TENANTS[(client + 1) % 2]
                    calls = []
                    while len(calls) < args.requests:
                        question = rng.choice(titles[tenant])
                        calls += endpoint_calls(
                            question, cookies[tenant], mine=f"{tenant}:", theirs=f"{other}:"
                        )
                    plans.append(calls[: args.requests])
                chat.reset()
                if args.chat_delay:
                    chat.delay_next(clients * args.requests, args.chat_delay)
                result = run_load(port, plans, seconds=args.seconds, timeout=args.timeout)
                bound = 2 * clients + 2
                delay = f", chat answers after {args.chat_delay:g} s" if args.chat_delay else ""
                print(f"\n## {clients} clients x {args.requests} requests (cap {args.seconds:g} s{delay})")
                for line in result.lines():
                    print(line)
                verdict = "ok" if result.max_connections <= bound else "EXCEEDED"
                print(f"DB connection bound 2 x clients + 2 = {bound}: {verdict}")
                for error in result.errors[:10]:
                    print(f"error: {error}")
                failed |= bool(result.errors) or result.max_connections > bound
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
