"""An answer as the pages and endpoints give it: its conversation, its sources in citation order,
and the search page's answer, streamed into the page above the results in the same response.

The search page renders its whole template first (results included) with a marker where the
answer goes, then sends everything before the marker, the answer as it is written (a draft of
escaped text), the finished answer, and the rest. No script is needed: the browser shows the
page as it arrives and ``rag.css`` hides the draft once the finished answer follows it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest, StreamingHttpResponse
from django.template.loader import render_to_string
from django.utils.html import escape

from ..answer import cited_numbers
from ..exceptions import RagError
from ..types import Hit
from .conversations import NOT_YOURS, begin_turn, owned_conversation, record_turn
from .forms import FeedbackForm
from .models import Conversation
from .querylog import finish_ask
from .results import Result, render_answer, result_for
from .scope import Scope
from .service import Asking, WebError, answer_failure

__all__ = [
    "ANSWER_MARKER",
    "Question",
    "answer_context",
    "finish",
    "question_for",
    "stream_page",
]

ANSWER_MARKER = "<!--django-rag:answer-->"


@dataclass
class Question:
    """A question as asked, as searched for (standalone), and the conversation it continues."""

    text: str
    standalone: str
    conversation: Conversation | None


def question_for(request: HttpRequest, scope: Scope, text: str, conversation_id: int | None) -> Question:
    """The question of a request; a conversation id that is not the request's own is a 404."""
    conversation = None
    if conversation_id is not None:
        conversation = owned_conversation(request, scope, conversation_id)
        if conversation is None:
            raise WebError(404, str(NOT_YOURS), field="conversation")
    return Question(text=text, standalone=begin_turn(text, conversation), conversation=conversation)


def _numbered(sources: list[Hit], question: str = "") -> list[Result]:
    """The sources numbered as the prompt numbered them; each ``url`` opens its passage."""
    return [result_for(hit, number, question) for number, hit in enumerate(sources, 1)]


def answer_context(
    sources: list[Hit], text: str, entry: Any, conversation: Any = None, question: str = ""
) -> dict[str, Any]:
    """What ``django_rag/_answer.html`` renders: the answer, the sources it cites in the order it
    first cites them, the other passages it was given, the feedback form, the conversation."""
    results = _numbered(sources, question)
    order = cited_numbers(text, len(results))
    return {
        "answer_html": render_answer(text, results),
        "sources": [results[number - 1] for number in order],
        "other_sources": [result for result in results if result.number not in order],
        "not_enough": not results,
        "entry": entry,
        "conversation": conversation,
        "feedback_form": FeedbackForm(initial={"entry": entry.pk}) if entry is not None else None,
    }


def finish(
    request: HttpRequest, scope: Scope, asking: Asking, question: Question, text: str
) -> Conversation | None:
    """Log the answer and add it to its conversation (started here for a first question)."""
    finish_ask(asking.entry, answer=text, latency_ms=asking.elapsed_ms)
    results = _numbered(asking.stream.sources)
    cited = [results[n - 1] for n in cited_numbers(text, len(results))]
    return record_turn(
        request,
        scope,
        collection=asking.kb.name,
        conversation=question.conversation,
        question=question.text,
        standalone=question.standalone,
        answer=text,
        sources=[
            {
                "number": r.number,
                "title": r.title,
                "url": r.url,
                "document": r.document_id,
                "chunk": r.chunk_id,
            }
            for r in cited
        ],
        entry=asking.entry,
    )


def stream_page(
    request: HttpRequest, html: str, scope: Scope, asking: Asking, question: Question
) -> StreamingHttpResponse:
    """``html`` (a rendered page holding ``ANSWER_MARKER``) with the answer streamed in at the marker."""
    head, _marker, tail = html.partition(ANSWER_MARKER)

    def body() -> Iterator[str]:
        yield head
        yield from _answer_html(request, scope, asking, question)
        yield tail

    response = StreamingHttpResponse(body(), content_type="text/html; charset=utf-8")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx would hold the stream back otherwise
    return response


def _answer_html(request: HttpRequest, scope: Scope, asking: Asking, question: Question) -> Iterator[str]:
    yield '<div class="rag-answer-draft" aria-hidden="true"><p>'
    try:
        for delta in asking.stream:
            yield str(escape(delta))
        answer = asking.stream.answer
    except RagError as exc:
        finish_ask(asking.entry, answer="", latency_ms=asking.elapsed_ms)
        error = answer_failure(request, exc)
        yield "</p></div>"
        yield render_to_string("django_rag/_answer_error.html", {"error": error.message}, request=request)
        return
    yield "</p></div>"
    conversation = finish(request, scope, asking, question, answer.text)
    context = answer_context(asking.stream.sources, answer.text, asking.entry, conversation, asking.question)
    yield render_to_string("django_rag/_answer.html", context, request=request)
