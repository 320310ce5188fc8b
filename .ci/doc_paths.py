#!/usr/bin/env python3
"""Fails when README.md or docs/ name a file or directory that does not exist.

A path is a backquoted word or a Markdown link target that contains a `/`
and either ends in a file extension or with `/`. It exists when a tracked
file (or directory) has it as its whole path or as its trailing part
(`scheduler/rerun.rs` names `coordinator/src/scheduler/rerun.rs`); a link
target is also tried relative to the Markdown file that holds it. Words that
are not repository paths (URLs, `--flags`, `key=value`, globs, places on
the host such as `/usr/sbin/nginx` or `~/.s3s`) are left alone.

Usage: doc_paths.py [markdown files...]   (default: README.md docs/**/*.md)
"""
import os
import re
import subprocess
import sys
from pathlib import Path, PurePosixPath

CODE = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")
EXTENSIONS = (
    ".rs", ".py", ".md", ".proto", ".toml", ".sh", ".json", ".yaml", ".yml",
    ".sql", ".slt", ".java", ".xml", ".txt", ".html", ".js", ".css", ".cfg",
)
# Things docs mention that the repository does not hold on purpose: what a
# run creates, or what lives on the machine.
GENERATED = ("squadron-data/", "target/", "integration/.venv", "integration/azurite",
             "integration/.gcs", "certs/dev", "catalog/v", "sf10.json")


def tracked():
    out = subprocess.run(["git", "ls-files"], capture_output=True, text=True, check=True)
    files = [line for line in out.stdout.splitlines() if line]
    dirs = set()
    for f in files:
        parts = PurePosixPath(f).parts
        for i in range(1, len(parts)):
            dirs.add("/".join(parts[:i]))
    return files, dirs


def is_candidate(word: str) -> bool:
    if "/" not in word or " " in word or "://" in word or word.startswith(("/", "~", "-", "$")):
        return False
    if any(c in word for c in "*=<>{}|…,?&@()'\"\\") or ".." in word:
        return False
    if word.startswith(GENERATED) or any(g in word for g in GENERATED):
        return False
    return word.endswith("/") or word.endswith(EXTENSIONS)


def exists(word: str, files, dirs) -> bool:
    word = word.removeprefix("./")
    if word.endswith("/"):
        name = word.rstrip("/")
        return name in dirs or any(d.endswith("/" + name) for d in dirs)
    return word in files or any(f.endswith("/" + word) for f in files)


def moved(line: str, word: str) -> bool:
    """History may name a file as it was, when the same line says where it went."""
    return f"`{word}` (since moved to" in line


def main(paths):
    files, dirs = tracked()
    documents = [Path(p) for p in paths] or [Path("README.md"), *sorted(Path("docs").rglob("*.md"))]
    missing = []
    for doc in documents:
        text = doc.read_text()
        for number, line in enumerate(text.splitlines(), 1):
            words = [(m, False) for m in CODE.findall(line)]
            words += [(m, True) for m in LINK.findall(line)]
            for word, is_link in words:
                word = word.strip()
                if is_link:
                    if "://" in word or word.startswith("mailto:"):
                        continue
                    relative = (doc.parent / word).as_posix()
                    target = os.path.normpath(relative)
                    if exists(word, files, dirs) or exists(target, files, dirs) \
                            or exists(target + "/", files, dirs):
                        continue
                    missing.append(f"{doc}:{number}: link {word}")
                elif is_candidate(word) and not exists(word, files, dirs) \
                        and not moved(line, word):
                    missing.append(f"{doc}:{number}: {word}")
    for m in missing:
        print(m)
    if missing:
        print(f"{len(missing)} paths named in the docs do not exist", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
