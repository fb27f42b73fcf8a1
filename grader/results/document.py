"""One way to say things to people: a small document model, rendered to Markdown and to an HTML page.

Every page and text the kit writes for a person is described once, as sections, paragraphs,
preformatted text, tables, images, figures and lists: a student's feedback.md and feedback.html
(`grader.results.feedback.feedback_document`), the class report's summary.md and report.html
(`grader.results.classreport.class_document`) and similarity.html. `to_markdown` and `to_html`
render it, so a text and its page cannot say different things. Inline content is a string, one of
the marks below, or a list of those. Every string is text, never markup: each renderer escapes it
for its medium (Markdown: backslash escapes, whitespace runs made one space, fences longer than any
backtick run inside; HTML: html.escape), and nothing is ever parsed back out of rendered text.

Every page carries one Content-Security-Policy (`POLICY`): nothing on it can run, load or submit
anything, whatever a student wrote. Also here: how numbers are written for people.
"""
from __future__ import annotations

import html
from dataclasses import dataclass, field

MEDIA = ("markdown", "html")
# The style of every page the report writes (the class report and each student's feedback page).
STYLE = """body{font-family:system-ui,sans-serif;max-width:60em;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.2em .6em;text-align:left}
td.n{text-align:right}img{max-width:100%}code{background:#f4f4f4;padding:0 .2em}
.bad{color:#b00}figure{display:inline-block;margin:.5em}figcaption{font-size:.85em}
pre{white-space:pre-wrap;background:#f6f6f6;padding:.5em}body,td,th,li,p,h1,h2,h3,pre,code{overflow-wrap:anywhere}
table{max-width:100%}"""  # a long line without a space (a hint, an error, a name) wraps: the page keeps its width
# What a page we write may do: show its own styles and pictures (the report's _plots/, similarity's
# thumbnails as data: URIs), nothing else: no script, no frame, no form, no other origin.
POLICY = "default-src 'none'; img-src 'self' data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
# The same rules for the pages the review server serves (grader/admin/review.py), which also run the
# server's own script and post its own forms; sent as a header, so frames are refused too.
SERVED_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; form-action 'self'; "
                 "base-uri 'none'; frame-ancestors 'none'")
SHOWN_DIGITS = 2  # a person reads points with at most this many decimals; files for machines keep more


# ---------------------------------------------------------------- numbers


def number(x: float, digits: int = SHOWN_DIGITS) -> str:
    """A score as a person writes it: 30, 12.5, 6.67 (at most `digits` decimals, none trailing)."""
    text = f"{round(float(x), digits):.{digits}f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def mean(x: float) -> str:
    """A class mean: one decimal is enough to read."""
    return number(round(float(x), 1))


# ---------------------------------------------------------------- Markdown escaping


def md_inline(text: str) -> str:
    """One line of untrusted text, shown literally in Markdown.

    Escapes what could make markup of it (links, images, HTML, code, emphasis, table cells,
    headings); an intraword `_` is left alone, CommonMark never reads it as emphasis.
    """
    text = " ".join(str(text).split())
    for ch in "\\`*[]<|#":
        text = text.replace(ch, "\\" + ch)
    return text


def md_code(text: str) -> str:
    """Untrusted text as an inline code span (a backtick inside would end it early)."""
    return "`" + " ".join(str(text).replace("`", "'").split()) + "`"


def fence(text: str) -> str:
    """Untrusted text as a fenced block longer than any backtick run inside, so it can't close it."""
    longest = run = 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    bar = "`" * max(3, longest + 1)
    return f"{bar}text\n{text.rstrip()}\n{bar}"


# ---------------------------------------------------------------- the model

@dataclass(frozen=True)
class Code:
    """An identifier (a test id, a hint id): a code span."""
    text: str


@dataclass(frozen=True)
class FileName:
    """A name a student chose for a file or folder: shown exactly, as text in Markdown (a code span
    would turn its backticks into quotes) and in <code> on the page."""
    text: str


@dataclass(frozen=True)
class Strong:
    content: object


@dataclass(frozen=True)
class Link:
    text: str
    href: str  # a relative path the report wrote, already %-quoted


@dataclass(frozen=True)
class Paragraph:
    content: object
    warning: bool = False  # something went wrong: bold in Markdown, red on the page


@dataclass(frozen=True)
class Preformatted:
    """Text shown exactly as it is, line by line (a test's output, an error): a fence in Markdown
    longer than any backtick run inside, so the text cannot close it; <pre> on the page."""
    text: str


@dataclass(frozen=True)
class Image:
    src: str  # a relative path the report wrote
    alt: str


@dataclass(frozen=True)
class Figure:
    src: str
    alt: str
    caption: object


@dataclass(frozen=True)
class Figures:
    """Pictures side by side on the page, a list of captioned pictures in Markdown."""
    figures: list


@dataclass(frozen=True)
class Cell:
    content: object
    bad: bool = False  # red on the page


@dataclass(frozen=True)
class Table:
    header: tuple
    rows: list  # each a list of inline content or Cell
    numeric: frozenset = frozenset()  # column indexes aligned right


@dataclass(frozen=True)
class Item:
    content: object
    sub: tuple = ()  # inline content of each nested item


@dataclass(frozen=True)
class Bullets:
    items: list  # Item, or inline content for an item without nested ones


@dataclass(frozen=True)
class Html:
    """A ready-made piece of page from another stage (it has no Markdown form: wrap it in Only)."""
    html: str


@dataclass(frozen=True)
class Only:
    """A block for one medium only. Use sparingly: what the page and the text both say, they say
    from the same block."""
    medium: str
    block: object

    def __post_init__(self):
        if self.medium not in MEDIA:
            raise ValueError(f"medium {self.medium!r}: say one of {', '.join(MEDIA)}")


@dataclass(frozen=True)
class Section:
    """A titled part; a section inside a section is one heading level down."""
    title: object  # inline content
    blocks: list = field(default_factory=list)


@dataclass(frozen=True)
class Document:
    title: object  # the heading (inline content)
    page_title: str  # the browser tab's
    blocks: list
    style: str = ""  # the page's own styles, after the shared ones (a page with side-by-side code needs some)


# ---------------------------------------------------------------- to Markdown


def to_markdown(doc: Document) -> str:
    chunks = [f"# {_md_line(doc.title)}"]
    for block in doc.blocks:
        chunks += _md_block(block)
    return "\n\n".join(chunks).rstrip() + "\n"


def _md_block(block, level: int = 2) -> list[str]:
    """The Markdown of one block, as chunks that blank lines separate; `level` is its sections' heading level."""
    if isinstance(block, Only):
        return _md_block(block.block, level) if block.medium == "markdown" else []
    if isinstance(block, Section):
        return [f"{'#' * min(level, 6)} {_md_line(block.title)}"] + [
            c for b in block.blocks for c in _md_block(b, level + 1)]
    if isinstance(block, Preformatted):
        return [fence(block.text)]
    if isinstance(block, Paragraph):
        text = _md_line(block.content)
        return [f"**{text}**" if block.warning else text]
    if isinstance(block, Image):
        return [f"![{_md_line(block.alt)}]({block.src})"]
    if _empty(block):
        return []
    if isinstance(block, Figures):
        return ["\n\n".join(f"- {_md_line(f.caption)}\n\n  ![{_md_line(f.alt)}]({f.src})" for f in block.figures)]
    if isinstance(block, Table):
        lines = ["| " + " | ".join(_md_line(h, cell=True) for h in block.header) + " |",
                 "| " + " | ".join("---:" if i in block.numeric else "---" for i in range(len(block.header))) + " |"]
        lines += ["| " + " | ".join(_md_line(_cell(c).content, cell=True) for c in row) + " |" for row in block.rows]
        return ["\n".join(lines)]
    if isinstance(block, Bullets):
        lines = []
        for item in map(_item, block.items):
            lines.append(f"- {_md_line(item.content)}")
            lines += [f"  - {_md_line(s)}" for s in item.sub]
        return ["\n".join(lines)]
    if isinstance(block, Html):
        raise TypeError("a ready-made HTML block has no Markdown form: wrap it in Only('html', ...)")
    raise TypeError(f"not a document block: {block!r}")


def _md_line(content, cell: bool = False) -> str:
    return _md(content, cell).strip()


def _md(content, cell: bool = False) -> str:
    """Inline content as Markdown; in a table `cell` a | ends the cell even inside a code span."""
    if isinstance(content, str):
        return _md_text(content)
    if isinstance(content, list):
        return "".join(_md(c, cell) for c in content)
    if isinstance(content, Code):
        return md_code(content.text).replace("|", "\\|") if cell else md_code(content.text)
    if isinstance(content, FileName):
        return _md_text(content.text)
    if isinstance(content, Strong):
        return f"**{_md_line(content.content, cell)}**"
    if isinstance(content, Link):
        return f"[{_md_line(content.text, cell)}]({content.href})"
    raise TypeError(f"not inline content: {content!r}")


def _md_text(text: str) -> str:
    """md_inline, keeping one space where the text begins or ends with some (pieces of one line)."""
    core = md_inline(text)
    lead = " " if text[:1].isspace() else ""
    trail = " " if text[-1:].isspace() and core else ""
    return lead + core + trail


# ---------------------------------------------------------------- to HTML


def to_html(doc: Document) -> str:
    e = html.escape
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f'<meta http-equiv="Content-Security-Policy" content="{POLICY}">',  # ours: no quote, no markup
           f"<title>{e(doc.page_title)}</title>", f"<style>{STYLE}{doc.style}</style></head><body>",
           f"<h1>{_html(doc.title)}</h1>"]
    for block in doc.blocks:
        out += _html_block(block)
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def html_blocks(blocks: list, level: int = 2) -> str:
    """A piece of page from document blocks, for a page built elsewhere (the review server's): the same
    markup and escaping as `to_html`."""
    return "\n".join(line for block in blocks for line in _html_block(block, level))


def _html_block(block, level: int = 2) -> list[str]:
    """The HTML of one block, as lines; `level` is its sections' heading level."""
    e = html.escape
    if isinstance(block, Only):
        return _html_block(block.block, level) if block.medium == "html" else []
    if isinstance(block, Section):
        h = f"h{min(level, 6)}"
        return [f"<{h}>{_html(block.title)}</{h}>"] + [line for b in block.blocks for line in _html_block(b, level + 1)]
    if isinstance(block, Preformatted):
        return [f"<pre>{e(block.text.rstrip())}</pre>"]
    if isinstance(block, Paragraph):
        style = ' class="bad"' if block.warning else ""
        return [f"<p{style}>{_html(block.content)}</p>"]
    if isinstance(block, Image):
        return [f'<img src="{e(block.src)}" alt="{e(block.alt)}">']
    if _empty(block):
        return []
    if isinstance(block, Figures):
        return [f'<figure><img src="{e(f.src)}" alt="{e(f.alt)}"><figcaption>{_html(f.caption)}</figcaption></figure>'
                for f in block.figures]
    if isinstance(block, Table):
        lines = ["<table><tr>" + "".join(f"<th>{_html(h)}</th>" for h in block.header) + "</tr>"]
        for row in block.rows:
            cells = []
            for i, cell in enumerate(map(_cell, row)):
                style = ' class="bad"' if cell.bad else ' class="n"' if i in block.numeric else ""
                cells.append(f"<td{style}>{_html(cell.content)}</td>")
            lines.append("<tr>" + "".join(cells) + "</tr>")
        return lines + ["</table>"]
    if isinstance(block, Bullets):
        lines = ["<ul>"]
        for item in map(_item, block.items):
            sub = "".join(f"<li>{_html(s)}</li>" for s in item.sub)
            lines.append(f"<li>{_html(item.content)}" + (f"<ul>{sub}</ul>" if sub else "") + "</li>")
        return lines + ["</ul>"]
    if isinstance(block, Html):
        return [block.html]
    raise TypeError(f"not a document block: {block!r}")


def _html(content) -> str:
    e = html.escape
    if isinstance(content, str):
        return e(content)
    if isinstance(content, list):
        return "".join(_html(c) for c in content)
    if isinstance(content, (Code, FileName)):
        return f"<code>{e(content.text)}</code>"
    if isinstance(content, Strong):
        return f"<b>{_html(content.content)}</b>"
    if isinstance(content, Link):
        return f'<a href="{e(content.href)}">{e(content.text)}</a>'
    raise TypeError(f"not inline content: {content!r}")


def _empty(block) -> bool:
    """A list with no items or a row of no figures: nothing in either medium (not an empty <ul>)."""
    return isinstance(block, Bullets) and not block.items or isinstance(block, Figures) and not block.figures


def _cell(cell) -> Cell:
    return cell if isinstance(cell, Cell) else Cell(cell)


def _item(item) -> Item:
    return item if isinstance(item, Item) else Item(item)
