"""Contextual headers (issue 21): a chunk's title and heading path, embedded and matched with it.

``Chunk.header`` holds the header; the text index of new chunks is built from it and the content
(``stores.pgvector``). ``Collection.context_headers`` follows the collection's CONTEXT_HEADERS
setting (default on). Existing chunks keep an empty header and their vectors until their
documents are ingested again (docs/howto/upgrade-chunking.md): nothing is rewritten here.
The header has a database default too: rows written by raw SQL or COPY without the column (bulk
tools, older code) get an empty header, as existing chunks do.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("django_rag", "0011_posting_writes")]

    operations = [
        migrations.AddField(
            model_name="chunk",
            name="header",
            field=models.TextField(blank=True, default="", db_default=""),
        ),
        migrations.AddField(
            model_name="collection",
            name="context_headers",
            field=models.BooleanField(
                default=True,
                help_text="Embed and match each chunk with its document's title and heading path.",
                verbose_name="contextual headers",
            ),
        ),
    ]
