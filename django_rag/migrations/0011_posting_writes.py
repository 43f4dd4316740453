"""Posting writes that stay fast as the block table grows, and cost less per statement.

0008's trigger function, changed in how it writes, not in what:

- It finds the block to append to with one probe by key per (term, bucket) group (``LATERAL
  ... LIMIT 1 FOR UPDATE SKIP LOCKED``), where 0008 joined the groups with every open block of
  their terms and locked them all.
- Its statements are planned on every call (``plan_cache_mode = force_custom_plan``), with the
  values of its variables and the table's current size. After five calls a session may switch
  to a generic plan, which took 22 s instead of 1 s to index 1,280 chunks.
- It runs with sequential scans off: blocks are only ever found by key, and a plan that scans
  the block table per statement grows with the collection (a bulk load that stalled at 4k
  chunks, one statement running for minutes, had such a plan).
- Its sorts fit in memory (``work_mem`` 32 MB, for the function only), and it groups postings
  bytewise (``COLLATE "C"``), which sorts faster and gives the same groups.
- Chunk counts and lengths for ``django_rag_textstats`` come from one row per chunk, not from a
  distinct count over every posting.
"""

from django.db import migrations

# 0008's trigger function and this one share their text but for two parts: this one's planner
# settings, and how an insert groups its postings and appends them. The parts are written out
# here (a migration must not read another migration's source, which may change) and joined.
_FUNCTION = """
CREATE OR REPLACE FUNCTION django_rag_chunk_text_sync() RETURNS trigger LANGUAGE plpgsql"""

# Everything up to the insert's grouping: an update's changed rows, the delete path, and the
# insert's lock, postings and chunk lengths.
_START = """DECLARE
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
"""

# The insert's statistics upsert, and the end.
_END = """        ON CONFLICT (collection_id, space, shard)
        DO UPDATE SET chunks = s.chunks + EXCLUDED.chunks, length = s.length + EXCLUDED.length;
    END IF;
    RETURN NULL;
END
$fn$;
"""

# 0008: each group joined with every open block of its term, all of them locked; statistics
# counted over every posting.
_APPEND_0008 = """            SELECT t.collection_id, t.space, t.lexeme AS term, t.id >> 14 AS bucket, count(*)::integer AS n,
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
"""

# This migration: one block probed by key per group; statistics from one row per chunk.
_APPEND = """            -- Grouped bytewise (COLLATE "C": the same groups, sorted faster); the columns keep the
            -- default collation, which the key index is in.
            SELECT t.collection_id, (t.space COLLATE "C") COLLATE "default" AS space,
                   (t.lexeme COLLATE "C") COLLATE "default" AS term, t.id >> 14 AS bucket,
                   count(*)::integer AS n, array_agg(t.id ORDER BY t.id) AS chunks,
                   array_agg(t.tf::smallint ORDER BY t.id) AS tfs, array_agg(l.dl ORDER BY t.id) AS dls
            FROM terms AS t JOIN lengths AS l ON l.id = t.id
            GROUP BY t.collection_id, t.space COLLATE "C", t.lexeme COLLATE "C", t.id >> 14
        ), target AS MATERIALIZED (
            -- For each group, one block of the same term and bucket with room, appended to: a
            -- term keeps about one row per bucket. Probed by key, one block each. SKIP LOCKED: a
            -- block another writer holds is left alone (this statement writes a row of its own
            -- instead), so writers never wait on each other here.
            SELECT g.collection_id, g.space, g.term, g.bucket, o.block
            FROM grouped AS g CROSS JOIN LATERAL (
                SELECT b.block FROM django_rag_postblock AS b
                WHERE (b.collection_id, b.space, b.term, b.bucket) = (g.collection_id, g.space, g.term, g.bucket)
                  AND b.n < 512
                ORDER BY b.block LIMIT 1
                FOR UPDATE SKIP LOCKED
            ) AS o
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
        -- Chunk counts and lengths from the lengths (a chunk each), not from every posting.
        INSERT INTO django_rag_textstats AS s (collection_id, space, shard, chunks, length)
        SELECT n.collection_id, n.space, my_shard, count(*), sum(l.dl)
        FROM new_rows AS n JOIN lengths AS l ON l.id = n.id
        GROUP BY n.collection_id, n.space ORDER BY n.collection_id, n.space
"""

# 0008's function, restored when this migration is reversed.
PREVIOUS = _FUNCTION + " AS $fn$\n" + _START + _APPEND_0008 + _END

WRITES = _FUNCTION + """
-- Planned on every call, with its variables' values and the tables' current sizes: after five
-- calls a session may switch to a generic plan, which took 22 s instead of 1 s per 1,280
-- chunks. Blocks are only ever found by key, never by a scan of the table. Sorts in memory.
SET plan_cache_mode = force_custom_plan SET enable_seqscan = off SET work_mem = '32MB'
AS $fn$
""" + _START + _APPEND + _END


class Migration(migrations.Migration):

    dependencies = [
        ('django_rag', '0010_ingest_jobs'),
    ]

    operations = [
        migrations.RunSQL(WRITES, PREVIOUS),
    ]
