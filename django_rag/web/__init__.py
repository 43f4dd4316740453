"""The site-facing part: search and ask pages, JSON endpoints, the source view, admin tools.

Mount it with ``path("kb/", include("django_rag.urls"))``; configure it with ``RAG["WEB"]``
(see ``django_rag.conf.DEFAULTS["WEB"]`` and docs/web.md).
"""
