from django.apps import AppConfig


class KbConfig(AppConfig):
    """The example site's own app: it owns the ANN index migration emitted by rag_migration."""

    name = "example_project.kb"
    label = "kb"
    default_auto_field = "django.db.models.BigAutoField"
