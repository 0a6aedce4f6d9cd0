"""The import structure of `src/shapelm`, measured: its import cycles (strongly connected groups
of modules) and the width of each.

    .venv/bin/python benchmarks/import_graph.py [--max-cycles N] [--max-width W]

Counts every import, lazy ones inside functions too (grimp reads them all). With the limits
given, exits 1 when there are more cycles than N or one is wider than W files.
"""
from __future__ import annotations

import argparse
import sys


def cycles(package: str = "shapelm") -> list[list[str]]:
    """Each import cycle of `package`'s modules, as its sorted members (Tarjan's strongly
    connected components of two or more modules)."""
    import grimp

    graph = grimp.build_graph(package)
    modules = sorted(graph.modules)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(root: str) -> None:  # iterative Tarjan: the graph is deeper than the recursion limit allows
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges[child])))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        found.append(sorted(group))

    for m in modules:
        if m not in index:
            visit(m)
    return sorted(found, key=lambda g: (-len(g), g))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--max-cycles", type=int)
    p.add_argument("--max-width", type=int)
    args = p.parse_args(argv)
    found = cycles()
    print(f"{len(found)} import cycle(s) in shapelm")
    for group in found:
        print(f"  {len(group)} modules: {', '.join(group)}")
    too_many = args.max_cycles is not None and len(found) > args.max_cycles
    too_wide = args.max_width is not None and any(len(g) > args.max_width for g in found)
    return 1 if too_many or too_wide else 0


if __name__ == "__main__":
    sys.exit(main())
