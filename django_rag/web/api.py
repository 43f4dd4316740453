"""JSON endpoints: ``search_json`` (GET) and ``ask_json`` (POST, CSRF; streamed as NDJSON on request).

Same access, scope and validation as the pages. Errors are ``{"error": message, "status": n,
"field": name | null}`` with that HTTP status; never a traceback or SQL.

``ask_json`` with ``stream=1`` answers ``application/x-ndjson``, one JSON object per line:
``{"type": "sources", "sources": [...]}`` first, then ``{"type": "delta", "text": ...}`` as the
model writes, then ``{"type": "done", "answer", "citations", "entry", "conversation", "html"}``
or ``{"type": "error", "message", "status"}``.

``ask_json`` takes an optional ``conversation`` (an id of one's own conversation, in the same
scope) and returns the conversation the answer joined (started by a first question).
``conversations_json`` lists one's conversations; ``conversation_json`` gives one (GET) or
deletes it (DELETE).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, ClassVar

from django.http import HttpRequest, HttpResponse, QueryDict, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.template.loader import render_to_string
from django.utils.translation import gettext as _

from ..answer import cited_numbers
from ..exceptions import RagError
from .answering import Question, answer_context, finish, question_for
from .conf import web_settings
from .forms import AskForm, SearchForm, form_error, strategy_options
from .querylog import finish_ask
from .ratelimit import retry_after
from .results import facets, filter_hits, grouped_results, result_for
from .scope import visible_collections
from .service import (
    Asking,
    WebError,
    answer_failure,
    json_response,
    pick_collection,
    scoped_search,
    start_ask,
)
from .views import RagView, rate_limited

__all__ = ["AskJsonView", "SearchJsonView"]

_FIELDS = (*AskForm.base_fields, "stream")


class _JsonView(RagView):
    json: ClassVar[bool] = True

    def invalid(self, form: Any) -> HttpResponse:
        field, message = form_error(form)
        raise WebError(404 if field == "collection" else 400, message, field=field)


class SearchJsonView(_JsonView):
    """GET ``q``, ``collection``, ``mode``, ``k``, ``tag``, ``type`` (and the retrieval ``strategy``,
    ``n_queries``, ``compress``, as ``kb.search`` takes them): the top ``k`` documents and facets.

    Each result is a document: its best passage (``snippet``: plain text, ``highlights``: the
    ``[start, end)`` offsets of the query's words in it, in code points), its ``relevance``
    and, under ``more``, its other matching passages in the same shape. ``count`` is 0 when
    nothing reaches the relevance cutoff (``RAG["MIN_SCORE"]``).
    """

    def get(self, request: HttpRequest) -> HttpResponse:
        form = SearchForm(request.GET, collections=visible_collections(request))
        if not form.is_valid():
            return self.invalid(form)
        data = form.cleaned_data
        settings = web_settings()
        k = data["k"] or settings["PAGE_SIZE"]
        kb = pick_collection(request, data["collection"])
        searched = scoped_search(
            request,
            self.scope,
            kb,
            data["q"],
            data["mode"],
            k=max(k, settings["MAX_RESULTS"]),
            strategy=strategy_options(data),
        )
        hits = filter_hits(searched.hits, tag=data["tag"], content_type=data["type"])
        results = grouped_results(hits, searched.query, collection=kb, k=k)
        found = facets(searched.hits)
        return json_response(
            {
                "query": searched.query,
                "collection": kb.name,
                "mode": searched.mode,
                "count": len(results),
                "results": [result.as_json() for result in results],
                "facets": {"tags": found.tags, "content_types": found.types},
            }
        )


class AskJsonView(_JsonView):
    """POST ``q``, ``collection``, ``mode``, ``strategy``, ``n_queries``, ``compress`` (form-encoded or
    a JSON body), ``stream``."""

    permission = "ask"

    def post(self, request: HttpRequest) -> HttpResponseBase:
        data = self._data(request)
        wait = retry_after(request)
        if wait is not None:
            raise rate_limited(wait)
        form = AskForm(data, collections=visible_collections(request))
        if not form.is_valid():
            return self.invalid(form)
        cleaned = form.cleaned_data
        kb = pick_collection(request, cleaned["collection"])
        question = question_for(request, self.scope, cleaned["q"], cleaned["conversation"])
        asking = start_ask(
            request,
            self.scope,
            kb,
            cleaned["q"],
            cleaned["mode"],
            search_for=question.standalone,
            strategy=strategy_options(cleaned),
        )
        if str(data.get("stream", "")).lower() in ("1", "true", "yes"):
            response = StreamingHttpResponse(
                self._events(request, asking, question), content_type="application/x-ndjson"
            )
            response["Cache-Control"] = "no-cache"
            response["X-Accel-Buffering"] = "no"  # nginx would hold the stream back otherwise
            return response
        try:
            answer = asking.stream.answer
        except RagError as exc:
            finish_ask(asking.entry, answer="", latency_ms=asking.elapsed_ms)
            raise answer_failure(request, exc) from exc
        conversation = finish(request, self.scope, asking, question, answer.text)
        sources = _sources(asking)
        return json_response(
            {
                "answer": answer.text,
                "citations": cited_numbers(answer.text, len(sources)),
                "sources": sources,
                "entry": asking.entry.pk if asking.entry is not None else None,
                "conversation": conversation.pk if conversation is not None else None,
                "searched_for": question.standalone,
            }
        )

    def _data(self, request: HttpRequest) -> QueryDict | dict[str, Any]:
        if request.content_type != "application/json":
            return request.POST
        try:
            body = json.loads(request.body or b"{}")
        except (ValueError, RecursionError) as exc:  # RecursionError: arrays nested thousands deep
            raise WebError(400, _("The request body is not valid JSON.")) from exc
        if not isinstance(body, dict):
            raise WebError(400, _("The request body must be a JSON object."))
        data: dict[str, str] = {}
        for key in _FIELDS:
            value = body.get(key)
            if key == "stream" and isinstance(value, bool):
                value = "true" if value else ""
            if (
                key in ("conversation", "n_queries")
                and isinstance(value, int)
                and not isinstance(value, bool)
            ):
                value = str(value)
            if key == "compress" and isinstance(value, bool):
                value = "true" if value else ""
            if value is None:
                continue
            # Form fields take strings; serialising anything else would read {"q": 5} as the question "5".
            if not isinstance(value, str):
                if key == "stream":
                    raise WebError(400, _("stream must be true or false."), field=key)
                raise WebError(400, _("%(field)s must be a string.") % {"field": key}, field=key)
            data[key] = value
        return data

    def _events(self, request: HttpRequest, asking: Asking, question: Question) -> Iterator[bytes]:
        sources = _sources(asking)
        yield _line({"type": "sources", "sources": sources})
        try:
            for delta in asking.stream:
                yield _line({"type": "delta", "text": delta})
            answer = asking.stream.answer
        except RagError as exc:
            finish_ask(asking.entry, answer="", latency_ms=asking.elapsed_ms)
            error = answer_failure(request, exc)
            yield _line({"type": "error", "message": error.message, "status": error.status})
            return
        conversation = finish(request, self.scope, asking, question, answer.text)
        html = render_to_string(
            "django_rag/_answer.html",
            answer_context(asking.stream.sources, answer.text, asking.entry, conversation, asking.question),
            request=request,
        )
        yield _line(
            {
                "type": "done",
                "answer": answer.text,
                "citations": cited_numbers(answer.text, len(sources)),
                "entry": asking.entry.pk if asking.entry is not None else None,
                "conversation": conversation.pk if conversation is not None else None,
                "html": html,
            }
        )


def _sources(asking: Asking) -> list[dict[str, Any]]:
    """The numbered passages as JSON; ``url`` opens the source at the passage."""
    return [result_for(hit, n, asking.question).as_json() for n, hit in enumerate(asking.stream.sources, 1)]


def _line(event: dict[str, Any]) -> bytes:
    return json.dumps(event).encode() + b"\n"
