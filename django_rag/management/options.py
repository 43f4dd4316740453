"""Options ``rag_search`` and ``rag_ask`` share: which collection, which mode, which scope."""

from __future__ import annotations

import html
import json
import re
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import CommandError
from django.utils.html import strip_tags
from django.utils.translation import gettext as _

from django_rag.api import KnowledgeBase, collection
from django_rag.conf import rag_settings
from django_rag.exceptions import QueryError
from django_rag.search import MODES, SYNTAXES
from django_rag.search.strategies import MAX_N_QUERIES, STRATEGIES
from django_rag.types import Hit
from django_rag.validation import check_using, shown

__all__ = [
    "add_database_argument",
    "add_search_arguments",
    "database_failed",
    "get_collection",
    "hit_label",
    "one_line",
    "search_options",
]

_SPACE = re.compile(r"\s+")
# ts_headline's highlight markers (and any other control character) have no place on a terminal line.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def add_database_argument(parser: ArgumentParser) -> None:
    parser.add_argument(
        "--database",
        help="Database alias of the knowledge base (default: RAG['DATABASE'], which defaults to 'default').",
    )


def add_search_arguments(parser: ArgumentParser, *, default_k: int) -> None:
    add_database_argument(parser)
    parser.add_argument(
        "--collection",
        "-c",
        help="Collection name (default: the only collection declared in RAG['COLLECTIONS']).",
    )
    parser.add_argument("-k", type=int, default=default_k, help=f"Number of hits (default {default_k}).")
    parser.add_argument("--mode", default="vector", help=f"Search mode: {', '.join(MODES)} (default vector).")
    parser.add_argument("--syntax", help=f"Text query syntax in text and hybrid mode: {', '.join(SYNTAXES)}.")
    parser.add_argument("--tenant", help="Only documents of this tenant.")
    parser.add_argument("--tags", help="Comma-separated tags; a document matches if it has any of them.")
    parser.add_argument(
        "--filter",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Metadata equality filter; repeatable. VALUE is read as JSON when it parses (2024, true), "
        "else as a string.",
    )
    parser.add_argument(
        "--min-score",
        type=float,
        help="Drop hits whose relevance (0 to 1, in every mode) is below this (default RAG['MIN_SCORE']).",
    )
    parser.add_argument(
        "--strategy",
        help=f"Retrieval strategy: {', '.join(STRATEGIES)} (multi_query needs a language model: RAG['CHAT'])",
    )
    parser.add_argument(
        "--n-queries",
        type=int,
        help=f"multi_query: how many variants the chat model writes (1 to {MAX_N_QUERIES}, default 3).",
    )
    parser.add_argument(
        "--compress",
        action="store_true",
        help="Cut each passage to the sentences that answer (picked by the chat model, else by embedding).",
    )
    reranking = parser.add_mutually_exclusive_group()
    reranking.add_argument(
        "--rerank",
        metavar="ALIAS",
        help="Rerank with this RAG['RERANKERS'] alias (default: the collection's).",
    )
    reranking.add_argument(
        "--no-rerank", action="store_true", help="Do not rerank, even where the collection names a RERANKER."
    )
    parser.add_argument("--json", action="store_true", help="Machine-readable output.")


def search_options(options: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments for ``search``/``ask`` from parsed command options."""
    kwargs: dict[str, Any] = {"k": options["k"], "mode": options["mode"]}
    if options["tenant"] is not None:
        kwargs["tenant"] = options["tenant"]
    tags = options["tags"]
    if isinstance(tags, str):
        tags = [tag.strip() for tag in tags.split(",") if tag.strip()]
        if not tags:
            raise CommandError(_("--tags needs at least one tag, e.g. --tags manual,faq"))
    if tags is not None:
        kwargs["tags"] = tags  # call_command(tags=[...]) passes a list on; search() checks it
    items = options["filter"]
    if isinstance(items, str):
        items = [items]  # call_command(filter="year=2024"): one KEY=VALUE, not its characters
    if not isinstance(items, list | tuple):
        raise CommandError(_("--filter takes KEY=VALUE strings, got %(value)s") % {"value": shown(items)})
    if items:
        kwargs["filters"] = dict(_parse_filter(item) for item in items)
    if options["min_score"] is not None:
        kwargs["min_score"] = options["min_score"]
    if options["syntax"] is not None:
        kwargs["syntax"] = options["syntax"]
    if options.get("strategy") is not None:
        kwargs["strategy"] = options["strategy"]
    if options.get("n_queries") is not None:
        kwargs["n_queries"] = options["n_queries"]
    if options.get("compress"):
        kwargs["compress"] = options["compress"]
    if options.get("no_rerank"):
        kwargs["rerank"] = False
    elif options.get("rerank") is not None:
        kwargs["rerank"] = options["rerank"]
    return kwargs


def _parse_filter(item: Any) -> tuple[str, Any]:
    if not isinstance(item, str):
        raise CommandError(_("--filter takes KEY=VALUE strings, got %(value)s") % {"value": shown(item)})
    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise CommandError(_("--filter takes KEY=VALUE, got %(item)r") % {"item": item})
    try:
        value = json.loads(raw)
    except ValueError:
        value = raw
    except RecursionError:
        message = _("--filter %(key)s: the JSON value nests too deeply") % {"key": key.strip()}
        raise CommandError(message) from None
    return key.strip(), value


def database_failed(exc: Exception) -> CommandError:
    """A failed statement as one line: the database's message, without the SQL it quotes (LINE 3: ...)."""
    text = str(exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    return CommandError(_("the database failed: %(reason)s") % {"reason": first})


def get_collection(name: str | None, using: str | None = None) -> KnowledgeBase:
    """The named collection, or the only declared one; a CommandError names the choices otherwise."""
    if name is None:
        declared = sorted(rag_settings.COLLECTIONS)
        if len(declared) != 1:
            raise CommandError(
                _("pass --collection NAME (declared collections: %(names)s)")
                % {"names": ", ".join(declared) or "none"}
            )
        name = declared[0]
    try:
        using = check_using(using)
    except QueryError as exc:
        raise CommandError(str(exc).replace("using", "--database", 1)) from None
    return collection(name, using=using)


def one_line(text: str, width: int = 100, *, markup: bool = False) -> str:
    """``text`` on one terminal line, cut at ``width``; ``markup=True`` for HTML (search snippets)."""
    if markup:
        text = html.unescape(strip_tags(text))
    text = _SPACE.sub(" ", _CONTROL.sub("", text)).strip()
    return text if len(text) <= width else text[: width - 1].rstrip() + "…"


def hit_label(hit: Hit) -> str:
    """``title, page p`` for a hit, as the prompt numbers it."""
    title = (hit.document.title if hit.document is not None else "") or hit.source_id
    return title if hit.page is None else _("%(title)s, page %(page)s") % {"title": title, "page": hit.page}
