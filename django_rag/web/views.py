"""The pages: search, ask, a hit's source, answer feedback. JSON endpoints are in ``web.api``.

Every view checks access and reads its scope in ``RagView.dispatch`` (``service.check_access``);
templates live under ``django_rag/templates/django_rag/`` so a site overrides them by name.
"""

from __future__ import annotations

import mimetypes
import posixpath
from typing import Any, ClassVar
from urllib.parse import urlencode

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import TooManyFieldsSent
from django.core.paginator import Paginator
from django.http import FileResponse, HttpRequest, HttpResponse, HttpResponseRedirect
from django.http.response import HttpResponseBase
from django.shortcuts import render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.safestring import mark_safe
from django.utils.translation import gettext as _
from django.views import View

from ..conf import rag_settings
from ..exceptions import RagError
from ..ingest.registration import registration_for
from ..models import Chunk, Document
from ..search.grouping import group_hits
from .answering import ANSWER_MARKER, Question, answer_context, finish, question_for, stream_page
from .conf import web_settings
from .forms import AskForm, FeedbackForm, SearchForm
from .headers import protect
from .middleware import UNAVAILABLE, unavailable_response
from .passages import document_passages
from .querylog import finish_ask, owned_entry, rate_answer
from .ratelimit import retry_after
from .results import facets, filter_hits, result_for, shown_passages
from .scope import Scope, visible_collections
from .service import (
    WebError,
    answer_failure,
    ask_from_search,
    check_access,
    json_response,
    pick_collection,
    scoped_search,
    start_ask,
)

__all__ = ["AskView", "FeedbackView", "RagView", "SearchView", "SourceView"]

# Served in the browser; any other uploaded type is a download in a sandbox, never a page of the site.
_INLINE_TYPES = {"application/pdf", "text/plain"}


class RagView(View):
    """Access (login, permission, scope) for every page and endpoint; errors as pages or JSON."""

    permission: ClassVar[str] = "search"  # the RAG["WEB"]["PERMISSIONS"] key
    json: ClassVar[bool] = False
    scope: Scope

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        response: HttpResponseBase
        try:
            self.scope = check_access(request, self.permission)
            response = super().dispatch(request, *args, **kwargs)
        except WebError as error:
            response = self.error_response(error)
        except TooManyFieldsSent:
            response = self.error_response(WebError(400, _("This request has too many parameters.")))
        except UNAVAILABLE as exc:
            # The user, the session or a query met the database down: 503, not a 500 page.
            response = unavailable_response(request, exc)
        return protect(request, response)

    def error_response(self, error: WebError, context: dict[str, Any] | None = None) -> HttpResponse:
        response: HttpResponse
        if error.status == 401 and not self.json:
            return redirect_to_login(self.request.get_full_path())
        if self.json:
            body = {"error": error.message, "status": error.status, "field": error.field or None}
            response = json_response(body, status=error.status)
        else:
            template = getattr(self, "template_name", "django_rag/error.html")
            page = {"error": error.message, "status": error.status, **(context or {})}
            if "form" not in page:
                template = "django_rag/error.html"
            response = render(self.request, template, self.base_context(page), status=error.status)
        for name, value in error.headers.items():
            response[name] = value
        return response

    def base_context(self, context: dict[str, Any]) -> dict[str, Any]:
        """The context of every page; a site's subclass may add to it."""
        return context


class SearchView(RagView):
    """GET ``q``, ``mode``, ``collection``, ``tag``, ``type``, ``page``: the hits, faceted and paged."""

    template_name = "django_rag/search.html"

    def get(self, request: HttpRequest) -> HttpResponseBase:
        collections = visible_collections(request)
        bound = "q" in request.GET
        form = SearchForm(request.GET if bound else None, collections=collections)
        context: dict[str, Any] = {"form": form}
        if not bound:
            return render(request, self.template_name, self.base_context(context))
        if not form.is_valid():
            return render(request, self.template_name, self.base_context(context), status=400)
        data = form.cleaned_data
        try:
            return self._results(request, data, context)
        except WebError as error:
            return self.error_response(error, context)

    def _answers(self, request: HttpRequest, refined: bool) -> bool:
        """Whether this search gets an answer: on its first page, for users who may ask."""
        settings = web_settings()
        permission = settings["PERMISSIONS"].get("ask")
        allowed = not permission or request.user.has_perm(permission)
        return bool(settings["SEARCH_ANSWERS"]) and allowed and not refined

    def _results(
        self, request: HttpRequest, data: dict[str, Any], context: dict[str, Any]
    ) -> HttpResponseBase:
        settings = web_settings()
        kb = pick_collection(request, data["collection"])
        page_number = data["page"] or 1
        refined = page_number > 1 or bool(data["tag"] or data["type"])
        answering = self._answers(request, refined)
        question: Question | None = None
        if answering:
            question = question_for(request, self.scope, data["q"], data["conversation"])
        query = question.standalone if question is not None else data["q"]
        searched = scoped_search(
            request, self.scope, kb, query, data["mode"], k=settings["MAX_RESULTS"], log=not refined
        )
        hits = filter_hits(searched.hits, tag=data["tag"], content_type=data["type"])
        # One entry per document: pages walk documents, each with its other passages folded in.
        groups = group_hits(hits)
        paginator = Paginator(groups, settings["PAGE_SIZE"])
        if page_number > max(paginator.num_pages, 1):
            raise WebError(404, _("There is no page %(page)d of these results.") % {"page": page_number})
        page = paginator.page(page_number) if groups else None
        offset = (page.start_index() - 1) if page is not None else 0
        params = {"q": searched.query, "mode": searched.mode, "collection": kb.name}
        refine = {**params, **{key: data[key] for key in ("tag", "type") if data[key]}}
        context.update(
            kb=kb,
            query=data["q"],
            searched_for=query if query != data["q"] else "",
            answering=answering,
            answer_marker=mark_safe(ANSWER_MARKER),  # a comment of our own, replaced by the answer
            mode=searched.mode,
            page=page,
            results=[
                result_for(group.best, offset + n, searched.query, others=group.others)
                for n, group in enumerate(shown_passages(list(page or []), searched.query, kb), 1)
            ],
            total=len(groups),
            facets=facets(searched.hits),
            tag=data["tag"],
            type=data["type"],
            base_query=urlencode(params),
            page_query=urlencode(refine),
        )
        if question is None or not searched.hits:
            # No hit, no answer to give: "no good matches" says it (and the model is not called).
            context["answering"] = False
            return render(request, self.template_name, self.base_context(context))
        wait = retry_after(request)
        if wait is not None:
            context["answer_error"] = rate_limited(wait).message
            return render(request, self.template_name, self.base_context(context))
        asking = ask_from_search(request, self.scope, searched, question.text, web_settings()["ASK_K"])
        html = render_to_string(self.template_name, self.base_context(context), request=request)
        return stream_page(request, html, self.scope, asking, question)


class AskView(RagView):
    """GET: the question form. POST (CSRF): the answer with ``[n]`` citations, in one response.

    With JavaScript on, ``static/django_rag/ask.js`` posts the same form to ``ask_json`` instead
    and streams the answer into the page.
    """

    template_name = "django_rag/ask.html"
    permission = "ask"

    def get(self, request: HttpRequest) -> HttpResponse:
        form = AskForm(collections=visible_collections(request))
        return render(request, self.template_name, self.base_context({"form": form}))

    def post(self, request: HttpRequest) -> HttpResponse:
        form = AskForm(request.POST, collections=visible_collections(request))
        context: dict[str, Any] = {"form": form}
        wait = retry_after(request)
        if wait is not None:
            return self.error_response(rate_limited(wait), context)
        if not form.is_valid():
            return render(request, self.template_name, self.base_context(context), status=400)
        data = form.cleaned_data
        try:
            kb = pick_collection(request, data["collection"])
            question = question_for(request, self.scope, data["q"], data["conversation"])
            asking = start_ask(
                request, self.scope, kb, data["q"], data["mode"], search_for=question.standalone
            )
        except WebError as error:
            return self.error_response(error, context)
        try:
            answer = asking.stream.answer
        except RagError as exc:
            finish_ask(asking.entry, answer="", latency_ms=asking.elapsed_ms)
            return self.error_response(answer_failure(request, exc), context)
        conversation = finish(request, self.scope, asking, question, answer.text)
        context.update(
            answer_context(asking.stream.sources, answer.text, asking.entry, conversation, asking.question)
        )
        return render(request, self.template_name, self.base_context(context))


def rate_limited(wait: int) -> WebError:
    message = _("You have asked too many questions. Please wait %(seconds)d seconds and try again.") % {
        "seconds": wait
    }
    return WebError(429, message, headers={"Retry-After": str(wait)})


class SourceView(RagView):
    """A hit's source: an uploaded file through its storage, a web page's URL, or the stored text.

    Links to a passage of stored text carry ``?passage=N#passage-N``: the page shows each passage
    once and marks passage N (CSS ``:target`` scrolls to and highlights it; the parameter marks
    it without the fragment). Links into files carry ``#page=N``; browsers keep the fragment
    across the redirect and PDF viewers open the page. Documents outside the request's scope,
    now, are a 404 like missing ones.
    """

    permission = "source"

    def get(self, request: HttpRequest, pk: int) -> HttpResponseBase:
        document = (
            Document.objects.using(rag_settings.DATABASE).select_related("collection").filter(pk=pk).first()
        )
        if (
            document is None
            or document.collection.name not in visible_collections(request)
            or not self.scope.allows(document)
        ):
            raise WebError(404, _("This document does not exist or you may not open it."))
        served = self._file(document)
        if served is not None:
            return served
        if document.source.startswith(("https://", "http://")):
            return HttpResponseRedirect(document.source)
        return self._text(request, document)

    def _file(self, document: Document) -> HttpResponseBase | None:
        model = document.owner_type.model_class() if document.owner_type_id and document.owner_type else None
        registration = registration_for(model) if model is not None else None
        if registration is None or registration.file_field is None:
            return None
        row = model._default_manager.filter(pk=document.owner_id).first() if model else None
        fieldfile = getattr(row, registration.file_field, None) if row is not None else None
        if not fieldfile or not fieldfile.name:
            return None
        name = fieldfile.name
        content_type = document.content_type or mimetypes.guess_type(name)[0] or "application/octet-stream"
        inline = content_type in _INLINE_TYPES
        # The storage API, never a path: S3 and other remote storages stream the same way.
        handle = fieldfile.storage.open(name, "rb")
        response = FileResponse(
            handle,
            as_attachment=not inline,
            filename=posixpath.basename(name),
            content_type=f"{content_type}; charset=utf-8"
            if content_type.startswith("text/")
            else content_type,
        )
        # A download runs nothing in the site's origin (sandbox); a PDF shown inline keeps the
        # browser's viewer working, which the pages' policy (object-src 'none') could block.
        response["Content-Security-Policy"] = "frame-ancestors 'none'" if inline else "sandbox"
        response["X-Content-Type-Options"] = "nosniff"
        return response

    def _text(self, request: HttpRequest, document: Document) -> HttpResponse:
        kb = pick_collection(request, document.collection.name)
        try:
            space = kb.space
        except RagError:
            space = None
        chunks = Chunk.objects.using(kb.using).filter(document=document).defer("embedding", "search_vector")
        if space is not None:
            chunks = chunks.filter(space=space)
        current = _passage_param(request)
        pages: list[dict[str, Any]] = []
        for passage in document_passages(chunks.order_by("index"), current):
            if not pages or pages[-1]["page"] != passage.page:
                pages.append({"page": passage.page, "passages": []})
            pages[-1]["passages"].append(passage)
        context = {"document": document, "pages": pages, "current": current}
        return render(request, "django_rag/document.html", self.base_context(context))


def _passage_param(request: HttpRequest) -> int | None:
    """``?passage=N`` (a chunk index) when it is one; anything else opens the document at its top."""
    value = request.GET.get("passage", "")
    return int(value) if value.isdigit() and len(value) < 10 else None


class FeedbackView(RagView):
    """POST (CSRF) ``entry``, ``helpful`` and an optional ``comment`` on one's own answer."""

    permission = "ask"

    def post(self, request: HttpRequest) -> HttpResponse:
        form = FeedbackForm(request.POST)
        wants_json = "application/json" in request.headers.get("Accept", "")
        if not form.is_valid():
            if wants_json:
                return json_response(
                    {"error": _("Choose whether the answer helped."), "status": 400}, status=400
                )
            raise WebError(400, _("Choose whether the answer helped."))
        entry = owned_entry(request, form.cleaned_data["entry"])
        if entry is None:
            raise WebError(404, _("This answer does not exist or is not yours to rate."))
        rate_answer(entry, helpful=form.cleaned_data["helpful"], comment=form.cleaned_data["comment"])
        if wants_json:
            return json_response({"entry": entry.pk, "feedback": entry.feedback})
        context = {"entry": entry, "ask_url": reverse("django_rag:ask")}
        return render(request, "django_rag/feedback.html", self.base_context(context))
