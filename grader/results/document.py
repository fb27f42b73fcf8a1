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
    text: object  # inline content
    href: str  # a relative path the report wrote, or a route of the review server, already %-quoted
    rel: str = ""  # what the link is to the page (the review page's keys follow rel="next" ...)
    attrs: tuple = ()  # (name, value) pairs the page's script reads (data-file, ...): names ours, values escaped


@dataclass(frozen=True)
class Span:
    """Inline content in one of the page's styles (a colour, a muted note); the text alone in Markdown."""
    content: object
    cls: str
    id: str = ""  # an anchor the page's script writes into


@dataclass(frozen=True)
class Break:
    """A line break inside inline content (a space in Markdown)."""


@dataclass(frozen=True)
class Paragraph:
    content: object
    warning: bool = False  # something went wrong: bold in Markdown, red on the page
    cls: str = ""  # a style of the page (ignored in Markdown)
    id: str = ""  # an anchor on the page
    alert: bool = False  # announced at once by a screen reader (a refused form's reason)


@dataclass(frozen=True)
class Mark:
    """A passage of preformatted text the reader's eye should find (similarity's matching passages):
    <mark> on the page, the text alone in Markdown."""
    text: str


@dataclass(frozen=True)
class Preformatted:
    """Text shown exactly as it is, line by line (a test's output, an error): a fence in Markdown
    longer than any backtick run inside, so the text cannot close it; <pre> on the page."""
    text: object  # a string, or a list of strings and Marks


def _plain(text) -> str:
    return text if isinstance(text, str) else "".join(t.text if isinstance(t, Mark) else t for t in text)


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
    cls: str = ""  # a style of the page
    blocks: tuple = ()  # blocks after the content (a failed test's details): on the page, in the cell


@dataclass(frozen=True)
class Row:
    """A table row with an anchor or a style of its own (a list of cells is a plain row)."""
    cells: list
    id: str = ""
    cls: str = ""
    attrs: tuple = ()  # (name, value) pairs the page's script or tests read (data-name, ...)


@dataclass(frozen=True)
class Table:
    header: tuple  # inline content of each column's head; () for a table without one
    rows: list  # each a list of inline content or Cell, or a Row
    numeric: frozenset = frozenset()  # column indexes aligned right
    cls: str = ""
    id: str = ""


@dataclass(frozen=True)
class Item:
    content: object
    sub: tuple = ()  # inline content of each nested item


@dataclass(frozen=True)
class Bullets:
    items: list  # Item, or inline content for an item without nested ones
    cls: str = ""  # a style of the page


@dataclass(frozen=True)
class Heading:
    """A heading that opens no section (a page whose <h1> comes after its navigation)."""
    content: object
    level: int = 1


@dataclass(frozen=True)
class Nav:
    """A page's row of links (to the class list, the previous and next student): " · " between items in Markdown."""
    items: list  # inline content, one per item


@dataclass(frozen=True)
class Fold:
    """A part the reader opens (<details>): its summary as a bold line, then its blocks, in Markdown."""
    summary: object
    blocks: list
    open: bool = False
    cls: str = ""
    id: str = ""


@dataclass(frozen=True)
class Group:
    """Blocks the page lays out together (columns, a boxed note): only its blocks in Markdown."""
    blocks: list
    cls: str = ""
    id: str = ""


FIELD_KINDS = ("text", "hidden", "select", "submit", "checkbox")


@dataclass(frozen=True)
class Field:
    """One control of a form: a text input, a hidden value, a choice among `options` or a button."""
    name: str
    kind: str = "text"
    label: object = ""  # inline content before the control (a button's label is its text)
    value: str = ""  # what the control holds (a select: the chosen option's value)
    id: str = ""
    options: tuple = ()  # (value, label) of each choice of a select
    attrs: tuple = ()  # (name, value) pairs such as size, placeholder, inputmode

    def __post_init__(self):
        if self.kind not in FIELD_KINDS:
            raise ValueError(f"field kind {self.kind!r}: say one of {', '.join(FIELD_KINDS)}")


@dataclass(frozen=True)
class Form:
    """A form of the page (the review server's decisions): fields and inline content, in order. It
    has no Markdown form: a text cannot post anything."""
    action: str
    items: list  # Field, or inline content between fields
    method: str = "post"
    cls: str = ""
    id: str = ""


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
    title: object  # the heading (inline content); None: the page has no <h1> of its own (it is among the blocks)
    page_title: str  # the browser tab's
    blocks: list
    style: str = ""  # the page's own styles, after the shared ones (a page with side-by-side code needs some)


# Characters that act instead of showing (terminal escapes, a carriage return, bidirectional overrides): a
# student's error message may hold them, and `cat summary.md` would clear the screen or print a fake line. Every
# rendered text shows them as escapes instead; the kit's own words hold none.
_ACTING = {c: f"\\x{c:02x}" for c in (*range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0))}
_ACTING.update({c: f"\\u{c:04x}" for c in (0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))})


def visible(text: str) -> str:
    """`text` with every acting character written as an escape (\\x1b), a Windows line end as a line end."""
    return text.replace("\r\n", "\n").translate(_ACTING)


# ---------------------------------------------------------------- to Markdown


def to_markdown(doc: Document) -> str:
    chunks = [f"# {_md_line(doc.title)}"] if doc.title is not None else []
    for block in doc.blocks:
        chunks += _md_block(block)
    return visible("\n\n".join(chunks).rstrip() + "\n")


def _md_block(block, level: int = 2) -> list[str]:
    """The Markdown of one block, as chunks that blank lines separate; `level` is its sections' heading level."""
    if isinstance(block, Only):
        return _md_block(block.block, level) if block.medium == "markdown" else []
    if isinstance(block, Section):
        return [f"{'#' * min(level, 6)} {_md_line(block.title)}"] + [
            c for b in block.blocks for c in _md_block(b, level + 1)]
    if isinstance(block, Preformatted):
        return [fence(_plain(block.text))]
    if isinstance(block, Paragraph):
        text = _md_line(block.content)
        return [f"**{text}**" if block.warning else text]
    if isinstance(block, Image):
        return [f"![{_md_line(block.alt)}]({block.src})"]
    if isinstance(block, Heading):
        return [f"{'#' * min(block.level, 6)} {_md_line(block.content)}"]
    if isinstance(block, Nav):
        return [" · ".join(_md_line(item) for item in block.items)]
    if isinstance(block, Fold):
        return [f"**{_md_line(block.summary)}**"] + [c for b in block.blocks for c in _md_block(b, level)]
    if isinstance(block, Group):
        return [c for b in block.blocks for c in _md_block(b, level)]
    if isinstance(block, Form):
        return []
    if _empty(block):
        return []
    if isinstance(block, Figures):
        return ["\n\n".join(f"- {_md_line(f.caption)}\n\n  ![{_md_line(f.alt)}]({f.src})" for f in block.figures)]
    if isinstance(block, Table):
        lines = ["| " + " | ".join(_md_line(h, cell=True) for h in block.header) + " |",
                 "| " + " | ".join("---:" if i in block.numeric else "---" for i in range(len(block.header))) + " |"]
        lines += ["| " + " | ".join(_md_cell(_cell(c)) for c in _row(row).cells) + " |" for row in block.rows]
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


def _md_cell(cell: Cell) -> str:
    """A cell on one line: its content, then its blocks' text (a table row cannot hold a block)."""
    said = [_md_line(cell.content, cell=True)] + [_md_line(_text_of(b), cell=True) for b in cell.blocks]
    return " ".join(filter(None, said))


def _text_of(block) -> list:
    """A block's words as inline content (for a Markdown table cell)."""
    if isinstance(block, Paragraph):
        return [block.content]
    if isinstance(block, Preformatted):
        return [Code(_plain(block.text))]
    if isinstance(block, Bullets):
        return [[_item(i).content, "; "] for i in block.items]
    if isinstance(block, (Section, Fold)):
        return [block.title if isinstance(block, Section) else block.summary, ": ",
                *[_text_of(b) for b in block.blocks]]
    return []


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
    if isinstance(content, Span):
        return _md(content.content, cell)
    if isinstance(content, Break):
        return " "
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
           f"<title>{e(doc.page_title)}</title>", f"<style>{STYLE}{doc.style}</style></head><body>"]
    return _body(doc, out)


def to_served_html(doc: Document, *, stylesheet: str, script: str) -> str:
    """A page a local server sends (the review page): the same blocks, escaping and markup as `to_html`;
    its style and script are the server's own files (SERVED_POLICY, sent as a header, allows those only,
    and nothing inline)."""
    e = html.escape
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>{e(doc.page_title)}</title>", f'<link rel="stylesheet" href="{e(stylesheet)}">',
           f'<script src="{e(script)}" defer></script></head><body>']
    return _body(doc, out)


def _body(doc: Document, head: list[str]) -> str:
    out = head + ([f"<h1>{_html(doc.title)}</h1>"] if doc.title is not None else [])
    for block in doc.blocks:
        out += _html_block(block)
    out.append("</body></html>")
    return visible("\n".join(out) + "\n")


def _attrs(*pairs) -> str:
    """HTML attributes from (name, value) pairs, each value escaped; an empty value is left out. The
    names are the kit's own, never a student's."""
    return "".join(f' {name}="{html.escape(str(value))}"' for name, value in pairs if value not in ("", None))


def html_blocks(blocks: list, level: int = 2) -> str:
    """A piece of page from document blocks, for a page built elsewhere (the review server's): the same
    markup and escaping as `to_html`."""
    return visible("\n".join(line for block in blocks for line in _html_block(block, level)))


def _html_block(block, level: int = 2) -> list[str]:
    """The HTML of one block, as lines; `level` is its sections' heading level."""
    e = html.escape
    if isinstance(block, Only):
        return _html_block(block.block, level) if block.medium == "html" else []
    if isinstance(block, Section):
        h = f"h{min(level, 6)}"
        return [f"<{h}>{_html(block.title)}</{h}>"] + [line for b in block.blocks for line in _html_block(b, level + 1)]
    if isinstance(block, Preformatted):
        if isinstance(block.text, str):
            return [f"<pre>{e(block.text.rstrip())}</pre>"]
        return ["<pre>" + "".join(f"<mark>{e(t.text)}</mark>" if isinstance(t, Mark) else e(t) for t in block.text)
                + "</pre>"]
    if isinstance(block, Paragraph):
        cls = " ".join(filter(None, ["bad" if block.warning else "", block.cls]))
        return [f"<p{_attrs(('class', cls), ('id', block.id), ('role', 'alert' if block.alert else ''))}>"
                f"{_html(block.content)}</p>"]
    if isinstance(block, Image):
        return [f'<img src="{e(block.src)}" alt="{e(block.alt)}">']
    if isinstance(block, Heading):
        h = f"h{min(block.level, 6)}"
        return [f"<{h}>{_html(block.content)}</{h}>"]
    if isinstance(block, Nav):
        return ["<nav>" + "".join(_html(item) for item in block.items) + "</nav>"]
    if isinstance(block, Fold):
        return ([f"<details{_attrs(('id', block.id), ('class', block.cls))}{' open' if block.open else ''}>"
                 f"<summary>{_html(block.summary)}</summary>"]
                + [line for b in block.blocks for line in _html_block(b, level)] + ["</details>"])
    if isinstance(block, Group):
        return ([f"<div{_attrs(('class', block.cls), ('id', block.id))}>"]
                + [line for b in block.blocks for line in _html_block(b, level)] + ["</div>"])
    if isinstance(block, Form):
        return [f"<form{_attrs(('class', block.cls), ('id', block.id), ('method', block.method), ('action', block.action))}>"
                + "".join(_field(f) if isinstance(f, Field) else _html(f) for f in block.items) + "</form>"]
    if _empty(block):
        return []
    if isinstance(block, Figures):
        return [f'<figure><img src="{e(f.src)}" alt="{e(f.alt)}"><figcaption>{_html(f.caption)}</figcaption></figure>'
                for f in block.figures]
    if isinstance(block, Table):
        lines = [f"<table{_attrs(('class', block.cls), ('id', block.id))}>"
                 + ("<tr>" + "".join(f"<th>{_html(h)}</th>" for h in block.header) + "</tr>" if block.header else "")]
        for row in map(_row, block.rows):
            cells = []
            for i, cell in enumerate(map(_cell, row.cells)):
                cls = "bad" if cell.bad else cell.cls or ("n" if i in block.numeric else "")
                inside = "".join(line for b in cell.blocks for line in _html_block(b, level + 1))
                cells.append(f"<td{_attrs(('class', cls))}>{_html(cell.content)}{inside}</td>")
            lines.append(f"<tr{_attrs(('id', row.id), ('class', row.cls), *row.attrs)}>" + "".join(cells) + "</tr>")
        return lines + ["</table>"]
    if isinstance(block, Bullets):
        lines = [f"<ul{_attrs(('class', block.cls))}>"]
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
        return f"<a{_attrs(('rel', content.rel), ('href', content.href), *content.attrs)}>{_html(content.text)}</a>"
    if isinstance(content, Span):
        return f"<span{_attrs(('class', content.cls), ('id', content.id))}>{_html(content.content)}</span>"
    if isinstance(content, Break):
        return "<br>"
    raise TypeError(f"not inline content: {content!r}")


def inline_html(content) -> str:
    """Inline content as HTML (the escaping of every page)."""
    return visible(_html(content))


def _field(f: Field) -> str:
    """One form control; every value escaped, as every text of a page is."""
    if f.kind == "hidden":
        return f'<input type="hidden"{_attrs(("name", f.name))} value="{html.escape(f.value)}">'
    if f.kind == "submit":
        return (f'<button type="submit"{_attrs(("name", f.name if f.value else ""), ("value", f.value), ("id", f.id))}>'
                f"{_html(f.label)}</button>")
    if f.kind == "select":
        options = "".join(f'<option value="{html.escape(v)}"{" selected" if v == f.value else ""}>{_html(label)}</option>'
                          for v, label in f.options)
        control = f"<select{_attrs(('name', f.name), ('id', f.id), *f.attrs)}>{options}</select>"
    elif f.kind == "checkbox":  # posts `value` when ticked, nothing otherwise; its label follows the box
        control = f'<input type="checkbox"{_attrs(("name", f.name), ("id", f.id), *f.attrs)} value="{html.escape(f.value)}">'
        return f"<label>{control} {_html(f.label)}</label>" if f.label else control
    else:
        control = (f'<input type="text"{_attrs(("name", f.name), ("id", f.id), *f.attrs)} '
                   f'value="{html.escape(f.value)}">')
    return f"<label>{_html(f.label)} {control}</label>" if f.label else control


def _empty(block) -> bool:
    """A list with no items or a row of no figures: nothing in either medium (not an empty <ul>)."""
    return isinstance(block, Bullets) and not block.items or isinstance(block, Figures) and not block.figures


def _cell(cell) -> Cell:
    return cell if isinstance(cell, Cell) else Cell(cell)


def _row(row) -> Row:
    return row if isinstance(row, Row) else Row(list(row))


def _item(item) -> Item:
    return item if isinstance(item, Item) else Item(item)
