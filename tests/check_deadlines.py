#!/usr/bin/env python3
"""Every Criterion test has a deadline : a test that hangs must
be reported by name as timed out, never block the suite.  A test has one
when its Test(...) sets .timeout or its suite's TestSuite(...) does.  Prints
each test without one and exits 1; run by meson test as 'deadlines'."""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parent)
missing = []
for path in sorted(root.glob("test_*.c")):
    text = path.read_text()
    suites = set(re.findall(r"TestSuite\(\s*(\w+)\s*,[^;]*\.timeout\s*=", text))
    for m in re.finditer(r"^(?:Test|ParameterizedTest)\((.*?)\)\s*\{", text, re.M | re.S):
        args = m.group(1)
        parts = [p.strip() for p in args.split(",")]
        suite = parts[1] if m.group(0).startswith("Parameterized") else parts[0]
        name = parts[2] if m.group(0).startswith("Parameterized") else parts[1]
        if ".timeout" not in args and suite not in suites:
            missing.append(f"{path.name}: {suite}::{name} has no timeout (set .timeout in Test() or TestSuite())")
for line in missing:
    print(line)
print(f"deadlines: {len(missing)} tests without a timeout")
sys.exit(1 if missing else 0)
