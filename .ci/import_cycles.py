#!/usr/bin/env python3
"""Fails when files of a crate import each other in a cycle.

An edge a -> b is drawn when the code of file a names an item of file b:
`crate::…`, `super::…` or a child module's path (`mod x;` then `x::…`).
A re-export (`pub use x::Item;`) is not code: a path through it is
followed to the file that defines the item. Comments and `#[cfg(test)]`
modules are left out (tests may import anything).

Usage: import_cycles.py <crate src dir>...
"""
import re
import sys
from pathlib import Path

PATH = re.compile(r"\b(crate|super|self)(?=::)((?:::\w+)*)(?:::\{([^}]*)\})?")
CHILD_MOD = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", re.M)
TEST_MOD = re.compile(r"#\[cfg\(test\)\]\s*(?:pub\s+)?mod\s+(\w+)\s*;")
REEXPORT = re.compile(r"^\s*pub(?:\([^)]*\))?\s+use\s+([^;]+);", re.M)


def module_files(src: Path):
    files = {}
    for path in src.rglob("*.rs"):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] in ("mod", "lib", "main"):
            parts = parts[:-1]
        if "bin" in parts:
            continue
        files[tuple(parts)] = path
    return files


def code_of(text: str) -> str:
    cut = re.search(r"#\[cfg\(test\)\]\s*(?:pub\s+)?mod\s+\w+\s*\{", text)
    if cut:
        text = text[: cut.start()]
    text = re.sub(r'"(?:[^"\\\n]|\\.)*"', '""', text)
    return re.sub(r"//[^\n]*", "", text)


class Crate:
    def __init__(self, src: Path):
        self.files = module_files(src)
        texts = {m: p.read_text() for m, p in self.files.items()}
        for mod, text in texts.items():
            for name in TEST_MOD.findall(text):
                self.files.pop(mod + (name,), None)
        self.code = {m: code_of(texts[m]) for m in self.files}
        self.children = {m: set(CHILD_MOD.findall(c)) for m, c in self.code.items()}
        # (module, name) -> the path the module re-exports under that name
        self.reexports = {}
        for mod, code in self.code.items():
            for body in REEXPORT.findall(code):
                for path in expand(body):
                    if path and path[-1] != "*":
                        self.reexports[(mod, path[-1])] = self.absolute(mod, path)

    def absolute(self, mod, segs):
        """The crate-absolute segments of a path written in `mod`."""
        segs = list(segs)
        if segs[0] == "crate":
            return segs[1:]
        base = list(mod)
        if segs[0] == "self":
            segs = segs[1:]
        while segs and segs[0] == "super":
            base, segs = base[:-1], segs[1:]
        return base + segs

    def target(self, segs, seen=0):
        """The file defining what the absolute path `segs` names."""
        for n in range(len(segs), -1, -1):
            mod = tuple(segs[:n])
            if mod in self.files:
                rest = segs[n:]
                if rest and (mod, rest[0]) in self.reexports and seen < 16:
                    return self.target(self.reexports[(mod, rest[0])] + rest[1:], seen + 1)
                return mod
        return None

    def edges(self, mod):
        code = CHILD_MOD.sub("", REEXPORT.sub("", self.code[mod]))
        out = set()
        for m in PATH.finditer(code):
            head = [m.group(1)] + m.group(2).strip(":").split("::")
            items = [head]
            if m.group(3) is not None:
                items = [head + p for p in expand(m.group(3))]
            for segs in items:
                out.add(self.target(self.absolute(mod, segs)))
        for child in self.children[mod]:
            pattern = r"(?<![:\w])" + child + r"((?:::\w+)*)::(?:\{([^}]*)\}|(\w+))"
            for m in re.finditer(pattern, code):
                head = [child] + [s for s in m.group(1).split("::") if s]
                if m.group(3):
                    head.append(m.group(3))
                items = [head + p for p in expand(m.group(2))] if m.group(2) else [head]
                for segs in items:
                    out.add(self.target(list(mod) + segs))
        out.discard(None)
        out.discard(mod)
        return out


def expand(body: str):
    """`a::{b, c::d as e}` -> [[a, b], [a, c, d]]."""
    body = re.sub(r"\s+as\s+\w+", "", body)
    body = re.sub(r"\s+", "", body)
    m = re.fullmatch(r"((?:\w+::)*)\{(.*)\}", body)
    if not m:
        return [body.split("::")] if body else []
    prefix = [s for s in m.group(1).split("::") if s]
    out = []
    for item in split_top(m.group(2)):
        if item == "self":
            out.append(prefix)
        else:
            out.extend(prefix + p for p in expand(item))
    return out


def split_top(s):
    depth, cur, out = 0, "", []
    for ch in s:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return [x for x in out if x]


def cycles(graph):
    """Strongly connected components of more than one file (Tarjan)."""
    index, low, stack, on, found = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    sys.setrecursionlimit(100000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def main(dirs):
    bad = 0
    for src in dirs:
        crate = Crate(Path(src))
        graph = {m: crate.edges(m) for m in crate.files}
        for comp in cycles(graph):
            bad += 1
            names = ", ".join("::".join(c) or "(crate root)" for c in comp)
            print(f"{src}: import cycle among {names}")
            for a in comp:
                for b in sorted(graph[a] & set(comp)):
                    print(f"    {'::'.join(a) or '(crate root)'} -> {'::'.join(b) or '(crate root)'}")
    return 1 if bad else 0


def self_test():
    """The checker finds the cycles it is for, and only those."""
    import contextlib
    import io
    import tempfile

    cases = {
        # a -> b -> a through `use crate::`
        "use": ({"lib.rs": "mod a;\nmod b;", "a.rs": "use crate::b::B;", "b.rs": "use crate::a::A;"}, 1),
        # through `super::`, a child module's path and a brace group
        "super": ({"lib.rs": "mod m;", "m/mod.rs": "mod x;\nfn f() { x::go() }",
                   "m/x.rs": "use super::{Thing, other};"}, 1),
        # a re-export is followed to the file defining the item
        "reexport": ({"lib.rs": "mod p;\nmod q;", "p/mod.rs": "mod r;\npub use r::R;",
                      "p/r.rs": "use crate::q::Q;", "q.rs": "use crate::p::R;"}, 1),
        # no cycle: a facade re-exporting its children, comments, tests
        "facade": ({"lib.rs": "mod p;\nmod q;", "p/mod.rs": "mod r;\npub use r::R;",
                    "p/r.rs": "// crate::q::Q\nstruct R;",
                    "q.rs": "use crate::p::R;\n#[cfg(test)]\nmod tests {\n use crate::p::r::R;\n}"}, 0),
    }
    for name, (files, expected) in cases.items():
        with tempfile.TemporaryDirectory() as root:
            for path, text in files.items():
                (Path(root) / path).parent.mkdir(parents=True, exist_ok=True)
                (Path(root) / path).write_text(text)
            with contextlib.redirect_stdout(io.StringIO()):
                found = main([root])
            assert found == expected, f"self-test {name}: expected {expected}, got {found}"


if __name__ == "__main__":
    self_test()
    sys.exit(main(sys.argv[1:]))
