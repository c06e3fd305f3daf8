"""Readable text from a fetched body, by content type (docs/tools.md, web_fetch).

HTML: hidden content is removed first (it is a common carrier of prompt injection: text a person never sees),
then readability-lxml picks the main article and markdownify turns it into markdown. Why these: readability-lxml
is a maintained port of Mozilla's Readability algorithm, the one browsers' reader views use, on lxml, a
parser we need anyway; markdownify is a small, typed, maintained HTML-to-markdown converter. trafilatura extracts
well too but pulls in a much larger dependency tree (date parsing, URL handling, charset detection) for features
this tool does not use. Text mode is the markdown with its syntax removed, so both modes keep the same blocks."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import lxml.etree
import lxml.html
from markdownify import markdownify
from readability import Document  # type: ignore[import-untyped]
from readability.readability import Unparseable  # type: ignore[import-untyped]

from general_agent_server.tools.runtime import ToolFailure

# Readability is quadratic-ish on huge pages; above this the page is converted without it.
MAX_READABILITY_CHARS = 1_000_000

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})

# Never visible text: dropped with their content.
_DROPPED_TAGS = ("script", "style", "noscript", "meta", "template", "svg", "canvas", "iframe", "object", "embed")
_HIDDEN_CLASSES = frozenset({"hidden", "d-none", "sr-only", "visually-hidden", "screen-reader-text", "invisible"})
# "hidden md:block" (Tailwind) and "d-none d-md-block" (Bootstrap) are visible on wider screens: keep them.
_RESPONSIVE_DISPLAY = re.compile(r"^(?:[a-z0-9]+:|d-(?:sm|md|lg|xl|xxl)-)")
_HIDDEN_STYLE = re.compile(
    r"display\s*:\s*none|visibility\s*:\s*hidden|opacity\s*:\s*0(?:\.0+)?\s*(?:;|!|$)"
    r"|font-size\s*:\s*0(?:px|em|rem|pt)?\s*(?:;|!|$)|(?:left|top|text-indent)\s*:\s*-\d{3,}",
    re.IGNORECASE,
)
_EXCESS_BLANK_LINES = re.compile(r"\n{3,}")


@dataclass(frozen=True, slots=True)
class Extracted:
    text: str
    extractor: str  # readability | firecrawl | raw-html | cf-markdown | json | raw
    title: str | None = None


def _is_hidden(element: lxml.html.HtmlElement) -> bool:
    if element.get("hidden") is not None or element.get("aria-hidden", "").lower() == "true":
        return True
    if element.tag == "input" and element.get("type", "").lower() == "hidden":
        return True
    classes = element.get("class", "").split()
    if _HIDDEN_CLASSES.intersection(classes) and not any(_RESPONSIVE_DISPLAY.match(c) for c in classes):
        return True
    return bool(_HIDDEN_STYLE.search(element.get("style", "")))


def remove_hidden(root: lxml.html.HtmlElement) -> None:
    for node in list(root.iter(lxml.etree.Comment, lxml.etree.ProcessingInstruction, *_DROPPED_TAGS)):
        if node is not root:
            node.drop_tree()
    for element in [e for e in root.iter() if isinstance(e, lxml.html.HtmlElement) and _is_hidden(e)]:
        if element is not root:
            element.drop_tree()


def _to_markdown(html: str) -> str:
    try:
        markdown = markdownify(html, heading_style="ATX", bullets="-")
    except RecursionError:  # pathological nesting: keep the words, lose the structure
        markdown = " ".join(lxml.html.fromstring(html).itertext())
    return _EXCESS_BLANK_LINES.sub("\n\n", markdown).strip()


_MARKDOWN_RULES = (
    (re.compile(r"^```.*$\n?", re.MULTILINE), ""),
    (re.compile(r"!\[([^\]]*)\]\([^)]*\)"), r"\1"),
    (re.compile(r"\[([^\]]*)\]\([^)]*\)"), r"\1"),
    (re.compile(r"^[ \t]{0,3}#{1,6}[ \t]+", re.MULTILINE), ""),
    (re.compile(r"^[ \t]{0,3}>[ \t]?", re.MULTILINE), ""),
    (re.compile(r"^[ \t]*(?:[-*_][ \t]*){3,}$", re.MULTILINE), ""),
    (re.compile(r"(\*\*|__)(.+?)\1"), r"\2"),
    (re.compile(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])"), r"\1"),
    (re.compile(r"`([^`]*)`"), r"\1"),
)


def markdown_to_text(markdown: str) -> str:
    """Markdown syntax removed, words and line structure kept."""
    for pattern, replacement in _MARKDOWN_RULES:
        markdown = pattern.sub(replacement, markdown)
    return _EXCESS_BLANK_LINES.sub("\n\n", markdown).strip()


def _render(html: str, mode: str) -> str:
    markdown = _to_markdown(html)
    return markdown if mode == "markdown" else markdown_to_text(markdown)


def _readable(cleaned: str) -> tuple[str, str | None] | None:
    try:
        document = Document(cleaned)
        summary: str = document.summary(html_partial=True)
        title: str = document.short_title()
    except Unparseable:
        return None
    return summary, title or None


@dataclass(frozen=True, slots=True)
class CleanPage:
    """Parsed HTML with absolute links and hidden content removed."""

    root: lxml.html.HtmlElement
    title: str | None
    source_chars: int


def clean_html(html: str, *, base_url: str) -> CleanPage:
    try:
        root = lxml.html.document_fromstring(html)
    except (lxml.etree.ParserError, ValueError):
        raise ToolFailure("Web fetch extraction failed: the page could not be parsed as HTML.") from None
    # Relative links mean nothing to the model once the page is text.
    root.make_links_absolute(base_url, handle_failures="discard")
    title = (root.findtext(".//title") or "").strip() or None
    remove_hidden(root)
    return CleanPage(root=root, title=title, source_chars=len(html))


def readable_html(page: CleanPage, mode: str) -> Extracted | None:
    """Readability's main article, or None when it finds nothing (or the page is too large for it)."""
    if page.source_chars > MAX_READABILITY_CHARS:
        return None
    # Readability works on a serialised copy: the page stays intact for basic_html.
    readable = _readable(lxml.html.tostring(page.root, encoding="unicode"))
    if readable is None:
        return None
    text = _render(readable[0], mode)
    return Extracted(text=text, extractor="readability", title=readable[1] or page.title) if text else None


def basic_html(page: CleanPage, mode: str, *, firecrawl_tried: bool = False) -> Extracted:
    """The whole visible page converted, the last resort."""
    body = page.root.find("body")
    text = _render(lxml.html.tostring(body if body is not None else page.root, encoding="unicode"), mode)
    if text:
        return Extracted(text=text, extractor="raw-html", title=page.title)
    tried = (
        "Readability, Firecrawl, and basic HTML cleanup" if firecrawl_tried else "Readability and basic HTML cleanup"
    )
    raise ToolFailure(f"Web fetch extraction failed: {tried} returned no content.")


def extract_html(html: str, mode: str, *, readability: bool, base_url: str) -> Extracted:
    page = clean_html(html, base_url=base_url)
    return (readable_html(page, mode) if readability else None) or basic_html(page, mode)


def html_to_plain_text(html: str) -> str:
    """Error pages: just the visible words."""
    try:
        root = lxml.html.document_fromstring(html)
    except (lxml.etree.ParserError, ValueError):
        return html
    remove_hidden(root)
    text = markdown_to_text(_to_markdown(lxml.html.tostring(root, encoding="unicode")))
    return re.sub(r"\s+", " ", text).strip()


def _is_json(media_type: str) -> bool:
    return media_type == "application/json" or media_type.endswith("+json")


def extract(body: str, media_type: str, mode: str, *, readability: bool, base_url: str) -> Extracted:
    if media_type in HTML_TYPES:
        return extract_html(body, mode, readability=readability, base_url=base_url)
    if media_type == "text/markdown":
        return Extracted(text=body if mode == "markdown" else markdown_to_text(body), extractor="cf-markdown")
    if _is_json(media_type):
        try:
            return Extracted(text=json.dumps(json.loads(body), indent=2, ensure_ascii=False), extractor="json")
        except ValueError:
            return Extracted(text=body, extractor="raw")
    return Extracted(text=body, extractor="raw")
