"""Forms of the pages and endpoints: every parameter a request sends is read through one of these."""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.validators import MaxLengthValidator, MaxValueValidator, MinValueValidator
from django.utils.translation import gettext_lazy as _

from ..search.strategies import MAX_N_QUERIES, STRATEGIES
from ..validation import MAX_K, MAX_RRF_K, unstorable
from .conf import web_settings

__all__ = ["AskForm", "FeedbackForm", "RetrievalTestForm", "SearchForm", "form_error", "strategy_options"]

MODE_CHOICES = [
    ("hybrid", _("Hybrid (meaning and words)")),
    ("vector", _("Meaning (vector)")),
    ("text", _("Words (BM25)")),
]


class _QueryForm(forms.Form):
    """The query, its mode and its collection, with the site's length limit."""

    q = forms.CharField(label=_("Query"), strip=True)
    mode = forms.ChoiceField(label=_("Mode"), choices=MODE_CHOICES, required=False)
    collection = forms.CharField(label=_("Collection"), required=False, max_length=100)
    # The conversation a question continues (one's own, in this scope; checked by the view).
    conversation = forms.IntegerField(
        required=False, min_value=1, max_value=2**63 - 1, widget=forms.HiddenInput()
    )
    # Retrieval strategies (django_rag.search.strategies); the JSON endpoints read them.
    strategy = forms.ChoiceField(
        label=_("Strategy"), choices=[("", "-"), *((s, s) for s in STRATEGIES)], required=False
    )
    n_queries = forms.IntegerField(label=_("Query variants"), required=False)
    compress = forms.BooleanField(label=_("Compress passages"), required=False)
    # "false" turns the collection's reranker (RAG["COLLECTIONS"][...]["RERANKER"]) off for this
    # request; a request can never choose a reranker the site did not give the collection.
    rerank = forms.ChoiceField(choices=[("", "-"), ("true", "true"), ("false", "false")], required=False)

    def __init__(self, *args: Any, collections: list[str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        limit = web_settings()["MAX_QUERY_CHARS"]
        field = self.fields["q"]
        field.error_messages["required"] = _("Enter a query.")
        message = _("The query is too long: at most %(limit_value)d characters, it has %(show_value)d.")
        field.validators.append(MaxLengthValidator(limit, message=message))
        field.widget.attrs.update({"maxlength": str(limit), "autocomplete": "off"})
        self.fields["conversation"].error_messages["invalid"] = _("The conversation must be a number.")
        self.fields["mode"].error_messages["invalid_choice"] = _(
            "Unknown search mode %(value)s; choose hybrid, vector or text."
        )
        self.fields["strategy"].error_messages["invalid_choice"] = _(
            "Unknown strategy %(value)s; choose parent_document or multi_query."
        )
        variants = _("The number of query variants must be a whole number between 1 and %(limit)d.") % {
            "limit": MAX_N_QUERIES
        }
        self.fields["rerank"].error_messages["invalid_choice"] = _("rerank must be true or false.")
        self.fields["n_queries"].error_messages["invalid"] = variants
        self.fields["n_queries"].validators += [
            MinValueValidator(1, message=variants),
            MaxValueValidator(MAX_N_QUERIES, message=variants),
        ]
        names = collections or []
        # A select of the collections this request may search; any other name is refused by the view.
        self.fields["collection"].widget = forms.Select(choices=[(name, name) for name in names])
        if len(names) < 2:
            self.fields["collection"].widget = forms.HiddenInput()

    def clean_q(self) -> str:
        query: str = self.cleaned_data["q"]
        # A JSON body can carry a lone surrogate, which no database text can hold.
        if unstorable(query):
            message = _("The query holds characters that are not valid text.")
            raise forms.ValidationError(message, code="invalid")
        return query


class SearchForm(_QueryForm):
    k = forms.IntegerField(label=_("Results"), required=False)
    tag = forms.CharField(label=_("Tag"), required=False, max_length=200)
    type = forms.CharField(label=_("Content type"), required=False, max_length=255)
    page = forms.IntegerField(label=_("Page"), required=False, min_value=1)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        limit = web_settings()["MAX_K"]
        message = _("k must be between 1 and %(limit)d.") % {"limit": limit}
        self.fields["k"].validators += [
            MinValueValidator(1, message=message),
            MaxValueValidator(limit, message=message),
        ]
        self.fields["k"].error_messages["invalid"] = _("k must be a whole number.")
        self.fields["page"].error_messages["invalid"] = _("The page must be a whole number.")


class AskForm(_QueryForm):
    q = forms.CharField(label=_("Question"), strip=True, widget=forms.Textarea(attrs={"rows": 3}))


class FeedbackForm(forms.Form):
    entry = forms.IntegerField(widget=forms.HiddenInput())
    helpful = forms.TypedChoiceField(
        label=_("Was this answer helpful?"),
        choices=[("1", _("Yes")), ("0", _("No"))],
        coerce=lambda value: value == "1",
        widget=forms.RadioSelect,
    )
    comment = forms.CharField(
        label=_("Comment (optional)"),
        required=False,
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 2}),
    )


class RetrievalTestForm(forms.Form):
    """The admin's retrieval test: one query with every knob the search exposes."""

    q = forms.CharField(label=_("Query"), max_length=2000, strip=True)
    mode = forms.ChoiceField(label=_("Mode"), choices=MODE_CHOICES, initial="hybrid")
    k = forms.IntegerField(label=_("k"), min_value=1, max_value=100, initial=10)
    candidates = forms.IntegerField(
        label=_("Candidates per leg"), min_value=1, max_value=MAX_K, initial=50, required=False
    )
    vector_weight = forms.FloatField(label=_("Vector weight"), min_value=0, max_value=100, initial=1.0)
    text_weight = forms.FloatField(label=_("Text weight"), min_value=0, max_value=100, initial=1.0)
    rrf_k = forms.IntegerField(label=_("RRF k"), min_value=1, max_value=MAX_RRF_K, initial=60)
    tenant = forms.CharField(
        label=_("Tenant"),
        required=False,
        max_length=200,
        help_text=_("Search as this tenant (empty: every tenant you may see)."),
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        k, candidates = data.get("k"), data.get("candidates")
        if k is not None and candidates is not None and candidates < k:
            self.add_error("candidates", _("Candidates must be at least k."))
        return data


def form_error(form: forms.Form) -> tuple[str, str]:
    """The first error of ``form`` as ``(field, message)``, for a JSON error body."""
    for field, errors in form.errors.items():
        return field, str(errors[0])
    return "", ""


def strategy_options(cleaned: dict[str, Any]) -> dict[str, Any]:
    """The ``strategy``, ``n_queries``, ``compress`` and ``rerank`` a valid form asks for, as
    ``kb.search`` takes them (``rerank=false``: without the collection's reranker)."""
    options: dict[str, Any] = {}
    if cleaned.get("strategy"):
        options["strategy"] = cleaned["strategy"]
    if cleaned.get("n_queries") is not None:
        options["n_queries"] = cleaned["n_queries"]
    if cleaned.get("compress"):
        options["compress"] = True
    if cleaned.get("rerank") == "false":
        options["rerank"] = False
    return options
