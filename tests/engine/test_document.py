"""grader/results/document.py: one description of a report, rendered to Markdown and to HTML, saying the same."""
from __future__ import annotations

import html
import re
import sys
from pathlib import Path
from urllib.parse import quote

import pytest

from grader.results import classreport

from grader.results import document
from grader.results.document import (Bullets, Cell, Code, Document, FileName, Figure, Figures, Html, Image, Item, Link,
                             Only, Paragraph, Preformatted, Section, Strong, Table, to_html, to_markdown)
from grader.results.storage import load_records

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from report_records import HINT_ID, LESSON, grade_class, make_record  # noqa: E402

from grader.results import feedback  # noqa: E402

HOSTILE = "<script>alert(1)</script> [x](http:evil) **b** | # `t` \\"


def _markdown_words(text: str) -> list[str]:
    text = re.sub(r"!\[[^\]]*\]\([^)]*\)", " ", text)  # an image: on the page its alt is an attribute
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link: on the page its target is an attribute
    text = re.sub(r"^\|( ---:?\ \|)+$", " ", text, flags=re.M)  # a table's alignment row
    text = re.sub(r"\\(.)", r"\1", text.replace("**", " ").replace("`", " "))
    return re.sub(r"(?<!\S)(#+|\||-)(?=\s)", " ", text).split()


def _markup(markdown: str) -> str:
    """What Markdown reads as markup: escaped characters and code spans (shown literally) taken out."""
    kept, i = [], 0
    while i < len(markdown):
        if markdown[i] == "\\":
            i += 2
        elif markdown[i] == "`":
            i = markdown.index("`", i + 1) + 1
        else:
            kept.append(markdown[i])
            i += 1
    return "".join(kept)


def _html_words(text: str) -> list[str]:
    body = text.split("<body>", 1)[1]
    return html.unescape(re.sub(r"<[^>]+>", " ", body)).replace("`", " ").split()


def _shared(blocks: list) -> list:
    """The blocks both media show (Only blocks dropped, inside sections too)."""
    kept = []
    for block in blocks:
        if isinstance(block, Only):
            continue
        if isinstance(block, Section):
            block = Section(block.title, _shared(block.blocks))
        kept.append(block)
    return kept


def test_the_class_report_says_the_same_in_both_media(tmp_path):
    out = grade_class(tmp_path / "out")
    records, problems = load_records(out)
    stats = classreport.class_stats(records, {}, lesson=LESSON)
    plots = {"evidence": [(e, f"_plots/{e['submission']}.png") for e in stats["evidence"]["picked"]]}
    full = classreport.class_document(stats, plots, problems + ["ghost: record.json unreadable"], records[:1], lesson=LESSON)
    shared = Document(full.title, full.page_title, _shared(full.blocks))
    assert len(shared.blocks) < len(full.blocks), "the description has medium-only blocks: this test drops them"
    markdown, page = to_markdown(shared), to_html(shared)
    assert _markdown_words(markdown) == _html_words(page)
    # Every table row, list item and figure is in both.
    assert len(re.findall(r"^\| (?!---)", markdown, flags=re.M)) == page.count("<tr>")
    assert markdown.count("\n- ") + markdown.count("\n  - ") == page.count("<li>") + page.count("<figure>") > 0


def test_the_word_check_sees_a_renderer_that_drops_something():
    doc = Document("T", "T", [Bullets([Item("one", ("two",))])])
    dropped = Document("T", "T", [Bullets(["one"])])
    assert _markdown_words(to_markdown(doc)) != _html_words(to_html(dropped))


def test_student_text_is_text_in_both_media():
    doc = Document("T", "T", [Section(HOSTILE, [
        Paragraph([HOSTILE, Code(HOSTILE), Strong(HOSTILE), FileName(HOSTILE)], warning=True),
        Table((HOSTILE,), [[HOSTILE], [Cell(Code(HOSTILE), bad=True)]]),
        Bullets([Item(Strong(HOSTILE), (HOSTILE,))]),
        Figures([Figure("a.png", HOSTILE, [HOSTILE, Code(HOSTILE)])]),
        Image("b.png", HOSTILE)])])
    markdown, page = to_markdown(doc), to_html(doc)
    assert "<script" not in page and "&lt;script&gt;" in page
    assert "<script" not in _markup(markdown) and markdown.count("\\<script") == 11
    assert "[x](http:evil)" not in _markup(markdown) and "\\[x\\](http:evil)" in markdown
    # A table cell never splits: the header row and the rows have one cell each.
    table = [line for line in markdown.splitlines() if line.startswith("| ")]
    assert all(len(re.findall(r"(?<!\\)\|", line)) == 2 for line in table), table
    assert "\n# " not in markdown.split("\n", 1)[1], "a heading made of student text"


def test_only_keeps_a_block_to_its_medium_and_raw_html_must_say_so():
    doc = Document("T", "T", [Only("html", Html("<p>page only</p>")), Only("markdown", Paragraph("text only")),
                              Paragraph([Link("a b", "a%20b/feedback.html")])])
    assert "page only" not in to_markdown(doc) and "text only" in to_markdown(doc)
    assert "<p>page only</p>" in to_html(doc) and "text only" not in to_html(doc)
    assert "[a b](a%20b/feedback.html)" in to_markdown(doc)
    with pytest.raises(TypeError, match="Only"):
        to_markdown(Document("T", "T", [Html("<hr>")]))
    with pytest.raises(ValueError, match="markdown"):
        Only("pdf", Paragraph("x"))


def test_numbers_are_written_as_a_person_writes_them():
    """At most two decimals for a person; a file for machines (grades.csv) asks for its own precision."""
    assert [document.number(x) for x in (30.0, 12.5, 1 / 3, 20 / 3, -0.00001)] == ["30", "12.5", "0.33", "6.67", "0"]
    assert document.number(1 / 3, 4) == "0.3333"
    assert document.mean(77.3571) == "77.4"


def test_the_feedback_says_the_same_in_both_media():
    """feedback.md and feedback.html render one Document: the same words, and every test's output
    fenced in one and preformatted in the other."""
    from grader.results import feedback
    from report_records import make_record

    record = make_record("Adam", buggy=True, status="timeout", notes=["classifier.py: forward ran past the 2 s limit"])
    doc = feedback.feedback_document(record, feedback.Words(hints={HINT_ID: "Normalise each row: sum over dim=-1."}), lesson=LESSON)
    markdown, page = to_markdown(doc), to_html(doc)
    fenced = re.findall(r"^```text\n(.*?)\n```$", markdown, flags=re.M | re.S)
    assert fenced and [html.unescape(p) for p in re.findall(r"<pre>(.*?)</pre>", page, flags=re.S)] == fenced
    prose = re.sub(r"^```text\n.*?\n```$", " ", markdown, flags=re.M | re.S)
    assert _markdown_words(prose) == _html_words(re.sub(r"<pre>.*?</pre>", " ", page, flags=re.S))


def test_a_fence_and_a_section_keep_student_text_inside():
    """A backtick run as long as a fence cannot close it; a section in a section is one level down; a
    Preformatted block keeps its lines (Markdown) and its characters (HTML) as they are."""
    text = "````\n# not a heading\n<script>x</script>\n  indented"
    doc = Document("T", "T", [Section("a", [Section(Code("b"), [Preformatted(text)])])])
    markdown, page = to_markdown(doc), to_html(doc)
    assert "## a\n\n### `b`\n\n`````text\n" + text + "\n`````" in markdown
    assert "<h2>a</h2>" in page and "<h3><code>b</code></h3>" in page
    assert "<pre>````\n# not a heading\n&lt;script&gt;x&lt;/script&gt;\n  indented</pre>" in page


def test_every_page_carries_the_one_policy():
    page = to_html(Document("T", "T", [Paragraph("x")]))
    assert f'<meta http-equiv="Content-Security-Policy" content="{document.POLICY}">' in page
    assert '"' not in document.POLICY and "<" not in document.POLICY
    for rule in ("default-src 'none'", "form-action 'none'", "base-uri 'none'"):
        assert rule in document.POLICY
    assert "script-src" not in document.POLICY


def test_the_report_pictures_load_under_the_policy_in_a_browser(tmp_path):
    """The one policy lets a page show its own pictures (report.html's _plots/, opened as a file) and
    nothing else: every <img> of the class report loads in Chromium, and no policy violation is reported."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_review_browser import ARGS, _browser, _playwright

    executable, sync_playwright = _browser(), _playwright()
    out = grade_class(tmp_path / "out")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=ARGS, headless=True)
        page = browser.new_page()
        refused = []
        page.on("console", lambda message: refused.append(message.text) if "Content Security Policy" in message.text
                else None)
        page.goto((out / "report.html").as_uri())
        page.wait_for_load_state("load")
        sizes = page.evaluate("[...document.images].map(i => [i.getAttribute('src'), i.complete && i.naturalWidth])")
        browser.close()
    assert len(sizes) >= 3 and all(width for _, width in sizes), sizes
    assert refused == []


ATTACK = '"><script>alert(1)</script><b x=\'y\'>&amp;'


def test_the_served_pages_pieces_escape_every_value_they_hold():
    """Forms, ids, links with attributes, rows and cells holding blocks (the review page's pieces) go
    through the one escaping rule: a student's text in any of them stays text."""
    doc = document.Document(title=None, page_title=ATTACK, blocks=[
        document.Nav([Link(ATTACK, "/s/" + quote(ATTACK, safe=""), rel="next"),
                      document.Span(ATTACK, "small", id="c-where")]),
        document.Heading([ATTACK, document.Break(), document.Span(ATTACK, "bad")]),
        document.Fold(ATTACK, [document.Group([document.Paragraph(ATTACK, cls="error", id="message", alert=True)],
                                               cls="said")], open=True, cls="file", id="file-0"),
        document.Form("/s/" + ATTACK + "/override", [
            document.Field("token", "hidden", value=ATTACK), document.Strong(ATTACK),
            document.Field("test", "select", ATTACK, ATTACK, id="test", options=((ATTACK, ATTACK), ("a", "b"))),
            document.Field("points", label=ATTACK, value=ATTACK, id="points", attrs=(("placeholder", ATTACK),)),
            document.Field("decision", "submit", ATTACK, value=ATTACK, id="save")], id="f"),
        Table(("a", "b"), [document.Row([Link("1", "#L1", attrs=(("class", "ln"), ("data-file", ATTACK))),
                                         Cell(ATTACK, cls="src", blocks=(document.Preformatted(ATTACK),))],
                                        id="t-" + ATTACK, attrs=(("data-name", ATTACK),))], cls="code", id="x"),
        document.Preformatted(["a ", document.Mark(ATTACK), " b"])])
    page = document.to_served_html(doc, stylesheet="/app.css", script="/app.js")
    assert "<script>" not in page and "<b x=" not in page and page.count("<script") == 1
    assert page.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 14
    assert '<option value="&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;&lt;b x=&#x27;y&#x27;&gt;&amp;amp;" selected>' \
        in page
    assert 'data-name="&quot;&gt;&lt;script&gt;' in page and '<p class="error" id="message" role="alert">' in page
    assert "<mark>&quot;&gt;&lt;script&gt;" in page and "<h1>" in page and "<title>&quot;&gt;" in page
    # The same blocks as text: a form says nothing, every other piece keeps its words and no markup
    # (a fence or a code span holds the text as it is).
    text = document.to_markdown(doc)
    outside = re.sub(r"`[^`\n]*`", "", re.sub(r"^(`{3,})text\n.*?\n\1$", "", text, flags=re.S | re.M))
    assert not re.search(r"(?<!\\)<script", outside) and "token" not in text and text.count("alert(1)") >= 7
    with pytest.raises(ValueError, match="say one of text, hidden, select, submit"):
        document.Field("x", "password")


def test_the_review_and_similarity_pages_write_no_markup_of_their_own():
    """One escaping rule: the review page, its code view and similarity.html describe their pages with
    the document model; no string of theirs is a piece of HTML, and none escapes anything itself."""
    import ast

    root = Path(__file__).resolve().parents[2] / "grader" / "admin"
    for name in ("review.py", "codeview.py", "similarity.py"):
        source = (root / name).read_text(encoding="utf-8")
        tree = ast.parse(source)
        docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                      if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef)) and n.body
                      and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        markup = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Constant) and id(node) not in docstrings
                  and isinstance(node.value, str) and re.search(r"(?<!\?P)<(/?[a-z][a-z0-9]*)[ >/]", node.value)
                  and not node.value.lstrip().startswith(("//", "body{", "#"))]
        assert not markup, f"{name} lines {markup}: markup written by hand; describe it with grader/results/document.py"
        assert "html.escape" not in source and "import html" not in source, name


ACTING = "\x1bc\x1b(0\x1b[2J\r\u202e\x07\x9b"  # clear the terminal, line drawing, bell, a bidi override, CSI


def test_acting_characters_are_shown_as_escapes_in_every_rendering():
    """Found by a red team: an error message holding `ESC c` cleared the terminal of whoever ran `cat summary.md` and
    printed a fake line, and `ESC ( 0` garbled the rest of the page; a bidi override reverses what follows."""
    doc = Document(title=f"T{ACTING}", page_title="t", blocks=[Paragraph(f"p{ACTING}"), Preformatted(f"pre{ACTING}\r\nx"),
                                                                 Table(("a",), [(f"c{ACTING}",)])])
    for text in (to_markdown(doc), to_html(doc), document.html_blocks(doc.blocks), document.inline_html(f"i{ACTING}")):
        assert not [c for c in ACTING if not c.isprintable() and c in text], text
        assert "\\x1bc" in text or "\\x1b" in text
    assert "\\u202e" in to_markdown(doc) and "pre\\x1bc" in to_markdown(doc) and "\nx" in to_markdown(doc)


def test_a_students_note_with_terminal_escapes_reaches_no_file_raw(tmp_path):
    out = tmp_path / "out"
    feedback.write_submission(out, make_record("esc", status="out-of-memory",
                                               notes=[f"out of memory: MemoryError('{ACTING} 12 of 12 submissions ok')"]),
                              lesson=LESSON)
    classreport.write_class(out, lesson=LESSON)
    for path in [out / "summary.md", out / "report.html", *(out / "esc").glob("feedback.*")]:
        text = path.read_text(encoding="utf-8")
        assert "12 of 12 submissions ok" in text and "\x1b" not in text and "\u202e" not in text, path
