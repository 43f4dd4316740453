"""URLs of the web tests: the app's pages under /kb/ and the admin."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("kb/", include("django_rag.urls")),
    path("admin/", admin.site.urls),
]
