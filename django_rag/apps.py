"""The app config: ``ready()`` loads the modules that need the registry and connects the signal receivers."""

from django.apps import AppConfig
from django.db.backends.signals import connection_created
from django.utils.translation import gettext_lazy as _

from .querysets import apply_session_settings


class DjangoRagConfig(AppConfig):
    name = "django_rag"
    verbose_name = _("Knowledge base")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The app-registry boundary: these modules import models, so they load once the registry is
        # ready. api defines the KnowledgeBase proxy model; importing checks, search.checks and
        # web.checks registers the checks.
        from . import api, checks, tasks  # noqa: F401
        from .search import checks as search_checks  # noqa: F401
        from .web import checks as web_checks  # noqa: F401

        connection_created.connect(apply_session_settings, dispatch_uid="django_rag.session_settings")
        tasks.connect_signals()
