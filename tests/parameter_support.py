"""What the parameter tests share: the corpus, and what no response or error message may carry."""

from __future__ import annotations

import re

import django_rag as rag

CORPUS = [
    rag.RagDocument(
        "ops/backups",
        "Backups run every night at two. Snapshots are kept for thirty days.",
        {
            "title": "Backups",
            "section": "ops",
            "year": 2024,
            "flag": 1,
            "nullable": None,
            "owner": {"team": "sre", "oncall": True},
            "labels": ["db", "backup"],
        },
        tags=["manual"],
    ),
    rag.RagDocument(
        "ops/restore",
        "To restore one of the backups, open Settings and pick a date.",
        {"title": "Restore", "section": "ops", "year": 2023, "owner": {"team": "sre"}, "labels": ["db"]},
        tags=["faq"],
    ),
    rag.RagDocument(
        "billing/invoices",
        "Invoices are emailed on the first day of each month; card payments retry twice.",
        {"title": "Invoices", "section": "billing", "year": 2024, "flag": True},
        tags=["faq"],
    ),
]

# User values are echoed in messages ("unknown query syntax 'tsquery'"), so only what the
# database or Python would add counts: SQL text, casts, error class names, a traceback.
LEAKS = re.compile(
    r"syntax error|psycopg|Traceback|LINE \d|ProgrammingError|DataError|InternalError|"
    r"django\.db|django_rag_chunk|SELECT |::jsonb|to_tsquery\(|::regconfig"
)


def assert_no_leak(text: str) -> None:
    found = LEAKS.search(text)
    assert found is None, f"database or traceback text reached the user: {found.group(0)!r} in {text[:300]!r}"
