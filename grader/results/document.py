"""A small document model, written once and rendered twice: to Markdown and to an HTML page.

The class report is described once (`grader.results.classreport.class_document`) as sections, paragraphs,
tables, images, figures and lists; `to_markdown` makes summary.md of it and `to_html` report.html,
so the two cannot say different things. Inline content is a string, one of the marks below, or a
list of those. Every string is text, never markup: each renderer escapes it for its medium
(Markdown: backslash escapes, whitespace runs made one space; HTML: html.escape).

Also here: how numbers are written for people, shared by every file a person reads.
"""
from __future__ import annotations

import html
from dataclasses import dataclass, field

from grader.results.storage import DIGITS

MEDIA = ("markdown", "html")
# The style of every page the report writes (the class report and each student's feedback page).
STYLE = """body{font-family:system-ui,sans-serif;max-width:60em;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.2em .6em;text-align:left}
td.n{text-align:right}img{max-width:100%}code{background:#f4f4f4;padding:0 .2em}
.bad{color:#b00}figure{display:inline-block;margin:.5em}figcaption{font-size:.85em}
pre{white-space:pre-wrap;background:#f6f6f6;padding:.5em}body,td,th,li,p,h1,h2,h3,pre,code{overflow-wrap:anywhere}
table{max-width:100%}"""  # a long line without a space (a hint, an error, a name) wraps: the page keeps its width


# ---------------------------------------------------------------- numbers


def number(x: float) -> str:
    """A score as a person writes it: 30, 12.5, 0.3333."""
    text = f"{round(float(x), DIGITS):.{DIGITS}f}".rstrip("0").rstrip(".")
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
    title: str
    blocks: list = field(default_factory=list)


@dataclass(frozen=True)
class Document:
    title: str  # the heading
    page_title: str  # the browser tab's
    blocks: list


# ---------------------------------------------------------------- to Markdown


def to_markdown(doc: Document) -> str:
    chunks = [f"# {_md(doc.title).strip()}"]
    for block in doc.blocks:
        chunks += _md_block(block)
    return "\n\n".join(chunks).rstrip() + "\n"


def _md_block(block) -> list[str]:
    """The Markdown of one block, as chunks that blank lines separate."""
    if isinstance(block, Only):
        return _md_block(block.block) if block.medium == "markdown" else []
    if isinstance(block, Section):
        return [f"## {_md(block.title).strip()}"] + [c for b in block.blocks for c in _md_block(b)]
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
           f"<title>{e(doc.page_title)}</title>", f"<style>{STYLE}</style></head><body>",
           f"<h1>{e(doc.title)}</h1>"]
    for block in doc.blocks:
        out += _html_block(block)
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _html_block(block) -> list[str]:
    """The HTML of one block, as lines."""
    e = html.escape
    if isinstance(block, Only):
        return _html_block(block.block) if block.medium == "html" else []
    if isinstance(block, Section):
        return [f"<h2>{e(block.title)}</h2>"] + [line for b in block.blocks for line in _html_block(b)]
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
