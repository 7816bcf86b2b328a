#!/usr/bin/python3
"""tests/check_test_names.py: every Catch2 test case of tests/ and properties/ is a CTest
entry that runs it. catch_discover_tests makes one CTest entry per TEST_CASE name, and
CTest splits a name at ';' into several entries that match no test: Catch2 then reports
"No tests ran" and exits 0, so the case passed without running (ten cases did, until
2026-12-03). A name with ';', or one that is not a single string literal, fails here."""
import pathlib
import re
import sys

root = pathlib.Path(__file__).resolve().parent.parent
bad = []
for f in sorted([*root.glob("tests/**/*.cpp"), *root.glob("properties/*.cpp")]):
    text = f.read_text()
    for m in re.finditer(r'\b(?:TEMPLATE_)?TEST_CASE\(\s*("(?:[^"\\]|\\.)*")?', text):
        line = text.count("\n", 0, m.start()) + 1
        name = m.group(1)
        if name is None:
            bad.append(f"{f.relative_to(root)}:{line}: the test case's name is not a string literal")
        elif ";" in name:
            bad.append(f"{f.relative_to(root)}:{line}: {name} has ';' (CTest splits it: the case would never run)")
print("\n".join(bad) if bad else "every test case name is one CTest entry")
sys.exit(1 if bad else 0)
