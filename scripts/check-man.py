#!/usr/bin/env python3
"""Check a tool's man page against the tool: check-man.py PAGE.1 TOOL [SUBCOMMAND...]

Every long option that `TOOL --help` (and `TOOL SUB --help` for each
SUBCOMMAND) prints must appear in the page, so the two cannot drift apart;
when groff is installed, the page must also format without a warning
(groff -man -ww -z).  Exits 0 when all is well, 1 with the reasons."""
import re
import shutil
import subprocess
import sys


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    page, tool, subs = sys.argv[1], sys.argv[2], sys.argv[3:]
    with open(page, encoding="utf-8") as f:
        roff = f.read()
    text = roff.replace("\\-", "-")
    problems = []
    for args in [[]] + [[s] for s in subs]:
        out = subprocess.run([tool] + args + ["--help"], capture_output=True, text=True)
        if out.returncode != 0:
            problems.append(f"{' '.join([tool] + args)} --help exited {out.returncode}")
            continue
        for opt in sorted(set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", out.stdout))):
            if not re.search(re.escape(opt) + r"(?![a-z0-9-])", text):
                problems.append(f"{page}: {opt} (from {' '.join(args) or 'the tool'} --help) is not documented")
        for sub in subs if not args else []:
            if not re.search(r"\b" + re.escape(sub) + r"\b", text):
                problems.append(f"{page}: subcommand {sub} is not documented")
    if shutil.which("groff"):
        fmt = subprocess.run(["groff", "-man", "-ww", "-z", page], capture_output=True, text=True)
        if fmt.returncode != 0 or fmt.stderr.strip():
            problems.append(f"{page}: groff warnings:\n{fmt.stderr}")
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
