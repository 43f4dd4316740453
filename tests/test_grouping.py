"""One entry per document, sentence snippets from Markdown, and the source view's passages (issue 21)."""

from __future__ import annotations

import pytest

import django_rag as rag
from django_rag.embedders.hashing import HashingEmbedder
from django_rag.models import Chunk, Document
from django_rag.search.grouping import (
    choose_passages,
    group_hits,
    markdown_to_text,
    same_word,
    sentence_snippet,
)
from django_rag.search.relevance import background_for
from django_rag.types import ChunkData, Hit
from django_rag.web.passages import document_passages, render_markdown
from tests.web_support import login, set_web

pytestmark = pytest.mark.django_db
pytest_plugins = ["tests.conftest_web"]

BACKUPS = """# Backups and restores

Lumen takes a full snapshot of every workspace each night and keeps it for 35 days. Snapshots are \
encrypted at rest, so a regional outage never takes your backups with it.

To restore a workspace, an owner opens **Settings**, then [Backups](https://example.com/b), and \
picks a snapshot.
"""


def test_a_snippet_is_whole_sentences_around_the_query_words_as_plain_text() -> None:
    snippet = sentence_snippet(BACKUPS, "how long are backups kept?")
    assert snippet.text.startswith("Lumen takes a full snapshot")  # the sentence before, whole
    assert snippet.text.endswith("picks a snapshot.")  # and the sentences after, while they fit
    assert "#" not in snippet.text and "**" not in snippet.text
    assert [snippet.text[start:end] for start, end in snippet.marks] == ["backups", "Backups"]
    short = sentence_snippet(BACKUPS, "how long are backups kept?", max_chars=200)
    assert short.text == (
        "Lumen takes a full snapshot of every workspace each night and keeps it for 35 days. "
        "Snapshots are encrypted at rest, so a regional outage never takes your backups with it."
    )


def test_a_snippet_drops_markdown_markup_and_marks_escaped_html() -> None:
    snippet = sentence_snippet(BACKUPS, "restore settings")
    assert "opens Settings, then Backups, and picks a snapshot." in snippet.text
    assert "https://" not in snippet.text
    tricky = sentence_snippet('Quotes "and" <b>tags</b> stay text.', "tags")
    assert tricky.text == 'Quotes "and" <b>tags</b> stay text.'  # JSON carries the text as it is
    assert str(tricky.html()) == "Quotes &quot;and&quot; &lt;b&gt;<mark>tags</mark>&lt;/b&gt; stay text."


def test_a_sentence_longer_than_a_snippet_is_cut_around_its_match_and_says_so() -> None:
    long = " ".join(["word"] * 400) + " needle " + " ".join(["word"] * 400) + "."
    snippet = sentence_snippet(long, "needle")
    assert "needle" in snippet.text and snippet.text.startswith("… ") and snippet.text.endswith(" …")
    assert len(snippet.text) < 400


def test_markdown_becomes_text_with_headings_kept_when_asked() -> None:
    text = "# Title\n\n- one *item*\n- `two`\n\n> quoted"
    assert markdown_to_text(text).split() == ["one", "item", "two", "quoted"]
    assert markdown_to_text(text, headings=True).split()[0] == "Title"


def test_hits_are_grouped_by_document_in_the_order_of_their_best_hit() -> None:
    kb = rag.collection("notes")
    long = " ".join(f"Backups sentence number {n} about snapshots." for n in range(60))
    kb.index([rag.RagDocument("long", long), rag.RagDocument("short", "Snapshots are kept.")])
    hits = kb.search("snapshots backups", mode="text", k=20)
    groups = group_hits(hits)
    assert len(groups) == 2 and sum(len(group.hits) for group in groups) == len(hits)
    assert [group.best for group in groups] == [
        hits[0],
        next(h for h in hits if h.source_id != hits[0].source_id),
    ]


def test_a_document_shows_its_most_relevant_passage_first() -> None:
    kb = rag.collection("notes")
    long = " ".join(f"Backups sentence number {n} about snapshots." for n in range(60))
    kb.index([rag.RagDocument("long", long)])
    hits = kb.search("snapshots backups", mode="text", k=20)
    for rank, hit in enumerate(hits):
        hit.relevance = 0.9 if rank == 2 else 0.6
    [group] = group_hits(hits)
    assert group.best is hits[2] and group.others == [hits[0], hits[1], *hits[3:]]


class CountingEmbedder(HashingEmbedder):
    """The hashing embedder (texts that share words are similar), counting the texts it embeds."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []

    def _embed(self, texts: list[str], kind: str) -> list[list[float]]:
        self.texts += texts
        return super()._embed(texts, kind)


ANSWER = "Lumen takes a snapshot of each workspace every night and keeps the snapshot for 35 days."
ASIDE = "Exports are copies you download yourself; the export is yours to keep, not a backup."


def _two_passages(header: str, *, vector: bool = True, words: bool = False) -> list[Hit]:
    """A document's two hits as a search ranks them with its header on: the aside first, by the
    similarity and relevance of header + text (the header outweighs its short text)."""
    return [
        Hit(
            chunk=ChunkData(index=index, content=content, header=header),
            document=None,
            score=score,
            source_id="backups",
            relevance=score,
            similarity=score if vector else None,
            text_match=0.5 if words else None,
        )
        for index, content, score in ((1, ASIDE, 0.7), (0, ANSWER, 0.6))
    ]


def test_a_document_displays_the_passage_whose_own_text_matches_best_not_its_header() -> None:
    query = "how many days is a snapshot of my workspace kept"
    embedder = CountingEmbedder()
    background_for(embedder)  # the space's reference texts, embedded once per process
    embedder.texts.clear()
    [ranked] = group_hits(_two_passages("Backups and restores"))
    assert ranked.best.chunk.content == ASIDE  # what the ranking alone would display
    [shown] = choose_passages([ranked], query, embedder=embedder, chunks=1000)
    # The header both passages share is left out: the answer's own text is closer to the query.
    assert shown.best.chunk.content == ANSWER and [h.chunk.content for h in shown.others] == [ASIDE]
    assert sorted(embedder.texts) == sorted([ANSWER, ASIDE, query])  # the snippets, without the header
    # Words alone (text mode, no vectors) decide the same way, on the displayed text.
    [words] = choose_passages(
        group_hits(_two_passages("Backups and restores", vector=False, words=True)),
        query,
        embedder=embedder,
        chunks=1000,
    )
    assert words.best.chunk.content == ANSWER


def test_passages_without_a_header_or_alone_in_their_document_keep_the_rankings_choice() -> None:
    query = "how many days is a snapshot of my workspace kept"
    embedder = CountingEmbedder()
    [plain] = choose_passages(group_hits(_two_passages("")), query, embedder=embedder, chunks=1000)
    assert plain.best.chunk.content == ASIDE  # scored on its own text already: nothing to redo
    [alone] = choose_passages(group_hits(_two_passages("Backups")[:1]), query, embedder=embedder, chunks=1000)
    assert alone.best.chunk.content == ASIDE
    assert embedder.texts == []  # and nothing was embedded for either


def _passages_doc() -> Document:
    kb = rag.collection("notes")  # 64-token chunks overlapping by 8: the overlap must not repeat
    text = "# Guide\n\n" + " ".join(f"Sentence {n} of the guide says something." for n in range(40))
    text += "\n\n- first point\n- second <script>alert(1)</script> point\n"
    kb.index([rag.RagDocument("guide", text, {"title": "Guide"})], tenant="acme")
    return Document.objects.get(source_id="guide")


def test_the_source_view_shows_each_passage_once_without_the_overlap() -> None:
    document = _passages_doc()
    chunks = list(Chunk.objects.filter(document=document).order_by("index"))
    assert len(chunks) > 2
    passages = document_passages(chunks)
    joined = "".join(passage.text for passage in passages)
    for n in range(40):
        assert joined.count(f"Sentence {n} of the guide") == 1
    assert [p.index for p in passages] == [c.index for c in chunks]


def test_the_query_words_are_marked_in_their_other_forms_in_any_language() -> None:
    snippet = sentence_snippet(
        "Como restaurar uma cópia: as cópias restauradas ficam à parte.", "restauradas"
    )
    assert [snippet.text[a:b] for a, b in snippet.marks] == ["restaurar", "restauradas"]
    assert same_word("backups", "backup") and same_word("long", "longer")
    assert not same_word("kept", "keeps")  # too short a shared beginning to be one word's forms
    assert not same_word("information", "informal") and not same_word("35", "350")


def test_markdown_is_rendered_as_headings_lists_and_escaped_text() -> None:
    html = str(render_markdown("# Guide\n\nSome *text*.\n\n- first\n- <script>x</script>\n"))
    assert "<h3>Guide</h3>" in html and "<p>Some text.</p>" in html
    assert "<ul><li>first</li><li>&lt;script&gt;x&lt;/script&gt;</li></ul>" in html


def test_the_source_view_marks_the_passage_a_hit_opened(web, settings) -> None:
    document = _passages_doc()
    set_web(settings, COLLECTIONS=["docs", "notes"])
    alice = login("alice")
    page = alice.get(f"/kb/source/{document.pk}/", {"passage": "1"}).content.decode()
    assert page.count('id="passage-') == Chunk.objects.filter(document=document).count()
    assert 'class="rag-passage rag-passage-current" id="passage-1" aria-current="location"' in page
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<h3>Guide</h3>" in page
    plain = alice.get(f"/kb/source/{document.pk}/", {"passage": "x"}).content.decode()
    assert "rag-passage-current" not in plain  # a passage param that is not a number opens the top


def test_json_results_are_documents_with_plain_text_snippets_offsets_and_more(web, docs, alice) -> None:
    kb = rag.collection("docs")
    kb.index([rag.RagDocument("acme/quotes", 'Snapshots "kept" nightly. ' * 200)], tenant="acme")
    data = alice.get("/kb/api/search/", {"q": "snapshots kept", "mode": "text", "k": 10}).json()
    documents = [result["document"] for result in data["results"]]
    assert len(documents) == len(set(documents)) == data["count"]
    quoted = next(r for r in data["results"] if r["title"] == "acme/quotes")
    assert '"kept"' in quoted["snippet"] and "&quot;" not in quoted["snippet"]
    assert {quoted["snippet"][a:b].lower() for a, b in quoted["highlights"]} == {"snapshots", "kept"}
    assert quoted["more"] and all(
        set(more) >= {"snippet", "highlights", "url", "passage"} for more in quoted["more"]
    )
    assert quoted["url"].endswith(f"?passage={quoted['passage']}#passage-{quoted['passage']}")
