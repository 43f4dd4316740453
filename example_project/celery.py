"""The example site's Celery app. Run a worker with:

    CELERY_BROKER_URL=redis://127.0.0.1:6379/0 celery -A example_project worker -l info

Start ``manage.py runserver`` with the same CELERY_BROKER_URL so uploads go to the worker;
without it they are ingested inline, after the request's commit.
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")

app = Celery("example_project")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
