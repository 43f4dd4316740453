"""Signals sent by automatic ingestion (``django_rag.ingest.rows``).

Every signal's ``sender`` is the registered model class. Receivers run with ``send_robust``:
an exception in a receiver is logged and never fails the ingestion that sent it.

- ``document_indexed(instance, document, result)``: the row's chunks are stored and searchable.
- ``ingestion_skipped(instance, document, reason, result)``: nothing to index (``reason`` is
  ``unsupported-type``, ``too-large`` or ``empty-text``); the row's old chunks were removed.
- ``ingestion_failed(instance, document, error, result)``: ingestion raised ``error``; the old
  chunks (if any) are kept. ``instance`` and ``document`` may be None.
- ``document_removed(pk, source_id, collection, count)``: the row is gone and so are its documents.
"""

from django.dispatch import Signal

__all__ = ["document_indexed", "document_removed", "ingestion_failed", "ingestion_skipped"]

document_indexed = Signal()
document_removed = Signal()
ingestion_failed = Signal()
ingestion_skipped = Signal()
