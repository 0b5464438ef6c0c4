#!/usr/bin/env python3
"""The repository stands alone: every link and citation in it resolves inside it.

Checks every tracked text file:
- a relative Markdown link names a file (and, for a Markdown file, a heading) of the
  repository; nothing links out of it;
- no path points outside the repository (`../shared`, absolute paths of a machine);
- every "SPEC §n.m" names a section of docs/spec.md, every "design §n" one of docs/design.md.

Exits 1 with one line per problem.
"""

import os
import re
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
TEXT = (".md", ".rs", ".py", ".proto", ".toml", ".sh", ".yml", ".yaml", ".service", ".txt")
TEXT_NAMES = ("Dockerfile", "run")

LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
OUTSIDE = re.compile(r"(\.\./)+shared\b|(?<![\w.~-])/(?:work|home|root|Users)/[\w.-]+")
SPEC_CITE = re.compile(r"SPEC §\s?(\d+(?:\.\d+)*)")
DESIGN_CITE = re.compile(r"design(?:\.md)? §\s?(\d+(?:\.\d+)*)", re.IGNORECASE)
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*$")
NUMBERED = re.compile(r"^#{1,6}\s+(\d+(?:\.\d+)*)\.?\s")


def tracked():
    out = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True
    ).stdout
    for path in out.decode().split("\0"):
        if path and (path.endswith(TEXT) or os.path.basename(path) in TEXT_NAMES):
            yield path


def slug(heading):
    """GitHub's anchor of a heading."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading)
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def headings(path, cache={}):
    if path not in cache:
        anchors, numbers = set(), set()
        seen = {}
        in_code = False
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            for line in f:
                if line.startswith("```"):
                    in_code = not in_code
                if in_code:
                    continue
                m = HEADING.match(line)
                if not m:
                    continue
                base = slug(m.group(1))
                n = seen.get(base, 0)
                seen[base] = n + 1
                anchors.add(base if n == 0 else f"{base}-{n}")
                number = NUMBERED.match(line)
                if number:
                    numbers.add(number.group(1))
        cache[path] = (anchors, numbers)
    return cache[path]


def main():
    problems = []
    spec_numbers = headings("docs/spec.md")[1]
    design_numbers = headings("docs/design.md")[1]
    for path in tracked():
        try:
            with open(os.path.join(ROOT, path), encoding="utf-8") as f:
                lines = f.read().splitlines()
        except (UnicodeDecodeError, FileNotFoundError):
            continue
        for no, line in enumerate(lines, 1):
            where = f"{path}:{no}"
            if path != ".ci/links.py":
                for m in OUTSIDE.finditer(line):
                    problems.append(f"{where}: a path outside the repository: {m.group(0)}")
            for m in SPEC_CITE.finditer(line):
                if m.group(1) not in spec_numbers:
                    problems.append(f"{where}: SPEC §{m.group(1)} is no section of docs/spec.md")
            for m in DESIGN_CITE.finditer(line):
                if m.group(1) not in design_numbers:
                    problems.append(f"{where}: design §{m.group(1)} is no section of docs/design.md")
            if not path.endswith(".md"):
                continue
            for m in LINK.finditer(line):
                target = m.group(1)
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                    continue  # http(s), mailto: not ours to check offline
                file_part, _, anchor = target.partition("#")
                resolved = (
                    os.path.normpath(os.path.join(os.path.dirname(path), file_part))
                    if file_part
                    else path
                )
                if resolved.startswith("..") or os.path.isabs(file_part):
                    problems.append(f"{where}: a link out of the repository: {target}")
                    continue
                if not os.path.exists(os.path.join(ROOT, resolved)):
                    problems.append(f"{where}: a link to a missing file: {target}")
                    continue
                if anchor and resolved.endswith(".md"):
                    if anchor not in headings(resolved)[0]:
                        problems.append(f"{where}: no heading #{anchor} in {resolved}")
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} link or citation problems", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
