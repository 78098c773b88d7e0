#!/usr/bin/env python3
"""The module graph of `shared/src`, checked: no cycles, no upward imports, no long files.

Reads every module file reachable from `shared/src/lib.rs` (its `mod` declarations; modules under
`#[cfg(test)]` are left out, they exist to look inside their parent), collects what each imports
(`use` trees, `crate::`/`super::`/`self::` paths, paths through a child module's name), follows
`pub use` re-exports to the module that defines the item, and fails when:

  (a) two modules import each other, directly or around a circle: between top-level modules, and
      between the direct parts of each folder (the folder's own file counts as one part);
  (b) a top-level module imports from a layer above its own (the layers are the rows of the table
      under "## Inside `shared/`" in docs/layout.md, top to bottom);
  (c) a `.rs` file in `shared/` or `functions/` is over 600 lines.

Prints the graph (top-level modules by layer, then each folder's parts) so docs/layout.md can
draw it. Python 3 standard library only. `--self-test` runs it on small fixture trees.

Usage: scripts/module-graph.py [--root DIR] [--quiet] | --self-test
"""

import os
import re
import sys
import tempfile

MAX_LINES = 600
LONG_FILE_DIRS = ("shared", "functions")


def strip_source(text):
    """Comments, strings and char literals removed (lengths are not kept; only paths matter)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'r(#*)"', text[i:])
            end = '"' + m.group(1)
            j = text.find(end, i + len(m.group(0)))
            i = n if j < 0 else j + len(end)
            out.append('""')
        elif c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1
            out.append('""')
        elif c == "'":
            m = re.match(r"'(\\.[^']*|[^\\'])'", text[i:])
            if m:
                i += len(m.group(0))
                out.append("' '")
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


ATTR = r"(?:#\s*\[[^\]]*(?:\[[^\]]*\][^\]]*)*\]\s*)"
MOD_RE = re.compile(r"((?:" + ATTR + r")*)(?:pub(?:\s*\([^)]*\))?\s+)?mod\s+(\w+)\s*([;{])")


def is_test_only(attrs):
    for cfg in re.findall(r"cfg\s*\((.*)\)", attrs):
        if re.search(r"\btest\b", cfg) and "not(test" not in cfg.replace(" ", ""):
            return True
    return False


def matching_brace(text, open_at):
    depth = 0
    for j in range(open_at, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(text) - 1


def scan_mods(text):
    """(file-module children, text with test-only inline modules removed, inline module names)."""
    children, inline = [], []
    pieces, pos = [], 0
    for m in MOD_RE.finditer(text):
        if m.start() < pos:
            continue
        attrs, name, kind = m.group(1), m.group(2), m.group(3)
        if kind == ";":
            if not is_test_only(attrs):
                children.append(name)
        else:
            close = matching_brace(text, m.end() - 1)
            if is_test_only(attrs):
                pieces.append(text[pos:m.start()])
                pos = close + 1
            else:
                inline.append(name)
    pieces.append(text[pos:])
    return children, "".join(pieces), inline


def split_top(s, sep=","):
    parts, depth, cur = [], 0, []
    for ch in s:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def expand_use(tree, prefix=()):
    """`a::{b, c::{d as e}}` -> [(['a','b'], 'b'), (['a','c','d'], 'e')] (path, name bound)."""
    tree = tree.strip()
    if tree.startswith("::"):
        tree = tree[2:]
    if tree.startswith("{"):
        out = []
        for part in split_top(tree[1:tree.rindex("}")]):
            out.extend(expand_use(part, prefix))
        return out
    head, sep, rest = tree.partition("::")
    head = head.strip()
    if sep:
        return expand_use(rest, prefix + (head,))
    m = re.match(r"(\w+|\*)(?:\s+as\s+(\w+))?$", head)
    if not m:
        return []
    seg, alias = m.group(1), m.group(2)
    if seg == "self":
        return [(list(prefix), alias or (prefix[-1] if prefix else None))]
    return [(list(prefix) + [seg], alias or (None if seg == "*" else seg))]


USE_RE = re.compile(r"\b(pub(?:\s*\([^)]*\))?\s+)?use\s+([^;]+);")
DEF_RE = re.compile(r"\b(?:fn|struct|enum|const|static|type|trait|union|macro_rules!)\s+(\w+)")
PATH_RE = re.compile(r"(?<![\w:])((?:crate|super|self)(?:\s*::\s*\w+)+|\w+(?:\s*::\s*\w+)+)")


class Module:
    def __init__(self, path, file):
        self.path = tuple(path)  # () for the crate root
        self.file = file
        self.children = []
        self.inline = []
        self.uses = []  # (absolute or relative segments)
        self.reexports = {}  # bound name -> segments
        self.globs = []  # segments of `pub use x::*`
        self.defines = set()  # names of the items the file itself defines
        self.lines = 0


def load(src):
    mods = {}

    def visit(path, file):
        with open(file, encoding="utf-8") as f:
            raw = f.read()
        mod = Module(path, file)
        mod.lines = raw.count("\n")
        text = re.sub(r"pub\s*\(\s*in\s+[\w:]+\s*\)", "pub", strip_source(raw))
        children, text, inline = scan_mods(text)
        mod.children, mod.inline = children, inline
        for m in USE_RE.finditer(text):
            for segs, bound in expand_use(m.group(2)):
                mod.uses.append(segs)
                if m.group(1) and bound:
                    mod.reexports[bound] = segs
                elif m.group(1) and segs[-1] == "*":
                    mod.globs.append(segs[:-1])
        mod.defines = set(DEF_RE.findall(text)) | set(inline)
        body = USE_RE.sub(" ", text)
        for m in PATH_RE.finditer(body):
            segs = [s.strip() for s in m.group(1).split("::")]
            mod.uses.append(segs)
        mods[mod.path] = mod
        base = os.path.dirname(file) if os.path.basename(file) in ("mod.rs", "lib.rs") else file[:-3]
        for c in children:
            for cand in (os.path.join(base, c + ".rs"), os.path.join(base, c, "mod.rs")):
                if os.path.exists(cand):
                    visit(path + (c,), cand)
                    break

    visit((), os.path.join(src, "lib.rs"))
    return mods


def absolute(mods, mod, segs):
    """The segments as a path from the crate root, or None for another crate's path."""
    if not segs:
        return None
    head = segs[0]
    if head == "crate":
        return list(segs[1:])
    if head in ("super", "self"):
        base = list(mod.path)
        i = 0
        while i < len(segs) and segs[i] in ("super", "self"):
            if segs[i] == "super":
                if not base:
                    return None
                base.pop()
            i += 1
        return base + list(segs[i:])
    if head in mod.children:
        return list(mod.path) + list(segs)
    return None


def resolve(mods, segs, depth=0):
    """The module that defines the item a path names (following `pub use` re-exports)."""
    best = ()
    for k in range(len(segs), -1, -1):
        if tuple(segs[:k]) in mods:
            best = tuple(segs[:k])
            break
    rest = segs[len(best):]
    target = mods[best]
    if rest and rest[0] in target.reexports and depth < 8:
        to = absolute(mods, target, target.reexports[rest[0]])
        if to is not None:
            return resolve(mods, to + list(rest[1:]), depth + 1)
    if rest and rest[0] not in target.defines and depth < 8:
        for glob in target.globs:
            to = absolute(mods, target, glob)
            if to is not None and tuple(to) in mods and rest[0] in mods[tuple(to)].defines:
                return resolve(mods, to + list(rest), depth + 1)
    return best


def edges_of(mods):
    edges = set()
    for mod in mods.values():
        for segs in mod.uses:
            to = absolute(mods, mod, segs)
            if to is None:
                continue
            target = resolve(mods, to)
            if target != mod.path:
                edges.add((mod.path, target))
    return edges


def find_cycles(nodes, edges):
    """Strongly connected components with more than one node (Tarjan)."""
    graph = {n: sorted({b for a, b in edges if a == n and b in nodes and b != n}) for n in nodes}
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                strong(w)
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
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for n in sorted(nodes):
        if n not in index:
            strong(n)
    return out


def read_layers(layout):
    """[(layer name, [modules])] from the table under "## Inside `shared/`", top to bottom."""
    layers, inside = [], False
    with open(layout, encoding="utf-8") as f:
        for line in f:
            if line.startswith("## "):
                inside = line.strip() == "## Inside `shared/`"
                continue
            if inside and line.startswith("|") and not line.startswith("|---"):
                cells = [c.strip() for c in line.strip().strip("|").split("|")]
                if len(cells) >= 2 and cells[0] != "layer":
                    names = re.findall(r"`([a-z_]+)`", cells[1])
                    layers.append((cells[0], names))
    return layers


def name(path):
    return "::".join(path) or "crate"


def check(root, quiet=False):
    src = os.path.join(root, "shared", "src")
    mods = load(src)
    edges = edges_of(mods)
    problems = []

    # (a) cycles: between top-level modules, and between the parts of each folder.
    def collapse(path, depth):
        return path[:depth]

    groups = {}  # folder -> (parts, edges between parts)
    for folder, mod in mods.items():
        if not mod.children:
            continue
        parts = {folder} | {folder + (c,) for c in mod.children if folder + (c,) in mods}
        depth = len(folder) + 1
        part_edges = set()
        for a, b in edges:
            if a[:len(folder)] != folder or b[:len(folder)] != folder:
                continue
            ca = a if len(a) < depth else collapse(a, depth)
            cb = b if len(b) < depth else collapse(b, depth)
            if folder == ():
                if ca == () or cb == ():
                    continue  # the crate root only declares and re-exports
            if ca != cb:
                part_edges.add((ca, cb))
        if folder == ():
            parts.discard(())
        groups[folder] = (parts, part_edges)
        for comp in find_cycles(parts, part_edges):
            where = "top-level modules" if folder == () else "inside " + name(folder)
            problems.append("cycle (%s): %s" % (where, " <-> ".join(name(p) for p in comp)))

    # (b) upward imports between top-level modules.
    layers = read_layers(os.path.join(root, "docs", "layout.md"))
    level = {m: i for i, (_, ms) in enumerate(layers) for m in ms}
    top_parts, top_edges = groups[()]
    for p in sorted(top_parts):
        if p[0] not in level:
            problems.append("layer: %s is in no row of docs/layout.md's table" % p[0])
    for a, b in sorted(top_edges):
        if a[0] in level and b[0] in level and level[b[0]] < level[a[0]]:
            problems.append("upward import: %s (%s) -> %s (%s)" % (
                a[0], layers[level[a[0]]][0], b[0], layers[level[b[0]]][0]))

    # (c) long files.
    for d in LONG_FILE_DIRS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, d)):
            dirnames[:] = [x for x in dirnames if x not in ("target", "node_modules", ".git")]
            for fn in filenames:
                if fn.endswith(".rs"):
                    p = os.path.join(dirpath, fn)
                    with open(p, encoding="utf-8", errors="replace") as f:
                        count = sum(1 for _ in f)
                    if count > MAX_LINES:
                        problems.append("long file: %s has %d lines (at most %d)" % (
                            os.path.relpath(p, root), count, MAX_LINES))

    if not quiet:
        print("shared/src: %d modules, %d imports between them" % (len(mods), len(edges)))
        print("\ntop-level modules, by layer (top to bottom): module -> what it imports")
        for lname, ms in layers:
            print("  [%s]" % lname)
            for m in ms:
                if (m,) in top_parts:
                    deps = sorted({b[0] for a, b in top_edges if a == (m,)})
                    print("    %-12s -> %s" % (m, ", ".join(deps) or "-"))
        print("\ninside each folder: part -> sibling parts it imports (the folder's own file is `self`)")
        for folder in sorted(groups):
            if folder == ():
                continue
            parts, pe = groups[folder]
            print("  %s" % name(folder))
            for p in sorted(parts):
                label = "self" if p == folder else p[-1]
                deps = sorted("self" if b == folder else b[-1] for a, b in pe if a == p)
                print("    %-12s -> %s" % (label, ", ".join(deps) or "-"))
        print()
    for p in problems:
        print("FAIL " + p)
    if not problems:
        print("module graph: no cycles, no upward imports, no file over %d lines" % MAX_LINES)
    return 1 if problems else 0


def self_test():
    layout = (
        "# Layout\n\n## Inside `shared/`\n\n| layer | modules | what |\n|---|---|---|\n"
        "| top | `a` | x |\n| bottom | `b`, `c` | y |\n"
    )
    cases = {
        "clean": ({
            "lib.rs": "pub mod a;\npub mod b;\npub mod c;\n",
            "a.rs": "use crate::b::{self, X};\nfn f() { crate::c::g(); }\n",
            "b/mod.rs": "mod part;\npub use part::X;\n#[cfg(test)]\nmod tests { use super::*; }\n",
            "b/part.rs": "use crate::c::g;\npub struct X;\n// use crate::a; in a comment\n",
            "c.rs": "pub fn g() {}\nconst S: &str = \"crate::a::f\";\n",
        }, []),
        "top-level cycle": ({
            "lib.rs": "pub mod a;\npub mod b;\npub mod c;\n",
            "a.rs": "",
            "b.rs": "use crate::c::Y;\npub struct X;\n",
            "c.rs": "pub struct Y;\nfn f(_: crate::b::X) {}\n",
        }, ["cycle (top-level modules): b <-> c"]),
        "cycle inside a folder, through the folder's own file": ({
            "lib.rs": "pub mod a;\npub mod b;\npub mod c;\n",
            "a.rs": "",
            "c.rs": "",
            "b/mod.rs": "mod part;\npub use part::X;\npub struct Y;\n",
            "b/part.rs": "use super::Y;\npub struct X;\n",
        }, ["cycle (inside b): b <-> b::part"]),
        "upward import": ({
            "lib.rs": "pub mod a;\npub mod b;\npub mod c;\n",
            "a.rs": "pub struct Z;\n",
            "b.rs": "use crate::a::Z;\n",
            "c.rs": "",
        }, ["upward import: b (bottom) -> a (top)"]),
        "long file": ({
            "lib.rs": "pub mod a;\npub mod b;\npub mod c;\n",
            "a.rs": "\n" * (MAX_LINES + 1),
            "b.rs": "",
            "c.rs": "",
        }, ["long file: shared/src/a.rs has %d lines (at most %d)" % (MAX_LINES + 1, MAX_LINES)]),
    }
    import contextlib
    import io
    failed = 0
    for label, (files, expected) in cases.items():
        with tempfile.TemporaryDirectory() as root:
            os.makedirs(os.path.join(root, "docs"))
            with open(os.path.join(root, "docs", "layout.md"), "w") as f:
                f.write(layout)
            for rel, body in files.items():
                p = os.path.join(root, "shared", "src", rel)
                os.makedirs(os.path.dirname(p), exist_ok=True)
                with open(p, "w") as f:
                    f.write(body)
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                rc = check(root, quiet=True)
            got = [l[5:] for l in buf.getvalue().splitlines() if l.startswith("FAIL ")]
            ok = got == expected and rc == (1 if expected else 0)
            print("self-test %-55s %s" % (label, "ok" if ok else "WRONG: got %r, rc %d" % (got, rc)))
            failed += not ok
    return 1 if failed else 0


def main(argv):
    if "--self-test" in argv:
        return self_test()
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    if "--root" in argv:
        root = argv[argv.index("--root") + 1]
    st = self_test() if "--no-self-test" not in argv else 0
    return check(os.path.normpath(root), quiet="--quiet" in argv) or st


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
