"""Answers with citations: chat backends, the prompt, ``ask()`` and streaming."""

from .ask import (
    NOT_ENOUGH_INFORMATION,
    AnswerStream,
    Prompt,
    answer_prompt,
    ask,
    check_answer_options,
    prepare,
    prompt_for,
)
from .chat import ChatBackend, ChatStream, Message, OpenAIChat, get_chat, load_chat
from .conversation import Exchange, carry_terms, standalone_question
from .extractive import ExtractiveChat
from .prompts import SYSTEM_PROMPT, build_messages, cited_numbers, format_context

__all__ = [
    "NOT_ENOUGH_INFORMATION",
    "SYSTEM_PROMPT",
    "AnswerStream",
    "ChatBackend",
    "ChatStream",
    "Exchange",
    "ExtractiveChat",
    "Message",
    "OpenAIChat",
    "Prompt",
    "answer_prompt",
    "ask",
    "build_messages",
    "carry_terms",
    "check_answer_options",
    "cited_numbers",
    "format_context",
    "get_chat",
    "load_chat",
    "prepare",
    "prompt_for",
    "standalone_question",
]
