"""The app's models, one module per concern, all importable from ``django_rag.models``.

- ``collection``: ``Collection`` (a knowledge base), its manager, its embedding space and ``EmbeddingSwitch``
- ``documents``: ``Document`` and ``Chunk``, the rows searches read
- ``postings``: BM25's posting blocks, the posting view and the text statistics
- ``jobs``: ``IngestJob`` and ``IngestBatch``, bulk ingestion runs
- ``querylog``: ``QueryLog``, ``Conversation`` and ``Turn``, what the web pages record

Behaviour that searches, indexes or answers lives above this package (``django_rag.api``'s
``KnowledgeBase``, a proxy of ``Collection``); these models only describe and read their rows.
"""

from .collection import Collection, CollectionManager, EmbeddingSwitch, SpaceState, embedder_for_space
from .documents import Chunk, Document
from .jobs import IngestBatch, IngestJob
from .postings import POSTING_BUCKET_BITS, Posting, PostingBlock, TextStats
from .querylog import Conversation, QueryLog, Turn

__all__ = [
    "POSTING_BUCKET_BITS",
    "Chunk",
    "Collection",
    "CollectionManager",
    "Conversation",
    "Document",
    "EmbeddingSwitch",
    "IngestBatch",
    "IngestJob",
    "Posting",
    "PostingBlock",
    "QueryLog",
    "SpaceState",
    "TextStats",
    "Turn",
    "embedder_for_space",
]
