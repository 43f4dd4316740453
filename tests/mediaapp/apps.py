from django.apps import AppConfig


class MediaAppConfig(AppConfig):
    """A site's app as the ingestion tests see it: models registered with django_rag.register()."""

    name = "tests.mediaapp"
    label = "mediaapp"
    default_auto_field = "django.db.models.BigAutoField"
