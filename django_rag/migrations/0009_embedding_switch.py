"""A collection's active embedding space, and the switch to a new embedder while it is filled."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_rag", "0008_posting_blocks"),
    ]

    operations = [
        migrations.AddField(
            model_name="collection",
            name="active_embedder",
            field=models.CharField(
                blank=True,
                default="",
                help_text="Alias whose vectors searches use until a switch to EMBEDDER flips.",
                max_length=100,
                verbose_name="active embedder",
            ),
        ),
        migrations.AddField(
            model_name="collection",
            name="active_space",
            field=models.CharField(blank=True, default="", max_length=200, verbose_name="active space"),
        ),
        migrations.CreateModel(
            name="EmbeddingSwitch",
            fields=[
                (
                    "collection",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="switch",
                        serialize=False,
                        to="django_rag.collection",
                    ),
                ),
                ("embedder", models.CharField(max_length=100, verbose_name="target embedder")),
                ("space", models.CharField(max_length=200, verbose_name="target space")),
                ("source_space", models.CharField(max_length=200, verbose_name="source space")),
                ("started_at", models.DateTimeField(auto_now_add=True, verbose_name="started")),
                ("run_started_at", models.DateTimeField(blank=True, null=True, verbose_name="run started")),
                (
                    "run_documents",
                    models.PositiveBigIntegerField(default=0, verbose_name="documents embedded by this run"),
                ),
                ("texts_embedded", models.PositiveBigIntegerField(default=0, verbose_name="texts embedded")),
                ("progress_at", models.DateTimeField(blank=True, null=True, verbose_name="last batch")),
            ],
            options={
                "verbose_name": "embedding switch",
                "verbose_name_plural": "embedding switches",
            },
        ),
    ]
