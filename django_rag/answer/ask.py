"""``ask()``: answer a question from a collection, citing the passages it used.

Search finds the passages; they go to the chat model as a numbered context block next to the
question, under rules that make the model answer only from them, cite them as ``[n]`` and
treat them as data, never as instructions (see ``django_rag.answer.prompts``). ``[n]`` markers in the
reply map back to the hits. When search finds nothing (or nothing above ``min_score``) the
chat model is not called at all.

Three layers, for callers that need more than ``ask``: ``prepare()`` searches and builds a
``Prompt`` (``sources[n - 1]`` is passage ``[n]``), ``answer_prompt()`` asks the model, and
``AnswerStream`` streams it.

The request's database connections are closed before a chat model is called (and reopened by
the next query), so a slow model never holds one; a backend that quotes passages
(``ExtractiveChat``) answers in-process and keeps them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal, Unpack, overload

from ..conf import rag_settings
from ..embedders import Embedder
from ..exceptions import QueryError, RagError
from ..models import Collection
from ..search import SearchOptions, search
from ..types import Answer, Completion, Hit
from ..validation import check_bool, check_k, check_optional_text, check_query_text, shown
from .chat import ChatBackend, Message, get_chat
from .deadline import release_connections
from .extractive import PassageQuoter
from .prompts import NOT_ENOUGH_INFORMATION, build_messages, check_template, cited_numbers

__all__ = [
    "NOT_ENOUGH_INFORMATION",
    "AnswerStream",
    "Prompt",
    "answer_prompt",
    "ask",
    "check_answer_options",
    "prepare",
    "prompt_for",
]


@dataclass
class Prompt:
    """A question ready for the chat model: ``sources[n - 1]`` is passage ``[n]`` of ``messages``."""

    question: str
    sources: list[Hit]
    messages: list[Message] = field(default_factory=list)
    # The collection's embedder, for a backend that scores sentences by meaning (ExtractiveChat).
    embedder: Embedder | None = None

    def cited(self, text: str) -> list[tuple[int, Hit]]:
        """``(n, hit)`` for each valid ``[n]`` in ``text``, de-duplicated, in order of first mention."""
        return [(number, self.sources[number - 1]) for number in cited_numbers(text, len(self.sources))]

    def citations(self, text: str) -> list[Hit]:
        return [hit for _, hit in self.cited(text)]


def prepare(
    collection: Collection | str,
    question: str,
    *,
    k: int = 6,
    mode: str = "vector",
    system_prompt: str | None = None,
    prompt: str | None = None,
    system: str | None = None,
    using: str | None = None,
    **options: Unpack[SearchOptions],
) -> Prompt:
    """Search ``collection`` (a Collection or its name) for ``question`` and build the prompt.

    No chat call yet. ``options`` go to ``search()`` unchanged (``tenant``, ``tags``,
    ``filters``, ``min_score``, ``source_prefix``, ``syntax``, ``rerank``, ``mmr``...);
    ``system_prompt`` replaces ``SYSTEM_PROMPT``, ``system`` adds instructions after it, and
    ``prompt`` is the user message, with ``{context}`` and ``{question}`` where they go.
    """
    question = check_query_text(question, "the question")
    check_k(k)
    check_optional_text(system_prompt, "system_prompt")
    check_optional_text(system, "system")
    check_optional_text(prompt, "prompt")
    if prompt is not None:
        check_template(prompt)
    kb = _collection(collection, using)
    hits = search(kb, question, k=k, mode=mode, using=using, **options)
    messages = build_messages(question, hits, system_prompt, template=prompt, system=system) if hits else []
    return Prompt(question=question, sources=list(hits), messages=messages, embedder=_embedder(kb))


def prompt_for(question: str, hits: list[Hit], *, embedder: Embedder | None = None) -> Prompt:
    """A ``Prompt`` over hits found elsewhere (the search page answers from its own results)."""
    messages = build_messages(question, hits) if hits else []
    return Prompt(question=question, sources=list(hits), messages=messages, embedder=embedder)


def answer_prompt(prompt: Prompt, *, chat: ChatBackend | None = None) -> Answer:
    """Ask the chat model (default ``RAG["CHAT"]``) and map its ``[n]`` citations to ``prompt.sources``."""
    if not prompt.sources:
        return _not_enough()
    backend = chat or get_chat()
    usage: dict[str, int] = {}
    if isinstance(backend, PassageQuoter):
        text = backend.quote_passages(prompt.question, prompt.sources, prompt.embedder)
    else:
        release_connections()
        text, usage = backend.complete(prompt.messages)
    return _answer(prompt, backend, text, usage)


class AnswerStream:
    """A streamed answer: iterate for text deltas; ``answer`` holds the full ``Answer`` afterwards.

    ``sources`` is known before the first delta (render ``[n]`` links as they arrive);
    ``citations`` lists the sources cited so far. Reading ``answer`` before the end consumes
    the rest of the stream. Nothing is sent to the chat model until iteration starts.
    """

    def __init__(self, prompt: Prompt, *, chat: ChatBackend | None = None) -> None:
        self.prompt = prompt
        self._chat = chat
        self._parts: list[str] = []
        self._answer: Answer | None = None
        self._deltas = self._generate()  # a generator: runs only when iterated

    @property
    def sources(self) -> list[Hit]:
        return self.prompt.sources

    @property
    def text(self) -> str:
        """The text received so far."""
        return "".join(self._parts)

    @property
    def citations(self) -> list[Hit]:
        return self.prompt.citations(self.text)

    @property
    def answer(self) -> Answer:
        if self._answer is None:
            for _delta in self._deltas:
                pass
        if self._answer is None:
            raise RuntimeError("the answer stream was closed before it finished")
        return self._answer

    def __iter__(self) -> Iterator[str]:
        return self._deltas

    def _generate(self) -> Iterator[str]:
        if not self.prompt.sources:
            answer = _not_enough()
            self._parts.append(answer.text)
            yield answer.text
            self._answer = answer
            return
        backend = self._chat or get_chat()
        if isinstance(backend, PassageQuoter):
            text = backend.quote_passages(self.prompt.question, self.prompt.sources, self.prompt.embedder)
            self._parts.append(text)
            yield text
            self._answer = _answer(self.prompt, backend, text, {})
            return
        release_connections()
        stream = backend.stream(self.prompt.messages)
        for delta in stream:
            self._parts.append(delta)
            yield delta
        self._answer = _answer(self.prompt, backend, self.text, dict(stream.usage))


@overload
def ask(
    collection: Collection | str,
    question: str,
    *,
    stream: Literal[False] = ...,
    k: int = ...,
    mode: str = ...,
    chat: ChatBackend | None = ...,
    system_prompt: str | None = ...,
    prompt: str | None = ...,
    system: str | None = ...,
    using: str | None = ...,
    **options: Unpack[SearchOptions],
) -> Answer: ...
@overload
def ask(
    collection: Collection | str,
    question: str,
    *,
    stream: Literal[True],
    k: int = ...,
    mode: str = ...,
    chat: ChatBackend | None = ...,
    system_prompt: str | None = ...,
    prompt: str | None = ...,
    system: str | None = ...,
    using: str | None = ...,
    **options: Unpack[SearchOptions],
) -> AnswerStream: ...
def ask(
    collection: Collection | str,
    question: str,
    *,
    stream: bool = False,
    k: int = 6,
    mode: str = "vector",
    chat: ChatBackend | None = None,
    system_prompt: str | None = None,
    prompt: str | None = None,
    system: str | None = None,
    using: str | None = None,
    **options: Unpack[SearchOptions],
) -> Answer | AnswerStream:
    """Answer ``question`` from ``collection``: ``Answer(text, citations, usage, sources, completion)``.

    ``citations`` are the hits the reply cites as ``[n]``, in order of first mention
    (numbers outside the context are ignored). ``chat`` defaults to ``RAG["CHAT"]``; the other
    options are ``prepare()``'s. With ``stream=True`` the result is an ``AnswerStream``::

        stream = ask(kb, "how do I back up?", stream=True)
        stream.sources                      # the numbered passages, before any delta
        for delta in stream:
            print(delta, end="", flush=True)
        stream.answer                       # Answer(text, citations, usage)

    When no hit is found (or none passes ``min_score``) the answer is
    ``NOT_ENOUGH_INFORMATION`` and the chat model is not called.
    """
    check_answer_options(stream, chat)
    prepared = prepare(
        collection,
        question,
        k=k,
        mode=mode,
        system_prompt=system_prompt,
        prompt=prompt,
        system=system,
        using=using,
        **options,
    )
    if stream:
        return AnswerStream(prepared, chat=chat)
    return answer_prompt(prepared, chat=chat)


def check_answer_options(stream: object, chat: object) -> None:
    """``ask``'s own options: checked before the search, so a bad one costs no query."""
    check_bool(stream, "stream")
    if chat is not None and not isinstance(chat, ChatBackend):
        raise QueryError(f"chat must be a ChatBackend (with complete() and stream()), got {shown(chat)}")


def _not_enough() -> Answer:
    return Answer(text=str(NOT_ENOUGH_INFORMATION), citations=[], usage={})


def _answer(prompt: Prompt, backend: ChatBackend, text: str, usage: dict[str, int]) -> Answer:
    completion = Completion(model=str(getattr(backend, "model", "")), text=text, usage=usage)
    citations = prompt.citations(text)
    return Answer(text=text, citations=citations, usage=usage, sources=prompt.sources, completion=completion)


def _embedder(kb: Collection) -> Embedder | None:
    try:
        return kb.get_embedder()
    except RagError:  # a collection with no usable space yet: the quoter scores by terms alone
        return None


def _collection(collection: Collection | str, using: str | None) -> Collection:
    if isinstance(collection, Collection):
        return collection
    # The row from the primary (resolving may create or update it), even when reads go to a replica.
    return Collection.objects.db_manager(using or rag_settings.DATABASE).resolve(collection)
