"""Write a migration (or print SQL) creating one ANN index per configured embedding space."""

from __future__ import annotations

import re
import sysconfig
from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from django.apps import apps
from django.core.management.base import CommandError
from django.db import DatabaseError, connections, migrations
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.writer import MigrationWriter

from django_rag.conf import rag_settings
from django_rag.ddl import IndexSpec, configured_spaces
from django_rag.exceptions import RagError
from django_rag.management.options import add_database_argument
from django_rag.management.output import RagCommand


class Command(RagCommand):
    help = "Emit a migration with one ANN (HNSW or IVFFlat) index per configured embedding space."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--app", help="App label of the site app that receives the migration.")
        parser.add_argument(
            "--sql", action="store_true", help="Print the SQL instead of writing a migration."
        )
        parser.add_argument("--index", choices=["hnsw", "ivfflat"], default="hnsw")
        parser.add_argument("--m", type=int, default=16, help="HNSW: max connections per layer (default 16).")
        parser.add_argument(
            "--ef-construction",
            type=int,
            default=64,
            help="HNSW: candidate list size while building (default 64).",
        )
        parser.add_argument("--lists", type=int, default=100, help="IVFFlat: number of lists (default 100).")
        parser.add_argument(
            "--concurrently",
            action="store_true",
            help="CREATE INDEX CONCURRENTLY (non-atomic migration; no table lock).",
        )
        parser.add_argument(
            "--maintenance-work-mem",
            help="SET maintenance_work_mem for the build, e.g. 1GB (size it to the graph; "
            "keep it under /dev/shm).",
        )
        parser.add_argument("--name", default="rag_indexes", help="Migration name suffix.")
        parser.add_argument(
            "--check",
            action="store_true",
            help="Write nothing; exit non-zero if a configured space has no ANN index in --database.",
        )
        add_database_argument(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        for flag in ("m", "ef_construction", "lists"):
            if options[flag] < 1:
                raise CommandError(f"--{flag.replace('_', '-')} must be a positive integer")
        try:
            spaces = configured_spaces()
        except RagError as exc:
            raise CommandError(str(exc)) from exc
        specs = []
        for space, dims in spaces.items():
            spec = IndexSpec(
                space,
                dims,
                method=options["index"],
                m=options["m"],
                ef_construction=options["ef_construction"],
                lists=options["lists"],
            )
            if spec.indexable:
                specs.append(spec)
            else:
                self.stderr.write(
                    self.style.WARNING(
                        f"space {space!r} has {dims} dimensions; pgvector indexes at most 4000 (halfvec), "
                        "so searches in it stay exact."
                    )
                )
        if options["check"]:
            self._check(specs, options["database"] or rag_settings.DATABASE)
            return
        concurrently = options["concurrently"]
        statements = [spec.create_sql(concurrently=concurrently) for spec in specs]
        if options["sql"]:
            if options["maintenance_work_mem"]:
                self.stdout.write(f"SET maintenance_work_mem = '{_memory(options['maintenance_work_mem'])}';")
            for statement in statements:
                self.stdout.write(statement + ";")
            return
        if not options["app"]:
            raise CommandError("pass --app APP_LABEL (the site app that will own the migration) or --sql")
        self._write(options["app"], specs, options)

    def _check(self, specs: list[IndexSpec], using: str) -> None:
        try:
            with connections[using].cursor() as cursor:
                cursor.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'django_rag_chunk'")
                present = {row[0] for row in cursor.fetchall()}
        except DatabaseError as exc:
            raise CommandError(f"cannot read the indexes of database {using!r}: {exc}") from exc
        missing = [spec for spec in specs if spec.name not in present]
        for spec in specs:
            state = "missing" if spec in missing else "present"
            self.stdout.write(f"{spec.space}: {spec.method} index {spec.name} {state} in {using!r}")
        if missing:
            raise CommandError(
                f"{len(missing)} embedding space(s) have no ANN index in {using!r}; run "
                "`manage.py rag_migration --app <your_app>` then `manage.py migrate`"
            )

    def _write(self, app_label: str, specs: list[IndexSpec], options: dict[str, Any]) -> None:
        try:
            apps.get_app_config(app_label)
        except LookupError as exc:
            raise CommandError(_unknown_app(app_label)) from exc
        if app_label == "django_rag":
            raise CommandError(
                "write the migration into your own app, not django_rag (its indexes depend on your settings)"
            )
        loader = MigrationLoader(None, ignore_no_migrations=True)
        module_name, _ = loader.migrations_module(app_label)
        if module_name is None:
            raise CommandError(f"app {app_label!r} has migrations disabled (MIGRATION_MODULES)")
        emitted = {
            sql
            for (label, _), migration in loader.disk_migrations.items()
            if label == app_label
            for operation in migration.operations
            if isinstance(operation, migrations.RunSQL)
            for sql in ([operation.sql] if isinstance(operation.sql, str) else operation.sql)
            if isinstance(sql, str)
        }
        missing = [spec for spec in specs if not any(f'"{spec.name}"' in sql for sql in emitted)]
        if not missing:
            self.stdout.write("No changes: every configured embedding space already has its index migration.")
            return
        leaves = loader.graph.leaf_nodes(app_label)
        number = 1 + max(
            (int(name.split("_")[0]) for _, name in leaves if name.split("_")[0].isdigit()), default=0
        )
        concurrently = options["concurrently"]
        operations: list[migrations.RunSQL] = []
        if options["maintenance_work_mem"]:
            # SET (not SET LOCAL): a CONCURRENTLY build runs outside a transaction.
            operations.append(
                migrations.RunSQL(
                    f"SET maintenance_work_mem = '{_memory(options['maintenance_work_mem'])}'",
                    migrations.RunSQL.noop,
                )
            )
        operations += [
            migrations.RunSQL(
                spec.create_sql(concurrently=concurrently),
                reverse_sql=spec.drop_sql(concurrently=concurrently),
            )
            for spec in missing
        ]
        migration = type(
            "Migration",
            (migrations.Migration,),
            {
                "dependencies": [("django_rag", "0001_initial"), *sorted(leaves)],
                "operations": operations,
                "atomic": not concurrently,
            },
        )(f"{number:04d}_{options['name']}", app_label)
        writer = MigrationWriter(migration)
        with open(writer.path, "w") as handle:
            handle.write(writer.as_string())
        self.stdout.write(self.style.SUCCESS(f"Wrote {writer.path}"))
        for spec in missing:
            self.stdout.write(f"  - {spec.method} index {spec.name} on {spec.space} ({spec.column_type})")


def _unknown_app(app_label: str) -> str:
    """The error for a wrong --app: the labels that exist, and which of them are the site's own."""
    configs = sorted(apps.get_app_configs(), key=lambda config: config.label)
    # Apps installed from packages (django.contrib, third parties) must not receive the migration.
    packaged = {Path(sysconfig.get_path(name)).resolve() for name in ("purelib", "platlib")}
    own = [
        config.label
        for config in configs
        if config.label != "django_rag" and not packaged & set(Path(config.path).resolve().parents)
    ]
    message = (
        f"no installed app with label {app_label!r}; the installed app labels are "
        f"{', '.join(config.label for config in configs)}. "
    )
    if own:
        return message + f"Pass one of your site's own apps: {', '.join(own)}."
    return message + (
        "None of them is your site's own: create one (`manage.py startapp kb`), add 'kb' to "
        "INSTALLED_APPS, then run `manage.py rag_migration --app kb`."
    )


def _memory(value: str) -> str:
    if not re.fullmatch(r"\d+\s*(kB|MB|GB)", value.strip()):
        raise CommandError(f"--maintenance-work-mem takes a size like 256MB or 1GB, got {value!r}")
    return value.strip()
