#!/usr/bin/env python3
"""Checks the dependency picture of the BUILD graph, folder by folder.

Each top-level folder is a node; folder A depends on folder B when a shipped
target in A (not a test, not testonly: tests may reach across the tree to set
up what they check) names a target of B in any attribute (deps, data, srcs,
hdrs; select() branches included). Two rules, each failure printed with a
target-level edge behind it:

  1. No cycles between folders.
  2. The libraries never depend up on the programs: no folder of LIBRARIES
     depends on one of PROGRAMS (parallel/ and model/ know nothing of the
     worker or the coordinator; the coordinator and the worker share the job
     spec's rules through jobspec/, not each other).

Usage: dependency_check.py [GRAPH_FILE]
GRAPH_FILE holds `bazel query --output=graph` edges; without it the script runs
that query over //... itself. Exits 1 on any failure.
"""
import re
import subprocess
import sys

PROGRAMS = {"cli", "coordinator", "worker"}
LIBRARIES = {"base", "checkpoint", "collectives", "data", "jobspec", "kernels",
             "metrics_log", "model", "parallel", "planner", "proto", "rpc",
             "training", "version"}
SHIPPED = "//... except tests(//...) except attr(testonly, 1, //...)"
QUERY = ["bazel", "query", "deps(" + SHIPPED + ", 1)", "--output=graph",
         "--nograph:factored", "--noimplicit_deps", "--keep_going"]
EDGE = re.compile(r'^\s*"(//[^"]*)"\s*->\s*"(//[^"]*)"')


def folder(label):
    package = label[2:].split(":", 1)[0]
    return package.split("/", 1)[0] or "//"


def folder_edges(lines):
    """{(from_folder, to_folder): an example (from_label, to_label)}."""
    edges = {}
    for line in lines:
        match = EDGE.match(line)
        if not match:
            continue
        source, target = match.groups()
        arrow = (folder(source), folder(target))
        if arrow[0] != arrow[1]:
            edges.setdefault(arrow, (source, target))
    return edges


def cycles(edges):
    """The strongly connected components with more than one folder."""
    graph = {}
    for source, target in edges:
        graph.setdefault(source, set()).add(target)
        graph.setdefault(target, set())
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(component)

    sys.setrecursionlimit(10000)
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def problems(edges):
    found = []
    for component in cycles(edges):
        found.append("folder cycle between " + ", ".join(sorted(component)) + ":")
        for (source, target), example in sorted(edges.items()):
            if source in component and target in component:
                found.append(f"  {source} -> {target}  ({example[0]} -> {example[1]})")
    for (source, target), example in sorted(edges.items()):
        if source in LIBRARIES and target in PROGRAMS:
            found.append(f"{source}/ depends up on {target}/: "
                         f"{example[0]} -> {example[1]}")
    return found


def main():
    if len(sys.argv) > 1:
        with open(sys.argv[1]) as graph:
            lines = graph.readlines()
    else:
        query = subprocess.run(QUERY, capture_output=True, text=True)
        if query.returncode not in (0, 3):  # 3: some packages failed to load
            sys.stderr.write(query.stderr)
            return 1
        lines = query.stdout.splitlines()
    edges = folder_edges(lines)
    found = problems(edges)
    for line in found:
        print(line)
    print(f"{len({f for arrow in edges for f in arrow})} folders, "
          f"{len(edges)} folder arrows: "
          + ("no cycle, no library depends on a program" if not found
             else f"{len(found)} problem line(s)"))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
