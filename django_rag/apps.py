from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class DjangoRagConfig(AppConfig):
    name = "django_rag"
    verbose_name = _("Knowledge base")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers the system checks)
        from .media import connect_signals

        # Models registered in a models.py are known by now; later ones connect when registered.
        connect_signals()
