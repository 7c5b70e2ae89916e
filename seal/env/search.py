"""The web-search backend of BFCL V4's web_search categories, with a pluggable search engine.

bfcl-eval's `WebSearchAPI` asks SerpAPI (DuckDuckGo engine; needs SERPAPI_API_KEY and the network) and
fetches pages with `requests`. `SearchAPI` keeps all of that, page fetching included, and can instead
ask any HTTP endpoint that answers `GET <search_url>?q=<keywords>&kl=<region>&num=<n>` with SerpAPI's
JSON layout (`{"organic_results": [{"title", "link", "snippet"}, ...]}`): a self-hosted engine, or the
recorded fixture the tests serve on the loopback interface. The results reach the model in exactly the
layout bfcl-eval gives them.
"""

from __future__ import annotations

import os
from typing import Optional
from urllib.parse import urlencode

from seal.env.entry import prepare_bfcl_import

prepare_bfcl_import()
from bfcl_eval.eval_checker.multi_turn_eval.func_source_code.web_search import WebSearchAPI  # noqa: E402

SERPAPI_KEY = "SERPAPI_API_KEY"


def check_search_backend(url: str | None) -> None:
    """One sentence when no search engine is reachable by configuration."""
    from seal.errors import UserError

    if url is None and not os.environ.get(SERPAPI_KEY):
        raise UserError(
            f"benchmark=bfcl_v4_web_search needs a search engine: export {SERPAPI_KEY}=<key> to use BFCL's "
            "SerpAPI backend (network required), or set benchmark.search_url=<http endpoint answering in "
            "SerpAPI's JSON layout>"
        )


class SearchAPI(WebSearchAPI):
    """bfcl-eval's web-search tools; with `search_url` in the initial config, searches go there."""

    def _load_scenario(self, initial_config: dict, long_context: bool = False):
        super()._load_scenario(initial_config, long_context)
        self._search_url = initial_config.get("search_url")

    def search_engine_query(
        self,
        keywords: str,
        max_results: Optional[int] = 10,
        region: Optional[str] = "wt-wt",
    ) -> list:
        """Search the web for `keywords`; a list of {title, href, body} results (body only with snippets)."""
        if getattr(self, "_search_url", None) is None:
            return super().search_engine_query(keywords, max_results, region)
        import requests

        query = urlencode({"q": keywords, "kl": region, "num": max_results})
        try:
            response = requests.get(f"{self._search_url}?{query}", timeout=20)
            response.raise_for_status()
            payload = response.json()
        except Exception as exc:  # the engine's failure is the tool's answer, as in bfcl-eval
            return {"error": str(exc)}
        if not isinstance(payload, dict) or "organic_results" not in payload:
            return {"error": "Failed to retrieve the search results from server. Please try again later."}
        results = []
        for item in payload["organic_results"][: max_results if isinstance(max_results, int) else 10]:
            result = {"title": item["title"], "href": item["link"]}
            if self.show_snippet:
                result["body"] = item["snippet"]
            results.append(result)
        return results
