#!/usr/bin/env python3
"""Generates the C API reference from the headers' own doc comments.

    python3 ffi/reference.py OUTDIR include/rill.h [include/rill_nats.h ...]

For each header NAME.h it writes OUTDIR/NAME.3 (a man page, section 3) and
OUTDIR/NAME.html (one self-contained page): the header's opening comment (its
conventions), then every function, type and constant with its declaration and
its documentation, each in the order the header declares it. ffi/install.sh
installs them under share/man/man3 and share/doc/rill; ffi/tests/run.sh builds
them from the committed header, so the reference cannot drift from it.

The headers are cbindgen's output (ffi/cbindgen.toml): a comment, then one
declaration. A declaration this script cannot place, or a function without
documentation, is an error rather than a page that silently lacks it.
"""

from __future__ import annotations

import datetime
import html
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Item:
    """One documented declaration: a function, a type or a group of #defines."""

    kind: str  # "function", "type" or "constant"
    names: list[str]
    decl: str
    doc: str
    fields: list[tuple[str, str]] = field(default_factory=list)  # (declaration, doc) of a struct's or enum's members


@dataclass
class Header:
    name: str
    intro: str
    items: list[Item]


def comment_text(block: str) -> str:
    """The text of a /* */ or /** */ block, without its frame."""
    lines = block.strip().splitlines()
    lines[0] = re.sub(r"^/\*\*?", "", lines[0])
    lines[-1] = re.sub(r"\*/$", "", lines[-1])
    out = []
    for line in lines:
        line = line.strip()
        if line.startswith("*"):
            line = line[1:]
            line = line[1:] if line.startswith(" ") else line
        out.append(line.rstrip())
    return "\n".join(out).strip("\n")


def members(body: str) -> list[tuple[str, str]]:
    """The members of a struct or enum body, each with its doc comment."""
    found = []
    for doc, decl in re.findall(r"(/\*\*.*?\*/)?\s*([^;,/{}]+[;,]?)", body, flags=re.S):
        decl = " ".join(decl.split()).rstrip(",")
        if decl:
            found.append((decl, comment_text(doc) if doc else ""))
    return found


# Declarations cbindgen writes, at the top level of the header.
DEFINE = re.compile(r"#define\s+(\w+)")
TYPEDEF_BODY = re.compile(r"typedef\s+(struct|enum)\s*\{(.*)\}\s*(\w+)\s*;", re.S)
TYPEDEF_FN = re.compile(r"typedef\s+[^;]*?\(\*\s*(\w+)\)\s*\([^;]*\)\s*;", re.S)
TYPEDEF = re.compile(r"typedef\s+[^;{}]*?\b(\w+)\s*;", re.S)
FUNCTION = re.compile(r"[\w\s\*]*?\b(\w+)\s*\([^;{}]*\)\s*;", re.S)
# Lines that carry nothing to document: include guards, includes, extern "C".
SKIP = re.compile(r'^(#ifndef|#ifdef|#endif|#include|#define\s+RILL(_NATS)?_H\s*$|extern "C" \{|\}\s*/\* extern)')


def parse(path: Path) -> Header:
    text = path.read_text()
    # The opening comment is the header's conventions.
    m = re.match(r"\s*(/\*.*?\*/)", text, flags=re.S)
    if not m:
        raise SystemExit(f"{path}: no opening comment")
    intro = comment_text(m.group(1))
    rest = text[m.end() :]
    items: list[Item] = []
    doc: str | None = None
    pos = last_end = 0  # where the text still to read starts; where the last declaration ended
    while pos < len(rest):
        ws = re.match(r"\s+", rest[pos:])
        if ws:
            pos += ws.end()
            continue
        chunk = rest[pos:]
        if chunk.startswith("/*"):
            end = chunk.index("*/") + 2
            doc = comment_text(chunk[:end])
            pos += end
            continue
        line = chunk.split("\n", 1)[0]
        if SKIP.match(line):
            pos += len(line)
            continue
        if line.startswith("#define"):
            # One macro, its continuation lines included.
            end = 0
            while True:
                nl = chunk.find("\n", end)
                nl = len(chunk) if nl < 0 else nl
                if not chunk[:nl].endswith("\\"):
                    break
                end = nl + 1
            decl, name = chunk[:nl], DEFINE.match(chunk).group(1)  # type: ignore[union-attr]
            decl = re.sub(r"\\\n\s*", "", decl)
            # Macros under one comment, on the lines right after each other, share it.
            if doc is None and items and items[-1].kind == "constant" and rest[last_end:pos].count("\n") == 1:
                items[-1].names.append(name)
                items[-1].decl += "\n" + decl
            else:
                items.append(Item("constant", [name], decl, doc or ""))
            pos += nl
            last_end, doc = pos, None
            continue
        end = chunk.find(";")
        # A struct or enum body holds semicolons: the declaration ends at the one after its closing brace.
        if chunk.startswith("typedef struct {") or chunk.startswith("typedef enum {"):
            end = chunk.find(";", chunk.index("\n}"))
        if end < 0:
            raise SystemExit(f"{path}: cannot place {line!r}")
        decl = chunk[: end + 1]
        pos += end + 1
        if m := TYPEDEF_BODY.fullmatch(decl):
            body = re.sub(r"/\*\*.*?\*/", lambda c: c.group(0).replace(";", "\0"), m.group(2), flags=re.S)
            fields = [(d, c.replace("\0", ";")) for d, c in members(body)]
            shown = re.sub(r"\s*/\*\*.*?\*/", "", decl, flags=re.S)
            items.append(Item("type", [m.group(3)], shown, doc or "", fields))
        elif m := TYPEDEF_FN.fullmatch(decl) or TYPEDEF.fullmatch(decl):
            items.append(Item("type", [m.group(1)], decl, doc or ""))
        elif m := FUNCTION.fullmatch(decl):
            if not doc:
                raise SystemExit(f"{path}: {m.group(1)} has no documentation")
            items.append(Item("function", [m.group(1)], " ".join(decl.split()).replace("( ", "("), doc))
        else:
            raise SystemExit(f"{path}: cannot place {decl!r}")
        last_end, doc = pos, None
    return Header(path.stem, intro, items)


# ---- text: the doc comments are Markdown-ish -------------------------------------


def blocks(doc: str) -> list[tuple[str, str]]:
    """Paragraphs as ("p", text), headings as ("h", text), and lists, tables
    and indented text, which keep their lines, as ("pre", text)."""
    out: list[tuple[str, str]] = []
    for para in re.split(r"\n\s*\n", doc.strip()):
        if not para.strip():
            continue
        if para.startswith("# "):
            out.append(("h", para[2:].strip()))
        elif re.match(r"\s*([-*|]\s|\d+\.\s)|\s{2}", para) or "\n " in para:
            out.append(("pre", para))
        else:
            out.append(("p", " ".join(para.split())))
    return out


def html_inline(text: str) -> str:
    parts = re.split(r"`([^`]*)`", text)
    return "".join(html.escape(p) if i % 2 == 0 else f"<code>{html.escape(p)}</code>" for i, p in enumerate(parts))


def html_doc(doc: str) -> str:
    out = []
    for kind, text in blocks(doc):
        if kind == "h":
            out.append(f"<h4>{html_inline(text)}</h4>")
        elif kind == "pre":
            out.append(f'<pre class="doc">{html_inline(text)}</pre>')
        else:
            out.append(f"<p>{html_inline(text)}</p>")
    return "\n".join(out)


SECTIONS = [("function", "Functions"), ("type", "Types"), ("constant", "Constants and macros")]


def render_html(h: Header, version: str) -> str:
    title = f"{h.name}.h: the rill {version} C API"
    toc = []
    body = []
    for kind, heading in SECTIONS:
        items = [i for i in h.items if i.kind == kind]
        if not items:
            continue
        toc.append(f"<h3>{heading}</h3><ul>")
        toc += [f'<li><a href="#{i.names[0]}"><code>{html.escape(", ".join(i.names))}</code></a></li>' for i in items]
        toc.append("</ul>")
        body.append(f"<h2>{heading}</h2>")
        for i in items:
            anchors = "".join(f'<a id="{n}"></a>' for n in i.names)
            body.append(f'<section>{anchors}<h3><code>{html.escape(", ".join(i.names))}</code></h3>')
            body.append(f"<pre><code>{html.escape(i.decl)}</code></pre>")
            body.append(html_doc(i.doc))
            if i.fields:
                body.append("<dl>")
                for decl, doc in i.fields:
                    body.append(f"<dt><code>{html.escape(decl)}</code></dt><dd>{html_doc(doc)}</dd>")
                body.append("</dl>")
            body.append("</section>")
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{html.escape(title)}</title>
<style>
body {{ font-family: sans-serif; max-width: 60em; margin: auto; padding: 1em; line-height: 1.4; }}
pre {{ background: #f4f4f4; padding: 0.5em; overflow-x: auto; }}
pre.doc {{ background: none; padding: 0; }}
section {{ border-top: 1px solid #ddd; }}
dt {{ margin-top: 0.5em; }}
</style>
</head>
<body>
<h1>{html.escape(title)}</h1>
<p>Generated from <code>include/{h.name}.h</code> by <code>ffi/reference.py</code>.</p>
<h2>Conventions</h2>
{html_doc(h.intro)}
<h2>Contents</h2>
{chr(10).join(toc)}
{chr(10).join(body)}
</body>
</html>
"""


def man_escape(text: str) -> str:
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return re.sub(r"^([.'])", r"\\&\1", text, flags=re.M)


def man_inline(text: str) -> str:
    parts = re.split(r"`([^`]*)`", text)
    return "".join(man_escape(p) if i % 2 == 0 else f"\\fB{man_escape(p)}\\fR" for i, p in enumerate(parts))


def man_doc(doc: str) -> list[str]:
    out = []
    for kind, text in blocks(doc):
        if kind == "h":
            out += [".PP", f"\\fI{man_inline(text)}\\fR"]
        elif kind == "pre":
            out += [".PP", ".nf", man_inline(text), ".fi"]
        else:
            out += [".PP", man_inline(text)]
    return out


def render_man(h: Header, version: str, date: str) -> str:
    lines = [
        f'.TH {h.name.upper()} 3 "{date}" "rill {version}" "rill C API"',
        ".SH NAME",
        f"{man_escape(h.name)} \\- the rill {version} C API (generated from {h.name}.h)",
        ".SH SYNOPSIS",
        ".nf",
        f"\\fB#include <{h.name}.h>\\fR",
        ".fi",
        ".SH DESCRIPTION",
        *man_doc(h.intro),
    ]
    for kind, heading in SECTIONS:
        items = [i for i in h.items if i.kind == kind]
        if not items:
            continue
        lines.append(f".SH {heading.upper()}")
        for i in items:
            lines += [f".SS {man_escape(', '.join(i.names))}", ".nf", f"\\fB{man_escape(i.decl)}\\fR", ".fi"]
            lines += man_doc(i.doc)
            for decl, doc in i.fields:
                lines += [".TP", f"\\fB{man_escape(decl)}\\fR"]
                lines += [line for line in man_doc(doc) if line != ".PP"] if doc else []
    return "\n".join(lines) + "\n"


def main() -> None:
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    headers = [parse(Path(p)) for p in sys.argv[2:]]
    # The version and date the pages carry: the header's own version macro and
    # the header file's modification day, so a rebuild of the same header
    # writes the same pages.
    rill_h = Path(sys.argv[2]).with_name("rill.h").read_text()
    m = re.search(r'#define RILL_VERSION_STRING "([^"]+)"', rill_h)
    if not m:
        raise SystemExit("rill.h has no RILL_VERSION_STRING")
    version = m.group(1)
    date = datetime.date.fromtimestamp(Path(sys.argv[2]).stat().st_mtime).isoformat()
    for h in headers:
        (out / f"{h.name}.3").write_text(render_man(h, version, date))
        (out / f"{h.name}.html").write_text(render_html(h, version))
        print(f"{h.name}: {len(h.items)} entries -> {out / h.name}.3, {out / h.name}.html")


if __name__ == "__main__":
    main()
