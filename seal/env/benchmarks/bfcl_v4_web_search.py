"""BFCL V4 web search (out of domain; the paper's Table 2 with memory): 100 multi-hop questions, each one
turn with a search engine and a page fetcher, with and without result snippets; the final text answer
is checked by the agentic check. The search engine is pluggable (seal.env.search)."""

from __future__ import annotations

import ast
from typing import Any

from seal.env.entry import Entry
from seal.env.benchmarks.agentic import Agentic, agentic_reply, unescaped
from seal.env.benchmarks.base import register
from seal.env.benchmarks.bfcl_eval_data import load_entries
from seal.env.calls import ToolCall


@register("bfcl_v4_web_search")
class BFCLV4WebSearch(Agentic):
    CATEGORIES = ("web_search_base", "web_search_no_snippet")

    def __init__(self, name: str | None = None, categories: list[str] | None = None, search_url: str | None = None):
        super().__init__(name, categories)
        # None: BFCL's SerpAPI backend; else an endpoint in its layout (seal.env.search)
        self.search_url = search_url

    def prepare(self) -> None:
        from seal.env.search import check_search_backend

        check_search_backend(self.search_url)

    def entries(self, category: str, files_dir: Any = None) -> list[Entry]:
        def config(item: dict[str, Any]) -> dict[str, Any]:
            return {item["involved_classes"][0]: {"show_snippet": category == "web_search_base",
                                                  "search_url": self.search_url}}

        return load_entries(self.name, category, "web_search", "agentic", config)

    def oracle_message(self, episode: Any, entry: Entry, fmt: Any) -> str:
        """Search for the question, fetch the first result, and answer with an acceptable answer only if
        the fetched page contains it."""
        steps, docs = episode.steps[-1], entry.docs_by_name()
        if not steps:
            question = next(m["content"] for m in episode.turns[0] if m["role"] == "user")
            return fmt.render_calls([ToolCall("search_engine_query", (), {"keywords": question})], docs)
        if len(steps) == 1:
            try:  # the results come back as Python's rendering of a list of dicts (bfcl-eval's stringify)
                url = ast.literal_eval(steps[0].calls[0].observation)[0]["href"]
            except (ValueError, SyntaxError, LookupError, TypeError):
                return agentic_reply("I do not know")
            return fmt.render_calls([ToolCall("fetch_url_content", (), {"url": url, "mode": "truncate"})], docs)
        page = unescaped(steps[-1].calls[0].observation).lower()
        known = [a for a in entry.answers if a.lower() in page]
        return agentic_reply(known[0] if known else "I do not know")
