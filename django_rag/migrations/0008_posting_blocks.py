"""BM25 postings in blocks: about one row per term per 16,384 chunk ids, not one per (term, chunk).

Row postings cost about 70 rows per chunk: three quarters of full-text ingest time and about
five times the chunk table's size on disk. A block holds postings of one term in one bucket of
chunk ids (``chunk_id >> 14``), in three parallel arrays (chunk ids, term frequencies, chunk
lengths). A writing statement appends a term's postings to a block of the same bucket that has
room (under 512 postings) and that no other writer holds (``SKIP LOCKED``), otherwise it adds
a row of its own (``block``, from a sequence): rare terms keep one row per bucket, a common
term gets a row per statement, and writers never wait for each other on postings. Deletes and
updates find a chunk's blocks from its bucket (``chunks && ids``) and rewrite them without it,
locking them in key order (``FOR UPDATE`` also re-reads a block another writer changed since
this snapshot, so nothing is lost). ``django_rag_posting`` becomes a read-only view with one
row per posting.

Document frequencies come from the blocks themselves: ``n`` (a block's size) is in the key
index, so a term's frequency is an index-only sum over its blocks, and ``django_rag_termstats``
(0005), an upsert of one row per distinct term on every write, goes. Collection totals
(``django_rag_textstats``) are kept as in 0005.
"""

import django.db.models.deletion
import django.contrib.postgres.fields
from django.db import migrations, models

# 0005's trigger function, restored when this migration is reversed. Written out here: a
# migration must not read another migration's source, which may change.
PREVIOUS = """
CREATE OR REPLACE FUNCTION django_rag_chunk_text_sync() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
    changed bigint[];  -- UPDATE: rows whose search_vector or space changed; NULL means every row
    my_shard smallint := pg_backend_pid() % 8;
BEGIN
    IF TG_OP = 'UPDATE' THEN
        SELECT array_agg(n.id) INTO changed
        FROM new_rows AS n JOIN old_rows AS o ON o.id = n.id
        WHERE (n.search_vector, n.space) IS DISTINCT FROM (o.search_vector, o.space);
        IF changed IS NULL THEN
            RETURN NULL;
        END IF;
    END IF;
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        PERFORM pg_advisory_xact_lock(hashtextextended(
            format('django_rag.stats:%s:%s:%s', k.collection_id, k.space, my_shard), 0))
        FROM (SELECT DISTINCT o.collection_id, o.space FROM old_rows AS o
              WHERE o.search_vector IS NOT NULL AND (changed IS NULL OR o.id = ANY (changed))
              ORDER BY 1, 2) AS k;
        WITH gone AS (
            SELECT o.id, o.collection_id, o.space, django_rag_lexeme_count(o.search_vector) AS dl
            FROM old_rows AS o
            WHERE o.search_vector IS NOT NULL AND (changed IS NULL OR o.id = ANY (changed))
        ), removed AS (
            DELETE FROM django_rag_posting AS p USING gone WHERE p.chunk_id = gone.id
            RETURNING p.collection_id, p.space, p.term
        ), dfs AS (
            INSERT INTO django_rag_termstats AS s (collection_id, space, term, shard, df)
            SELECT collection_id, space, term, my_shard, -count(*) FROM removed
            GROUP BY collection_id, space, term ORDER BY collection_id, space, term
            ON CONFLICT (collection_id, space, term, shard) DO UPDATE SET df = s.df + EXCLUDED.df
        )
        INSERT INTO django_rag_textstats AS s (collection_id, space, shard, chunks, length)
        SELECT collection_id, space, my_shard, -count(*), -sum(dl) FROM gone
        GROUP BY collection_id, space ORDER BY collection_id, space
        ON CONFLICT (collection_id, space, shard)
        DO UPDATE SET chunks = s.chunks + EXCLUDED.chunks, length = s.length + EXCLUDED.length;
    END IF;
    IF TG_OP IN ('UPDATE', 'INSERT') THEN
        -- After an UPDATE's deletes: the locks of any new (collection, space) come later in the
        -- transaction than the old ones, but advisory locks are re-entrant and only this
        -- trigger takes them, always before touching statistic rows.
        PERFORM pg_advisory_xact_lock(hashtextextended(
            format('django_rag.stats:%s:%s:%s', k.collection_id, k.space, my_shard), 0))
        FROM (SELECT DISTINCT n.collection_id, n.space FROM new_rows AS n
              WHERE n.search_vector IS NOT NULL AND (changed IS NULL OR n.id = ANY (changed))
              ORDER BY 1, 2) AS k;
        WITH terms AS MATERIALIZED (
            SELECT n.id, n.collection_id, n.space, u.lexeme,
                   coalesce(array_length(u.positions, 1), 1) AS tf
            FROM new_rows AS n CROSS JOIN LATERAL unnest(n.search_vector) AS u
            WHERE n.search_vector IS NOT NULL AND (changed IS NULL OR n.id = ANY (changed))
        ), lengths AS MATERIALIZED (
            -- A chunk's length in lexemes: positions counted, a lexeme stripped of positions once.
            SELECT id, min(collection_id) AS collection_id, min(space) AS space, sum(tf)::integer AS dl
            FROM terms GROUP BY id
        ), added AS (
            INSERT INTO django_rag_posting (chunk_id, collection_id, space, term, tf, dl)
            SELECT t.id, t.collection_id, t.space, t.lexeme, t.tf, l.dl
            FROM terms AS t JOIN lengths AS l ON l.id = t.id
        ), dfs AS (
            INSERT INTO django_rag_termstats AS s (collection_id, space, term, shard, df)
            SELECT collection_id, space, lexeme, my_shard, count(*) FROM terms
            GROUP BY collection_id, space, lexeme ORDER BY collection_id, space, lexeme
            ON CONFLICT (collection_id, space, term, shard) DO UPDATE SET df = s.df + EXCLUDED.df
        )
        INSERT INTO django_rag_textstats AS s (collection_id, space, shard, chunks, length)
        SELECT collection_id, space, my_shard, count(*), sum(dl) FROM lengths
        GROUP BY collection_id, space ORDER BY collection_id, space
        ON CONFLICT (collection_id, space, shard)
        DO UPDATE SET chunks = s.chunks + EXCLUDED.chunks, length = s.length + EXCLUDED.length;
    END IF;
    RETURN NULL;
END
$fn$;
"""

BLOCKS = """
CREATE VIEW django_rag_posting AS
SELECT e.chunk_id, b.collection_id, b.space, b.term, b.bucket, e.tf::integer AS tf, e.dl
FROM django_rag_postblock AS b CROSS JOIN LATERAL unnest(b.chunks, b.tfs, b.dls) AS e(chunk_id, tf, dl);

CREATE OR REPLACE FUNCTION django_rag_chunk_text_sync() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
    changed bigint[];  -- UPDATE: rows whose search_vector or space changed; NULL means every row
    my_shard smallint := pg_backend_pid() % 8;
    my_block bigint;  -- this statement's blocks
BEGIN
    IF TG_OP = 'UPDATE' THEN
        SELECT array_agg(n.id) INTO changed
        FROM new_rows AS n JOIN old_rows AS o ON o.id = n.id
        WHERE (n.search_vector, n.space) IS DISTINCT FROM (o.search_vector, o.space);
        IF changed IS NULL THEN
            RETURN NULL;
        END IF;
    END IF;
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        PERFORM pg_advisory_xact_lock(hashtextextended(
            format('django_rag.stats:%s:%s:%s', k.collection_id, k.space, my_shard), 0))
        FROM (SELECT DISTINCT o.collection_id, o.space FROM old_rows AS o
              WHERE o.search_vector IS NOT NULL AND (changed IS NULL OR o.id = ANY (changed))
              ORDER BY 1, 2) AS k;
        WITH gone AS MATERIALIZED (
            SELECT o.id, o.collection_id, o.space, u.lexeme AS term,
                   coalesce(array_length(u.positions, 1), 1) AS tf
            FROM old_rows AS o CROSS JOIN LATERAL unnest(o.search_vector) AS u
            WHERE o.search_vector IS NOT NULL AND (changed IS NULL OR o.id = ANY (changed))
        ), lengths AS MATERIALIZED (
            SELECT id, min(collection_id) AS collection_id, min(space) AS space, sum(tf)::integer AS dl
            FROM gone GROUP BY id
        ), keys AS (
            SELECT collection_id, space, term, id >> 14 AS bucket, array_agg(id) AS ids FROM gone
            GROUP BY collection_id, space, term, id >> 14
        ), blocks AS MATERIALIZED (
            -- The blocks holding a gone posting, locked in key order (and so re-read if another
            -- writer changed one since this snapshot).
            SELECT b.collection_id, b.space, b.term, b.bucket, b.block, b.chunks, b.tfs, b.dls
            FROM keys AS k JOIN django_rag_postblock AS b
              ON (b.collection_id, b.space, b.term, b.bucket) = (k.collection_id, k.space, k.term, k.bucket)
            WHERE b.chunks && k.ids
            ORDER BY b.collection_id, b.space, b.term, b.bucket, b.block
            FOR UPDATE OF b
        ), kept AS MATERIALIZED (
            SELECT b.collection_id, b.space, b.term, b.bucket, b.block,
                   array_agg(e.chunk_id ORDER BY e.n) AS chunks, array_agg(e.tf ORDER BY e.n) AS tfs,
                   array_agg(e.dl ORDER BY e.n) AS dls
            FROM blocks AS b
            CROSS JOIN LATERAL unnest(b.chunks, b.tfs, b.dls) WITH ORDINALITY AS e(chunk_id, tf, dl, n)
            LEFT JOIN gone AS g ON g.id = e.chunk_id AND g.term = b.term
                AND g.collection_id = b.collection_id AND g.space = b.space
            WHERE g.id IS NULL
            GROUP BY b.collection_id, b.space, b.term, b.bucket, b.block
        ), rewritten AS (
            UPDATE django_rag_postblock AS b
            SET n = cardinality(k.chunks), chunks = k.chunks, tfs = k.tfs, dls = k.dls
            FROM kept AS k
            WHERE (b.collection_id, b.space, b.term, b.bucket, b.block)
                = (k.collection_id, k.space, k.term, k.bucket, k.block)
        ), emptied AS (
            DELETE FROM django_rag_postblock AS b USING blocks AS x
            WHERE (b.collection_id, b.space, b.term, b.bucket, b.block)
                = (x.collection_id, x.space, x.term, x.bucket, x.block)
              AND NOT EXISTS (
                  SELECT 1 FROM kept AS k
                  WHERE (k.collection_id, k.space, k.term, k.bucket, k.block)
                      = (x.collection_id, x.space, x.term, x.bucket, x.block))
        )
        INSERT INTO django_rag_textstats AS s (collection_id, space, shard, chunks, length)
        SELECT collection_id, space, my_shard, -count(*), -sum(dl) FROM lengths
        GROUP BY collection_id, space ORDER BY collection_id, space
        ON CONFLICT (collection_id, space, shard)
        DO UPDATE SET chunks = s.chunks + EXCLUDED.chunks, length = s.length + EXCLUDED.length;
    END IF;
    IF TG_OP IN ('UPDATE', 'INSERT') THEN
        -- After an UPDATE's deletes: the locks of any new (collection, space) come later in the
        -- transaction than the old ones, but advisory locks are re-entrant and only this
        -- trigger takes them, always before touching statistic rows.
        PERFORM pg_advisory_xact_lock(hashtextextended(
            format('django_rag.stats:%s:%s:%s', k.collection_id, k.space, my_shard), 0))
        FROM (SELECT DISTINCT n.collection_id, n.space FROM new_rows AS n
              WHERE n.search_vector IS NOT NULL AND (changed IS NULL OR n.id = ANY (changed))
              ORDER BY 1, 2) AS k;
        my_block := nextval('django_rag_postblock_seq');
        WITH terms AS MATERIALIZED (
            SELECT n.id, n.collection_id, n.space, u.lexeme,
                   coalesce(array_length(u.positions, 1), 1) AS tf
            FROM new_rows AS n CROSS JOIN LATERAL unnest(n.search_vector) AS u
            WHERE n.search_vector IS NOT NULL AND (changed IS NULL OR n.id = ANY (changed))
        ), lengths AS MATERIALIZED (
            -- A chunk's length in lexemes: positions counted, a lexeme stripped of positions once.
            SELECT id, sum(tf)::integer AS dl FROM terms GROUP BY id
        ), grouped AS MATERIALIZED (
            SELECT t.collection_id, t.space, t.lexeme AS term, t.id >> 14 AS bucket, count(*)::integer AS n,
                   array_agg(t.id ORDER BY t.id) AS chunks, array_agg(t.tf::smallint ORDER BY t.id) AS tfs,
                   array_agg(l.dl ORDER BY t.id) AS dls
            FROM terms AS t JOIN lengths AS l ON l.id = t.id
            GROUP BY t.collection_id, t.space, t.lexeme, t.id >> 14
        ), open AS MATERIALIZED (
            -- Blocks of the same term and bucket with room: appended to, so a term keeps about one
            -- row per bucket. SKIP LOCKED: a block another writer holds is left alone (this
            -- statement writes a row of its own instead), so writers never wait on each other here.
            SELECT b.collection_id, b.space, b.term, b.bucket, b.block
            FROM grouped AS g JOIN django_rag_postblock AS b
              ON (b.collection_id, b.space, b.term, b.bucket) = (g.collection_id, g.space, g.term, g.bucket)
            WHERE b.n < 512
            ORDER BY b.collection_id, b.space, b.term, b.bucket, b.block
            FOR UPDATE OF b SKIP LOCKED
        ), target AS MATERIALIZED (
            SELECT DISTINCT ON (collection_id, space, term, bucket) * FROM open
            ORDER BY collection_id, space, term, bucket, block
        ), appended AS (
            UPDATE django_rag_postblock AS b
            SET n = b.n + g.n, chunks = b.chunks || g.chunks, tfs = b.tfs || g.tfs, dls = b.dls || g.dls
            FROM target AS o JOIN grouped AS g
              ON (g.collection_id, g.space, g.term, g.bucket) = (o.collection_id, o.space, o.term, o.bucket)
            WHERE (b.collection_id, b.space, b.term, b.bucket, b.block)
                = (o.collection_id, o.space, o.term, o.bucket, o.block)
        ), added AS (
            INSERT INTO django_rag_postblock (collection_id, space, term, bucket, block, n, chunks, tfs, dls)
            SELECT g.collection_id, g.space, g.term, g.bucket, my_block, g.n, g.chunks, g.tfs, g.dls
            FROM grouped AS g
            WHERE NOT EXISTS (
                SELECT 1 FROM target AS o
                WHERE (o.collection_id, o.space, o.term, o.bucket) = (g.collection_id, g.space, g.term, g.bucket))
        )
        INSERT INTO django_rag_textstats AS s (collection_id, space, shard, chunks, length)
        SELECT t.collection_id, t.space, my_shard, count(DISTINCT t.id), sum(t.tf)
        FROM terms AS t
        GROUP BY t.collection_id, t.space ORDER BY t.collection_id, t.space
        ON CONFLICT (collection_id, space, shard)
        DO UPDATE SET chunks = s.chunks + EXCLUDED.chunks, length = s.length + EXCLUDED.length;
    END IF;
    RETURN NULL;
END
$fn$;
"""

REFILL_TERMSTATS = """
INSERT INTO django_rag_termstats (collection_id, space, term, shard, df)
SELECT collection_id, space, term, 0, sum(n) FROM django_rag_postblock GROUP BY collection_id, space, term;
"""

UNBLOCKS = "DROP VIEW IF EXISTS django_rag_posting;\n" + PREVIOUS

# Postings written before this migration, into blocks (and back, when reversed).
COPY_TO_BLOCKS = """
INSERT INTO django_rag_postblock (collection_id, space, term, bucket, block, n, chunks, tfs, dls)
SELECT collection_id, space, term, chunk_id >> 14, nextval('django_rag_postblock_seq'), count(*),
       array_agg(chunk_id ORDER BY chunk_id), array_agg(tf::smallint ORDER BY chunk_id), array_agg(dl ORDER BY chunk_id)
FROM django_rag_posting GROUP BY collection_id, space, term, chunk_id >> 14;
"""
COPY_FROM_BLOCKS = """
INSERT INTO django_rag_posting (chunk_id, collection_id, space, term, tf, dl)
SELECT e.chunk_id, b.collection_id, b.space, b.term, e.tf, e.dl
FROM django_rag_postblock AS b CROSS JOIN LATERAL unnest(b.chunks, b.tfs, b.dls) AS e(chunk_id, tf, dl);
"""


class Migration(migrations.Migration):

    dependencies = [
        ('django_rag', '0007_query_log'),
    ]

    operations = [
        migrations.CreateModel(
            name='PostingBlock',
            fields=[
                ('pk', models.CompositePrimaryKey('collection_id', 'space', 'term', 'bucket', 'block', blank=True, editable=False, primary_key=True, serialize=False)),
                ('space', models.CharField(max_length=200)),
                ('term', models.TextField()),
                ('bucket', models.BigIntegerField()),
                ('block', models.BigIntegerField()),
                ('n', models.IntegerField()),
                ('chunks', django.contrib.postgres.fields.ArrayField(base_field=models.BigIntegerField(), size=None)),
                ('tfs', django.contrib.postgres.fields.ArrayField(base_field=models.SmallIntegerField(), size=None)),
                ('dls', django.contrib.postgres.fields.ArrayField(base_field=models.IntegerField(), size=None)),
                ('collection', models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.DO_NOTHING, related_name='+', to='django_rag.collection')),
            ],
            options={
                'db_table': 'django_rag_postblock',
            },
        ),
        # Document frequencies are read from the key index alone: the sum of a term's block sizes.
        migrations.RunSQL(
            "ALTER TABLE django_rag_postblock DROP CONSTRAINT django_rag_postblock_pkey, "
            "ADD CONSTRAINT django_rag_postblock_pkey PRIMARY KEY (collection_id, space, term, bucket, block) "
            "INCLUDE (n);",
            migrations.RunSQL.noop,
        ),
        migrations.RunSQL(
            "CREATE SEQUENCE django_rag_postblock_seq;", "DROP SEQUENCE IF EXISTS django_rag_postblock_seq;"
        ),
        migrations.RunSQL(COPY_TO_BLOCKS, COPY_FROM_BLOCKS),
        migrations.DeleteModel(name='Posting'),
        migrations.RunSQL(BLOCKS, UNBLOCKS),
        migrations.CreateModel(
            name='Posting',
            fields=[
                ('pk', models.CompositePrimaryKey('chunk_id', 'term', blank=True, editable=False, primary_key=True, serialize=False)),
                ('space', models.CharField(max_length=200)),
                ('term', models.TextField()),
                ('bucket', models.BigIntegerField()),
                ('tf', models.IntegerField()),
                ('dl', models.IntegerField()),
                ('chunk', models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.DO_NOTHING, related_name='+', to='django_rag.chunk')),
                ('collection', models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.DO_NOTHING, related_name='+', to='django_rag.collection')),
            ],
            options={
                'db_table': 'django_rag_posting',
                'managed': False,
            },
        ),
        # Reversed: 0005's document frequencies, summed from the blocks before they go.
        migrations.RunSQL(migrations.RunSQL.noop, REFILL_TERMSTATS),
        migrations.DeleteModel(name='TermStats'),
    ]
