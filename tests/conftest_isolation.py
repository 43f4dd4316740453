"""The fixture of the isolation tests (tests/test_isolation*.py): the corpus, indexed once per module."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import django_rag as rag
from django_rag.models import Chunk, Collection, Document
from tests.isolation_corpus import CORPUS, NAME, Corpus, index_corpus


@pytest.fixture(scope="module")
def corpus(django_db_setup: Any, django_db_blocker: Any) -> Iterator[Corpus]:
    """The corpus, committed once for the module and deleted after it."""
    with django_db_blocker.unblock():
        kb = rag.collection(NAME, create=True, text_config="simple")
        index_corpus(kb)
        document_ids, chunk_ids, by_chunk = {}, {}, {}
        for doc in CORPUS:
            document = Document.objects.get(collection=kb, tenant=doc.tenant, source_id=doc.source_id)
            [chunk] = Chunk.objects.filter(document=document)  # one chunk per document: the oracle's unit
            document_ids[doc.number], chunk_ids[doc.number], by_chunk[chunk.pk] = document.pk, chunk.pk, doc
    try:
        yield Corpus(kb, document_ids, chunk_ids, by_chunk)
    finally:
        with django_db_blocker.unblock():
            Collection.objects.filter(name=NAME).delete()
