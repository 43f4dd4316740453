from django.apps import AppConfig


class SiteAppConfig(AppConfig):
    """A stand-in for a site's own app: rag_migration writes its index migrations here in tests."""

    name = "tests.siteapp"
    label = "siteapp"
    default_auto_field = "django.db.models.BigAutoField"
