"""Every search parameter given a value of the wrong type, through every entry point.

One table: parameter x bad value x entry point. The Python API (``kb.search``, ``kb.ask``) and
the ORM querysets (``nearest``, ``text_search``) raise a ``QueryError`` that names the parameter;
the commands exit with a ``CommandError`` that names it; the JSON endpoints answer 400 with
``field`` set to it; the pages answer 400 with the form's message. Never a TypeError,
AttributeError, KeyError or database error, and no database text in anything a user sees.
Then hypothesis throws arbitrary JSON-ish values at each parameter: a valid result, or a
``QueryError`` naming that parameter. See docs/security/parameters.md.
"""

from __future__ import annotations

import html
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_rag.api import KnowledgeBase
from django_rag.exceptions import QueryError
from django_rag.types import Hit
from django_rag.web.forms import AskForm, RetrievalTestForm, SearchForm
from tests.parameter_support import assert_no_leak

pytest_plugins = ["tests.conftest_parameters"]

NAN, INF = float("nan"), float("inf")
HUGE = 10**5000  # beyond float range, and repr() of it raises (Python's int-to-str digit limit)


class Opaque:
    """No JSON type, and a repr that fails: the error must still be raised, and readable."""

    def __repr__(self) -> str:
        raise RuntimeError("no repr for you")


def nested(depth: int) -> dict[str, Any]:
    """{"a": [{"a": [...]}]} ``depth`` levels deep, built without recursion."""
    value: Any = 1
    for level in range(depth):
        value = {"a": value} if level % 2 else [value]
    return {"a": value}


# The values every parameter is tried with; each parameter says which of them it accepts.
COMMON: dict[str, Any] = {
    "None": None,
    "str": "3",
    "empty-str": "",
    "list": ["x"],
    "dict": {"a": 1},
    "bool": True,
    "float": 2.5,
    "huge-int": HUGE,
    "negative": -1,
    "zero": 0,
    "nan": NAN,
    "inf": INF,
    "bytes": b"x",
    "object": Opaque(),
    "nul": "a\x00b",
    "surrogate": "\ud800",
}
STRINGS = {"str", "empty-str", "nul", "surrogate"}
TEXT = {"None", "str", "empty-str"}  # an optional string parameter takes these


@dataclass(frozen=True)
class Param:
    """A parameter: the COMMON values it accepts (or skips), more bad values, how a message names it."""

    accepts: frozenset[str] = frozenset()
    extra: dict[str, Any] = field(default_factory=dict)
    names: tuple[str, ...] = ()
    # Not "wrong type" cases: a string that names no alias is a ConfigurationError (tested elsewhere).
    skip: frozenset[str] = frozenset()

    def cases(self, name: str, only: set[str] | None = None) -> list[Any]:
        values = {
            key: value
            for key, value in COMMON.items()
            if key not in self.accepts | self.skip and (only is None or key in only)
        }
        values.update(self.extra)
        return [pytest.param(name, value, id=f"{name}={key}") for key, value in values.items()]


def P(
    accepts: set[str] | None = None,
    extra: dict[str, Any] | None = None,
    names: tuple[str, ...] = (),
    skip: set[str] | None = None,
) -> Param:
    return Param(frozenset(accepts or ()), extra or {}, names, frozenset(skip or ()))


VECTORS = {
    "blank": "   ",
    "too-long": "x" * 20_001,
    "empty-vector": [],
    "short-vector": [1.0, 2.0],
    "nan-vector": [NAN] * 64,
    "huge-int-vector": [HUGE] * 64,
    "bool-vector": [True] * 64,
    "bytearray": bytearray(range(1, 65)),
    "memoryview": memoryview(bytes(range(1, 65))),
    "set": {1.0, 2.0},
    "mapping": {1: 1.0},
}
SCOPE_PARAMS = {
    "filters": P(
        {"None", "dict"},
        {
            "nan-value": {"a": NAN},
            "inf-value": {"a": -INF},
            "int-key": {1: "x"},
            "none-key": {None: "x"},
            "bytes-value": {"a": b"x"},
            "object-value": {"a": Opaque()},
            "nul-value": {"a": "x\x00"},
            "nul-key": {"a\x00": 1},
            "surrogate-value": {"a": "\ud800"},
            "surrogate-key": {"\udfff": 1},
            "huge-int-value": {"a": HUGE},
            "nan-in-nested-list": {"a": {"b": [1, NAN]}},
            "set-value": {"a": {1, 2}},
            "too-deep": nested(40),
            "stack-deep": nested(100_000),
        },
    ),
    "tags": P(
        {"None", "list"},
        {
            "string": "manual",
            "int-item": [1],
            "none-item": [None],
            "nul-item": ["a\x00"],
            "surrogate-item": ["\ud800"],
            "nested-item": [["x"]],
            "mapping": {"manual": True},
        },
    ),
    "tenant": P(TEXT),
    "source_prefix": P(TEXT),
    # A relevance between 0 and 1 in every mode.
    "min_score": P({"None", "zero"}, {"string-number": "0.5", "beyond-one": 1.5}),
    "mode": P(extra={"unknown": "fuzzy", "upper-case": "VECTOR", "in-a-list": ["vector"]}),
    "syntax": P(extra={"raw": "raw", "tsquery": "tsquery"}),
    "k": P(extra={"too-big": 1001}),
    # Strings are aliases and True the collection's or "default" reranker: an unknown one is a
    # ConfigurationError (tested in test_rerank*.py), not a QueryError; False turns reranking off.
    "rerank": P({"None"}, skip=STRINGS | {"dict", "bool"}),
    "mmr": P({"bool"}),
    "using": P({"None"}, {"unknown-alias": "nope"}),
}
API_SEARCH = {
    "query": P({"str", "nul"}, VECTORS),
    **SCOPE_PARAMS,
    "candidates": P({"None"}, {"below-k": 4, "too-big": 1001}),
    "rrf_k": P(extra={"too-big": 10_001}),
    "weights": P(
        extra={
            "nan": (1, NAN),
            "inf": (1, INF),
            "one": (1.0,),
            "three": (1, 1, 1),
            "string-pair": "ab",
            "mapping-pair": {"v": 1, "t": 2},
            "set-pair": {1.0, 2.0},
            "bool-pair": (True, 1),
            "negative": (-1, 1),
            "huge-int": (HUGE, 1),
            "strings": ("1", "2"),
        }
    ),
    "mmr_lambda": P({"zero"}, {"above-one": 1.5, "string": "0.5"}),
    "snippets": P({"bool"}),
}
API_ASK = {
    "question": P({"str", "nul"}, {"blank": "   ", "too-long": "x" * 20_001, "vector": [0.5] * 64}),
    **SCOPE_PARAMS,
    "system_prompt": P(TEXT),
    "stream": P({"bool"}),
    "chat": P({"None"}),
}
ORM_NEAREST = {
    "query": P({"str", "nul"}, VECTORS),
    "k": P(extra={"too-big": 1001}),
    "collection": P({"None"}, skip={"str", "empty-str"}),
    "embedder": P({"None"}, skip=STRINGS),
    "space": P(TEXT),
}
ORM_TEXT_SEARCH = {
    "query": P({"str", "nul"}, {"blank": "   ", "too-long": "x" * 20_001}),
    "k": P(extra={"too-big": 1001}),
    "collection": P({"None"}, skip={"str", "empty-str"}),
    "syntax": P(extra={"raw": "raw", "tsquery": "tsquery"}),
}
# call_command(**options) hands values to the command as they are, past argparse's type=.
COMMAND_OPTIONS = {
    "k": P(extra={"too-big": 1001}),
    "mode": P(extra={"unknown": "fuzzy"}),
    "syntax": P({"None"}, {"raw": "raw"}),
    "tenant": P(TEXT),
    "tags": P({"None", "str", "list"}),
    "filter": P(
        extra={
            "no-equals": ["year"],
            "nan": ["a=NaN"],
            "inf": ["a=1e999"],
            "nul-key": ["a\x00=1"],
            "escaped-nul": ['a="\\u0000"'],
            "nested-nan": ['a={"b": NaN}'],
            "stack-deep": ["a=" + "[" * 100_000],
            "int-item": [5],
        },
        names=("filter", "filters"),
    ),
    "min_score": P({"None", "zero"}, names=("min_score", "--min-score")),
    "collection": P(extra={"unknown": "nope"}),
    "database": P({"None"}, {"unknown": "nope"}),
}
COMMAND_TEXT = {"empty": "", "blank": "   ", "too-long": "x" * 20_001, "surrogate": "\ud800"}


def cases(table: dict[str, Param], only: set[str] | None = None) -> list[Any]:
    return [case for name, param in table.items() for case in param.cases(name, only)]


def names(table: dict[str, Param], name: str) -> tuple[str, ...]:
    return table[name].names or (name,)


def assert_names(message: str, candidates: tuple[str, ...]) -> None:
    assert any(re.search(rf"(?<!\w){re.escape(n)}(?!\w)", message) for n in candidates), (
        f"the error does not name {candidates[0]}: {message!r}"
    )
    assert_no_leak(message)


def refused(call: Callable[[], Any], table: dict[str, Param], name: str) -> None:
    with pytest.raises(QueryError) as caught:
        call()
    assert_names(str(caught.value), names(table, name))


# The Python API and the ORM querysets. These tests have no database access (no django_db mark):
# a value that reached a query would fail them with pytest-django's "Database access not allowed".


@pytest.mark.parametrize(("name", "value"), cases(API_SEARCH))
def test_kb_search_refuses_a_bad_value_naming_the_parameter(kb: KnowledgeBase, name: str, value: Any) -> None:
    # Vector mode for the query itself: that is where a vector is a query too.
    options: dict[str, Any] = {"mode": "vector" if name == "query" else "hybrid", name: value}
    query = options.pop("query", "backups")
    refused(lambda: kb.search(query, **options), API_SEARCH, name)


# ask() hands the scope options to search() (tested in full above): a sample of each, and all of its own.
ASK_CASES = cases({name: API_ASK[name] for name in ("question", "system_prompt", "stream", "chat")}) + cases(
    SCOPE_PARAMS, only={"None", "str", "list", "nul", "huge-int", "object"}
)


@pytest.mark.parametrize(("name", "value"), ASK_CASES)
def test_kb_ask_refuses_a_bad_value_naming_the_parameter(kb: KnowledgeBase, name: str, value: Any) -> None:
    # stream=True: ask() searches and stops before the chat model (none is configured here).
    options: dict[str, Any] = {"stream": True, "mode": "hybrid", name: value}
    question = options.pop("question", "when do backups run?")
    refused(lambda: kb.ask(question, **options), API_ASK, name)


@pytest.mark.parametrize(("name", "value"), cases(ORM_NEAREST))
def test_nearest_refuses_a_bad_value_naming_the_parameter(kb: KnowledgeBase, name: str, value: Any) -> None:
    options: dict[str, Any] = {"k": 3, name: value}
    query = options.pop("query", "backups")
    refused(lambda: list(kb.chunks().nearest(query, **options)), ORM_NEAREST, name)


@pytest.mark.parametrize(("name", "value"), cases(ORM_TEXT_SEARCH))
def test_text_search_refuses_a_bad_value_naming_the_parameter(
    kb: KnowledgeBase, name: str, value: Any
) -> None:
    options: dict[str, Any] = {"k": 3, name: value}
    query = options.pop("query", "backups")
    refused(lambda: list(kb.chunks().text_search(query, **options)), ORM_TEXT_SEARCH, name)


# The management commands


def command_refuses(
    command: str, args: list[str], options: dict[str, Any], expected: tuple[str, ...]
) -> None:
    with pytest.raises(CommandError) as caught:
        call_command(command, *args, stdout=StringIO(), stderr=StringIO(), **options)
    assert_names(str(caught.value), expected)


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "value"), cases(COMMAND_OPTIONS))
def test_rag_search_refuses_a_bad_option_value_naming_the_option(
    kb: KnowledgeBase, name: str, value: Any
) -> None:
    options = {"collection": "docs", name: value}
    command_refuses("rag_search", ["backups"], options, names(COMMAND_OPTIONS, name))


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "value"), cases(COMMAND_OPTIONS, only={"None", "list", "nul", "huge-int"}))
def test_rag_ask_refuses_a_bad_option_value_naming_the_option(
    kb: KnowledgeBase, name: str, value: Any
) -> None:
    # The options are rag_search's (management/options.py); a sample of each, through prepare().
    options = {"collection": "docs", name: value}
    command_refuses("rag_ask", ["when do backups run?"], options, names(COMMAND_OPTIONS, name))


@pytest.mark.django_db
@pytest.mark.parametrize(("command", "name"), [("rag_search", "query"), ("rag_ask", "question")])
@pytest.mark.parametrize("value", list(COMMAND_TEXT.values()), ids=list(COMMAND_TEXT))
def test_commands_refuse_unusable_query_text_naming_it(
    kb: KnowledgeBase, command: str, name: str, value: str
) -> None:
    command_refuses(command, [value], {"collection": "docs"}, (name,))


# The views and the JSON endpoints: every value a request carries is a string (or JSON in a body)

SEARCH_PAGE, SEARCH_JSON, ASK_PAGE, ASK_JSON = "/kb/", "/kb/api/search/", "/kb/ask/", "/kb/api/ask/"
QUERY_STRINGS = {"empty": "", "nul": "a\x00b", "too-long": "x" * 1001}
WEB_FIELDS: dict[str, dict[str, str]] = {
    "q": QUERY_STRINGS,
    "k": {
        "word": "abc",
        "decimal": "1.5",
        "zero": "0",
        "negative": "-1",
        "too-big": "51",
        "exponent": "1e3",
        "nan": "nan",
        "inf": "inf",
        "huge": "9" * 5000,
        "json-list": "[1]",
        "bool": "true",
        "nul": "1\x00",
    },
    "mode": {"unknown": "fuzzy", "nul": "hybrid\x00", "json-list": '["vector"]', "number": "1"},
    "tag": {"nul": "a\x00", "too-long": "x" * 201},
    "type": {"nul": "a\x00", "too-long": "x" * 256},
}
PAGE_FIELDS = {**WEB_FIELDS, "page": {"word": "abc", "zero": "0", "negative": "-1", "huge": "9" * 5000}}
ASK_FIELDS = {"q": QUERY_STRINGS, "mode": WEB_FIELDS["mode"]}
# JSON bodies of ask_json: any JSON value, not only strings.
ASK_BODY: dict[str, dict[str, Any]] = {
    "q": {
        "number": 5,
        "float": 1.5,
        "bool": True,
        "list": ["when?"],
        "object": {"q": "when?"},
        "nan": NAN,
        "null": None,
        "empty": "",
        "nul": "a\x00b",
        "surrogate": "\ud800",
    },
    "mode": {"number": 5, "bool": True, "list": ["vector"], "object": {}, "nan": NAN, "unknown": "fuzzy"},
    "collection": {"number": 5, "list": ["docs"], "object": {"name": "docs"}, "bool": False},
    "stream": {"number": 1, "list": [], "object": {}, "nan": NAN},
}


def web_cases(fields: dict[str, dict[str, Any]]) -> list[Any]:
    return [
        pytest.param(name, value, id=f"{name}={key}")
        for name, values in fields.items()
        for key, value in values.items()
    ]


def json_refuses(response: Any, name: str, status: int = 400) -> None:
    assert response.status_code == status, response.content[:300]
    body = response.json()
    assert body["field"] == name
    assert body["status"] == status
    assert body["error"]
    assert_no_leak(response.content.decode())


def page_refuses(response: Any, message: str) -> None:
    assert response.status_code == 400
    page = html.unescape(response.content.decode())
    assert message in page
    assert_no_leak(page)


def form_message(form: Any, name: str) -> str:
    assert not form.is_valid()
    return str(form.errors[name][0])


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "value"), web_cases(WEB_FIELDS))
def test_search_json_answers_400_naming_the_field(site: None, name: str, value: str) -> None:
    response = Client().get(SEARCH_JSON, {"q": "backups", name: value})
    json_refuses(response, name)


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "value"), web_cases(PAGE_FIELDS))
def test_search_page_answers_400_with_the_fields_message(site: None, name: str, value: str) -> None:
    params = {"q": "backups", name: value}
    response = Client().get(SEARCH_PAGE, params)
    page_refuses(response, form_message(SearchForm(params, collections=["docs", "notes"]), name))


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "value"), web_cases(ASK_FIELDS))
def test_ask_page_answers_400_with_the_fields_message(
    site: None, chat_server: Any, name: str, value: str
) -> None:
    params = {"q": "when do backups run?", name: value}
    chat_server.reset()
    response = Client().post(ASK_PAGE, params)
    page_refuses(response, form_message(AskForm(params, collections=["docs", "notes"]), name))
    assert chat_server.requests == []


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "value"), web_cases(ASK_FIELDS))
def test_ask_json_form_post_answers_400_naming_the_field(site: None, name: str, value: str) -> None:
    json_refuses(Client().post(ASK_JSON, {"q": "when do backups run?", name: value}), name)


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "value"), web_cases(ASK_BODY))
def test_ask_json_body_answers_400_naming_the_field(
    site: None, chat_server: Any, name: str, value: Any
) -> None:
    body = json.dumps({"q": "when do backups run?", name: value})  # NaN stays NaN, as a client may send
    chat_server.reset()
    response = Client().post(ASK_JSON, body, content_type="application/json")
    json_refuses(response, name)
    assert chat_server.requests == []


@pytest.mark.django_db
@pytest.mark.parametrize(
    "body",
    ["[" * 100_000, '{"q": ' * 50_000, "not json", "[1, 2]", '"q"', "\udcff"],
    ids=["deep-array", "deep-object", "not-json", "array", "string", "bad-utf8"],
)
def test_ask_json_refuses_a_body_that_is_no_json_object(site: None, body: str) -> None:
    data = body.encode("utf-8", "surrogateescape")
    response = Client().post(ASK_JSON, data, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["error"].startswith("The request body")
    assert_no_leak(response.content.decode())


@pytest.mark.django_db
def test_an_unknown_collection_is_a_404_that_names_the_field_on_both_endpoints(site: None) -> None:
    # Deliberately not 400: "no such collection" and "not yours" must look the same.
    json_refuses(Client().get(SEARCH_JSON, {"q": "backups", "collection": "nope"}), "collection", 404)
    body = json.dumps({"q": "when?", "collection": "nope"})
    json_refuses(Client().post(ASK_JSON, body, content_type="application/json"), "collection", 404)


RETRIEVAL_TEST_FIELDS: dict[str, dict[str, str]] = {
    "q": {"empty": "", "nul": "a\x00", "too-long": "x" * 2001},
    "mode": {"unknown": "fuzzy"},
    "k": {"word": "abc", "zero": "0", "too-big": "101", "decimal": "1.5"},
    "candidates": {"word": "abc", "zero": "0", "too-big": "1001", "below-k": "5"},
    "vector_weight": {"nan": "nan", "inf": "inf", "negative": "-1", "word": "abc", "overflow": "1e999"},
    "text_weight": {"nan": "nan", "too-big": "101", "huge": "9" * 5000},
    "rrf_k": {"zero": "0", "too-big": "10001", "word": "abc"},
    "tenant": {"nul": "acme\x00", "too-long": "x" * 201},
}


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "value"), web_cases(RETRIEVAL_TEST_FIELDS))
def test_the_admin_retrieval_test_answers_400_with_the_fields_message(
    kb: KnowledgeBase, admin_client: Client, name: str, value: str
) -> None:
    params = {
        "q": "backups",
        "mode": "hybrid",
        "k": "10",
        "candidates": "50",
        "vector_weight": "1",
        "text_weight": "1",
        "rrf_k": "60",
        name: value,
    }
    response = admin_client.get(f"/admin/django_rag/collection/{kb.pk}/retrieval-test/", params)
    page_refuses(response, form_message(RetrievalTestForm(params), name))


# Arbitrary JSON-ish values: a valid result, or a QueryError naming the parameter

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.sampled_from([2**1100, -(2**1100), 2**63, -(2**63) - 1])  # beyond float; beyond int64
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=8,
)
FUZZ = settings(
    max_examples=15,
    deadline=None,
    derandomize=True,  # the same examples in every run: CI never meets a new one by chance
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def valid_or_named(call: Callable[[], Any], name: str, check: Callable[[Any], None]) -> None:
    try:
        result = call()
    except QueryError as exc:
        assert_names(str(exc), (name,))
    else:
        check(result)


def hits(result: Any) -> None:
    assert isinstance(result, list)
    assert all(isinstance(hit, Hit) and math.isfinite(hit.score) for hit in result)


SEARCH_FUZZED = [name for name in API_SEARCH if name not in ("query", "rerank", "using")]


@pytest.mark.django_db
@pytest.mark.parametrize("name", SEARCH_FUZZED)
@FUZZ
@given(value=json_values)
def test_kb_search_takes_any_json_value_or_names_the_parameter(
    kb: KnowledgeBase, name: str, value: Any
) -> None:
    options = {"mode": "hybrid", name: value}
    valid_or_named(lambda: kb.search("backups", **options), name, hits)


@pytest.mark.django_db
@FUZZ
@given(value=json_values)
def test_kb_search_takes_any_json_query_or_names_it(kb: KnowledgeBase, value: Any) -> None:
    valid_or_named(lambda: kb.search(value, mode="hybrid"), "query", hits)


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["question", "k", "filters", "tags", "tenant", "min_score", "system_prompt"])
@FUZZ
@given(value=json_values)
def test_kb_ask_takes_any_json_value_or_names_the_parameter(kb: KnowledgeBase, name: str, value: Any) -> None:
    options = {"stream": True, name: value}
    question = options.pop("question", "when do backups run?")

    def check(stream: Any) -> None:
        hits(stream.sources)  # the chat model is only called when the stream is read

    valid_or_named(lambda: kb.ask(question, **options), name, check)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("method", "name"),
    [
        ("nearest", "query"),
        ("nearest", "k"),
        ("text_search", "query"),
        ("text_search", "k"),
        ("text_search", "syntax"),
    ],
)
@FUZZ
@given(value=json_values)
def test_the_querysets_take_any_json_value_or_name_the_parameter(
    kb: KnowledgeBase, method: str, name: str, value: Any
) -> None:
    options: dict[str, Any] = {"k": 3, name: value}
    query = options.pop("query", "backups")

    def check(rows: list[Any]) -> None:
        assert len(rows) <= 3

    valid_or_named(lambda: list(getattr(kb.chunks(), method)(query, **options)), name, check)


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["q", "mode", "stream"])
@FUZZ
@given(value=json_values)
def test_ask_json_takes_any_json_value_or_answers_400_naming_the_field(
    site: None, chat_server: Any, name: str, value: Any
) -> None:
    # "notes" holds nothing: a valid request answers "not enough information" without the chat model.
    body = json.dumps({"q": "when do backups run?", "collection": "notes", "stream": False, name: value})
    response = Client().post(ASK_JSON, body, content_type="application/json")
    content = b"".join(response.streaming_content) if response.streaming else response.content
    assert_no_leak(content.decode())
    if response.status_code != 200:
        assert response.status_code == 400
        assert response.json()["field"] == name
