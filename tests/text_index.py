"""The check that BM25 postings and statistics say what the stored text vectors say."""

from __future__ import annotations

from django.db import connection

__all__ = ["assert_text_index_matches_chunks"]


def assert_text_index_matches_chunks() -> None:
    """Postings and statistics (collection totals, per-term frequencies) equal what the stored
    tsvectors say, whatever wrote the chunks."""
    expected_postings = """
        SELECT c.id, c.collection_id, c.space, u.lexeme, coalesce(array_length(u.positions, 1), 1),
               sum(coalesce(array_length(u.positions, 1), 1)) OVER (PARTITION BY c.id)
        FROM django_rag_chunk AS c CROSS JOIN LATERAL unnest(c.search_vector) AS u
        WHERE c.search_vector IS NOT NULL"""
    stored_postings = "SELECT chunk_id, collection_id, space, term, tf, dl FROM django_rag_posting"
    with connection.cursor() as cursor:
        for left, right in ((expected_postings, stored_postings), (stored_postings, expected_postings)):
            cursor.execute(f"SELECT count(*) FROM ({left} EXCEPT ALL {right}) AS d")
            assert cursor.fetchone()[0] == 0
        cursor.execute("""
            SELECT c.collection_id, c.space, count(*), sum(l.n) FROM django_rag_chunk AS c
            CROSS JOIN LATERAL (
                SELECT sum(coalesce(array_length(u.positions, 1), 1)) AS n FROM unnest(c.search_vector) AS u
            ) AS l
            WHERE c.search_vector IS NOT NULL GROUP BY 1, 2 ORDER BY 1, 2""")
        expected_stats = [(c, s, int(n), int(length)) for c, s, n, length in cursor.fetchall()]
        cursor.execute("""
            SELECT collection_id, space, sum(chunks), sum(length) FROM django_rag_textstats
            GROUP BY 1, 2 HAVING sum(chunks) <> 0 OR sum(length) <> 0 ORDER BY 1, 2""")
        assert [(c, s, int(n), int(length)) for c, s, n, length in cursor.fetchall()] == expected_stats
        cursor.execute("""
            SELECT collection_id, space, term, count(*) FROM django_rag_posting
            GROUP BY 1, 2, 3 ORDER BY 1, 2, 3""")
        expected_dfs = cursor.fetchall()
        cursor.execute("""
            SELECT collection_id, space, term, sum(n) FROM django_rag_postblock
            GROUP BY 1, 2, 3 ORDER BY 1, 2, 3""")
        assert [(c, s, t, int(df)) for c, s, t, df in cursor.fetchall()] == expected_dfs
        # The blocks themselves: parallel arrays, never empty, each posting in its chunk's bucket, once.
        cursor.execute("""
            SELECT count(*) FROM django_rag_postblock
            WHERE cardinality(chunks) = 0 OR cardinality(chunks) <> n
               OR cardinality(chunks) <> cardinality(tfs) OR cardinality(chunks) <> cardinality(dls)""")
        assert cursor.fetchone()[0] == 0
        cursor.execute("SELECT count(*) FROM django_rag_posting WHERE bucket <> chunk_id >> 14")
        assert cursor.fetchone()[0] == 0
        cursor.execute("""
            SELECT count(*) FROM (SELECT 1 FROM django_rag_posting GROUP BY chunk_id, space, term
            HAVING count(*) > 1) AS d""")
        assert cursor.fetchone()[0] == 0
