"""BM25's rows: posting blocks kept by triggers, the posting view, and per-space text statistics."""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.db import models

from .collection import Collection
from .documents import Chunk

__all__ = ["POSTING_BUCKET_BITS", "Posting", "PostingBlock", "TextStats"]

# A posting block holds postings of one term among 16,384 consecutive chunk ids, so a chunk's
# postings are found from its id without an index on chunk ids.
POSTING_BUCKET_BITS = 14


class PostingBlock(models.Model):
    """Postings of one lexeme among 16,384 consecutive chunk ids, for BM25.

    Kept by triggers on the chunk table (migration 0008). Parallel arrays: ``chunks[i]`` holds
    the lexeme ``tfs[i]`` times (PostgreSQL keeps at most 256 positions per lexeme, so very
    repetitive chunks saturate, as BM25 does anyway) and is ``dls[i]`` lexemes long. A chunk's
    postings live in bucket ``chunk_id >> 14``. Writers append to a block of the bucket with
    room that no other writer holds, else add a row of their own (``block``, from a sequence),
    so concurrent ingestion never waits on postings and a rare term keeps about one row per
    bucket; deletes rewrite the blocks holding the chunk. About one row per term per bucket or
    batch instead of one per (term, chunk), on disk and at ingest.
    Postings carry the chunk's embedding space, so that a collection moving to a new embedder
    keeps one consistent BM25 per space. Never written by the app directly (migration 0008).
    """

    pk = models.CompositePrimaryKey("collection_id", "space", "term", "bucket", "block")
    collection = models.ForeignKey(
        Collection, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    space = models.CharField(max_length=200)
    term = models.TextField()
    bucket = models.BigIntegerField()
    block = models.BigIntegerField()
    # The block's size, in the key index (migration 0008): a term's document frequency is an
    # index-only sum of its blocks' sizes.
    n = models.IntegerField()
    chunks = ArrayField(models.BigIntegerField())
    tfs = ArrayField(models.SmallIntegerField())
    dls = ArrayField(models.IntegerField())

    class Meta:
        db_table = "django_rag_postblock"


class Posting(models.Model):
    """One lexeme of one chunk: a read-only view over ``PostingBlock`` (one row per array element).

    For inspection and tests; the search legs read the blocks. Filter on ``bucket``
    (``chunk_id >> 14``) as well as the chunk to look a chunk's postings up without a scan.
    """

    pk = models.CompositePrimaryKey("chunk_id", "term")
    chunk = models.ForeignKey(
        Chunk, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    collection = models.ForeignKey(
        Collection, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    space = models.CharField(max_length=200)
    term = models.TextField()
    bucket = models.BigIntegerField()
    tf = models.IntegerField()
    dl = models.IntegerField()

    class Meta:
        managed = False
        db_table = "django_rag_posting"


class TextStats(models.Model):
    """Per-collection, per-space chunk count and total length for BM25, as deltas in shard rows.

    Each writer adds its deltas to the shard of its database backend, so concurrent ingestion
    into one collection does not queue on a single row; readers sum the shards.
    """

    collection = models.ForeignKey(
        Collection, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    space = models.CharField(max_length=200)
    shard = models.SmallIntegerField()
    chunks = models.BigIntegerField(default=0)
    length = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["collection", "space", "shard"], name="django_rag_textstats_shard"
            ),
        ]
