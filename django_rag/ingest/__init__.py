"""Ingestion: loaders, the outbound guard, chunking, the one sync pipeline, and its adapters.

``pipeline.index_documents`` is the only code that chunks, diffs, embeds and writes; the
adapters produce documents and call it: ``sources`` (files, folders, URLs), ``rows``
(registered model rows and their files, see ``registration``).
"""
