#!/usr/bin/env python3
"""Doxygen INPUT_FILTER for maize's public headers.

The headers document every declaration in plain C comments (STYLE.md: full
sentences, no markup), so the sources stay readable without Doxygen.  This
filter turns them into Doxygen comments on the fly, without changing a
header on disk:

- the first comment of a file becomes its @file description;
- a comment that starts a line becomes a /** comment for what follows it,
  except section rulers such as "/* ---- kernels ---- */";
- a comment after code on the same line becomes a /**< member comment;
- in comment text, the characters Doxygen would read as commands, HTML or
  entities or links (backslash, @, <, >, &, #) are escaped, so "<prefix>/lib" and
  "\\n" come out as written.

Line numbers are kept (Doxygen's warnings point at the real lines)."""
import re
import sys

RULER = re.compile(r"^\s*/\*\s*-{2,}.*-{2,}\s*\*/\s*$")


def escape(text):
    return re.sub(r"([\\@<>&#])", r"\\\1", text)


def main(path):
    with open(path, encoding="utf-8") as f:
        src = f.read()
    out = []
    i = 0
    first = True
    n = len(src)
    line_start = True
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(src[i:j])
            i = j
            continue
        if c == '"' or c == "'":
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == "\\" else 1
            out.append(src[i:j + 1])
            i = j + 1
            line_start = False
            continue
        if src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j
            body = src[i + 2:j]
            whole_line = src[i:src.find("\n", j) if src.find("\n", j) >= 0 else n]
            if body.startswith("*") or body.startswith("!") or RULER.match(whole_line):
                out.append(src[i:j + 2])  # already Doxygen, or a ruler: as is
            elif first:
                # The file's description; @file last, with nothing after it
                # on its line, names the current file (and adds no line).
                out.append("/**" + escape(body) + " @file */")
            elif line_start:
                out.append("/**" + escape(body) + "*/")
            else:
                out.append("/**<" + escape(body) + "*/")
            first = False
            i = j + 2
            continue
        if c == "\n":
            line_start = True
        elif not c.isspace():
            line_start = False
            first = False  # code before any comment: no file description
        out.append(c)
        i += 1
    sys.stdout.write("".join(out))


if __name__ == "__main__":
    main(sys.argv[1])
