#!/usr/bin/python3
"""readme_check.py - the READMEs point at what exists.

    readme_check.py --src TREE --bin NIGHTSHIFT

For every README.md in the tree (and the records under experiments/records):
every relative link resolves to a file or folder, and a link's #anchor to a
heading of the Markdown file it names; every `make TARGET` in code (a code
block or `inline code`) names a target of the Makefile; every
`nightshift COMMAND` (or `build/nightshift COMMAND`) in code answers
`COMMAND --help` with exit 0. Prints one line per problem and exits 1 if there
is any, else prints "all checks passed".
"""
import argparse
import os
import re
import subprocess
import sys

SKIP_DIRS = {".git", "build", "node_modules", "state"}


def markdown_files(src):
    for root, dirs, files in os.walk(src):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith(".")]
        rel = os.path.relpath(root, src)
        for f in files:
            if f == "README.md" or (f.endswith(".md") and rel == os.path.join("experiments", "records")):
                yield os.path.join(root, f)


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation but - and _ dropped, spaces to -."""
    s = re.sub(r"[`*]", "", heading.strip().lower())
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(path):
    out = set()
    in_code = False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("```"):
                in_code = not in_code
            m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
            if m and not in_code:
                out.add(slug(m.group(2)))
    return out


def code_spans(text):
    """Indented or fenced code blocks, line by line, and `inline code`."""
    spans, in_fence = [], False
    for line in text.split("\n"):
        if line.startswith("```"):
            in_fence = not in_fence
            continue
        if in_fence or line.startswith("    "):
            spans.append(line)
        else:
            spans.extend(re.findall(r"`([^`]+)`", line))
    # inline code may wrap onto the next line
    spans.extend(m.replace("\n", " ") for m in re.findall(r"`([^`]+)`", text, re.S) if "\n" in m)
    return spans


def make_targets(src):
    targets = set()
    with open(os.path.join(src, "Makefile"), encoding="utf-8") as f:
        for line in f:
            m = re.match(r"^([A-Za-z0-9_.\- ]+?)\s*:(?!=)", line)
            if m and not line.startswith("\t"):
                targets.update(m.group(1).split())
            if line.startswith(".PHONY:"):
                targets.update(line.split()[1:])
    return targets


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--src", required=True)
    ap.add_argument("--bin", required=True)
    a = ap.parse_args()
    problems, checked = [], {"links": 0, "targets": 0, "commands": 0}
    targets = make_targets(a.src)
    commands = set()
    for path in sorted(markdown_files(a.src)):
        rel = os.path.relpath(path, a.src)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        prose = re.sub(r"^(```.*?^```|    .*?)$", "", text, flags=re.M | re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", prose):
            if re.match(r"^[a-z]+:", target):
                continue
            checked["links"] += 1
            file_part, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
            if not os.path.exists(dest):
                problems.append(f"{rel}: link to {target}: {os.path.relpath(dest, a.src)} does not exist")
            elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
                problems.append(f"{rel}: link to {target}: no heading #{anchor} there")
        for span in code_spans(text):
            for m in re.finditer(r"(?:^|[\s(=;&|])make\s+([a-z][a-z0-9\-]*)", span):
                checked["targets"] += 1
                if m.group(1) not in targets:
                    problems.append(f"{rel}: `make {m.group(1)}` names no target of the Makefile")
            for m in re.finditer(r"(?:^|[\s(])(?:build/)?nightshift((?:\s+[a-z][a-z\-]*){1,2})(?![\w:/.])", span):
                words = m.group(1).split()
                commands.add((rel, tuple(words)))
    seen = {}
    for rel, words in sorted(commands):
        # a second word is a subcommand only where the first has them (`agent status`)
        key = words
        if key not in seen:
            r = subprocess.run([a.bin, *words, "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               timeout=30)
            if r.returncode != 0 and len(words) > 1:
                key = words[:1]
                r = subprocess.run([a.bin, *key, "--help"], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, timeout=30)
            seen[words] = r.returncode
            checked["commands"] += 1
        if seen[words] != 0:
            problems.append(f"{rel}: `nightshift {' '.join(words)} --help` exits {seen[words]}")
    for p in problems:
        print(p)
    print(f"checked {checked['links']} links, {checked['targets']} make targets, "
          f"{checked['commands']} commands")
    if problems:
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
