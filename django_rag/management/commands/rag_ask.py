"""Ask a collection a question from the shell: ``manage.py rag_ask "how do I back up?" --collection docs``."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import CommandError
from django.db import DatabaseError
from django.utils.translation import gettext as _

from django_rag.answer import AnswerStream, Prompt, answer_prompt, prepare
from django_rag.api import strategy_chat
from django_rag.exceptions import RagError
from django_rag.management.options import (
    add_search_arguments,
    database_failed,
    get_collection,
    hit_label,
    search_options,
)
from django_rag.management.output import RagCommand, printable, printable_json
from django_rag.types import Answer


class Command(RagCommand):
    help = (
        "Answer a question from a collection with the chat model of RAG['CHAT'] and list the cited "
        "sources (-v 2: every passage sent and the token usage; --json: one JSON object)."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("question", help="The question to answer.")
        add_search_arguments(parser, default_k=6)
        parser.add_argument("--stream", action="store_true", help="Print the answer as it is generated.")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["stream"] and options["json"]:
            raise CommandError(_("--stream and --json cannot be combined"))
        try:
            searching = search_options(options)
            # RAG["CHAT"], when it is a language model, writes the query variants or the cuts too.
            rewriter = strategy_chat(None, searching.get("strategy"), searching.get("compress") is True)
            prompt = prepare(
                get_collection(options["collection"], options["database"]),
                options["question"],
                rewriter=rewriter,
                **searching,
            )
            answer = self._stream(prompt) if options["stream"] else answer_prompt(prompt)
        except RagError as exc:
            raise CommandError(str(exc)) from exc
        except DatabaseError as exc:
            raise database_failed(exc) from exc
        if options["json"]:
            self.stdout.write(printable_json(answer_json(prompt, answer)))
            return
        if not options["stream"]:
            self.stdout.write(printable(answer.text, lines=True))
        self._sources(prompt, answer, options["verbosity"])

    def _stream(self, prompt: Prompt) -> Answer:
        stream = AnswerStream(prompt)
        for delta in stream:
            self.stdout.write(printable(delta, lines=True), ending="")
            self.stdout.flush()
        self.stdout.write("")  # end the answer's line
        return stream.answer

    def _sources(self, prompt: Prompt, answer: Answer, verbosity: int) -> None:
        cited = prompt.cited(answer.text)
        numbered = list(enumerate(prompt.sources, start=1)) if verbosity >= 2 else cited
        if verbosity >= 1 and numbered:
            self.stdout.write("\n" + (_("Passages:") if verbosity >= 2 else _("Sources:")))
            cited_numbers = {number for number, _hit in cited}
            for number, hit in numbered:
                source = hit.document.source if hit.document is not None else ""
                line = f"[{number}] {printable(hit_label(hit))}" + (
                    f" — {printable(source)}" if source else ""
                )
                if verbosity >= 2:
                    line += f"  (score {hit.score:.4f}{', ' + _('cited') if number in cited_numbers else ''})"
                self.stdout.write(line)
        if verbosity >= 2 and answer.usage:
            usage = ", ".join(f"{name} {value}" for name, value in answer.usage.items())
            self.stdout.write("\n" + _("Usage: %(usage)s") % {"usage": usage})


def answer_json(prompt: Prompt, answer: Answer) -> dict[str, Any]:
    return {
        "answer": answer.text,
        "citations": [
            {
                "n": number,
                "source_id": hit.source_id,
                "title": hit.document.title if hit.document is not None else "",
                "source": hit.document.source if hit.document is not None else "",
                "page": hit.page,
                "score": hit.score,
            }
            for number, hit in prompt.cited(answer.text)
        ],
        "usage": answer.usage,
    }
