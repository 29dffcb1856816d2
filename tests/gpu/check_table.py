"""The summary table the GPU check scripts write and print."""


def write_table(rows, path):
    """rows: (check, result, measured, limit) tuples; writes them to `path`
    as a markdown table and prints it."""
    table = ["| check | result | measured | limit |", "| --- | --- | --- | --- |"]
    table += [f"| {n} | {r} | {m} | {l} |" for n, r, m, l in rows]
    path.write_text("\n".join(table) + "\n")
    print("\n".join(table))
