"""Draws a benchmark's Markdown table as a bar chart (PNG): one group of bars per row, one bar per chosen column.

The benchmarks print Markdown tables and docs/benchmarks/*.md keep them, so this reads the tables from a Markdown
file (or from a benchmark's output on stdin, FILE -) and needs no other format. A cell's value is the first number
in it: "2.28 *" is 2.28, "72%" 72, "0.9x" 0.9, "3.27M" 3.27e6, "1,041.2" 1041.2; a cell with no number ("-", "starved")
draws no bar. A column given as NAME#2 takes the cell's second number ("0.70 / 1.60" -> 1.60).

    tools/bench/plot_tables.py docs/benchmarks/learners.md --after "On a nearly quiet machine" \\
        --columns "2 / 1" "memcpy 2 / 1" --reference 1.7 "the issue's 1.7x" --out docs/img/bench_learners.png
    build/tools/shmreplay_bench --only push | tools/bench/plot_tables.py - --table 0 --labels 0,1,2 \\
        --columns ours/memcpy --out push.png

--table N picks the file's N-th table (from 0); --after TEXT the first table after a line that contains TEXT (a
heading); --labels the columns (from 0, comma separated) whose cells, joined, name a row (the first column by
default; a row with no number in any chosen column is left out); --reference VALUE LABEL draws a dashed line
(repeatable). The figure is drawn with matplotlib's Agg backend (no display) at --size WIDTHxHEIGHT pixels; --log
for a log scale. --list prints the file's tables (index, the line before, the header) and exits.

--x COLUMN draws lines instead of bars: one line per --columns against the cell's number in COLUMN (the stored steps,
the writers), --logx for a log x axis, --log for a log y axis, --ylabel; a reference is then a horizontal line.
--where COLUMN=TEXT (repeatable) keeps only the rows whose cell in COLUMN is TEXT (one sequence length of a table
that holds several):

    build/tools/shmreplay_bench_scaling --sweep size | tools/bench/plot_tables.py - --after "### Size: small" \
        --x "stored steps" --logx --columns "transitions ours/gather" "seq 64 ours/gather" --out size.png"""
import argparse
import math
import re
import sys

NUMBER = re.compile(r"[-+]?(?:\d[\d,]*(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?(?:\s?([kKMG])(?![A-Za-z]))?")
SCALE = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9}


def parse_tables(text):
    """Every Markdown table in `text`: a list of dicts {"before": the last non-table line before it, "header": [...],
    "rows": [[...], ...]} (the |---| line dropped, cells stripped)."""
    tables, current, before = [], None, ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("|") and stripped.endswith("|") and len(stripped) > 1:
            cells = [c.strip() for c in stripped[1:-1].split("|")]
            if current is None:
                current = {"before": before, "header": cells, "rows": []}
                tables.append(current)
            elif not all(re.fullmatch(r":?-+:?", c) for c in cells):
                current["rows"].append(cells)
        else:
            current = None
            if stripped:
                before = stripped
    return tables


def number(cell, which=1):
    """The `which`-th number in a cell (1: the first), with a k/M/G suffix applied, or nan when there is none."""
    found = [m for m in NUMBER.finditer(cell) if any(ch.isdigit() for ch in m.group(0))]
    if len(found) < which:
        return math.nan
    m = found[which - 1]
    suffix = m.group(1) or ""
    digits = m.group(0)[:len(m.group(0)) - len(suffix)].strip().replace(",", "")
    return float(digits) * SCALE[suffix]


def pick_table(tables, text, index=None, after=None):
    if after is not None:
        lines = text.splitlines()
        start = next((i for i, line in enumerate(lines) if after in line), None)
        if start is None:
            raise SystemExit(f"plot_tables: no line contains {after!r}")
        found = parse_tables("\n".join(lines[start:]))
        if not found:
            raise SystemExit(f"plot_tables: no table after the line that contains {after!r}")
        return found[0]
    index = 0 if index is None else index
    if not 0 <= index < len(tables):
        raise SystemExit(f"plot_tables: --table {index}: the input has {len(tables)} tables (0 to {len(tables) - 1})")
    return tables[index]


def column(header, spec):
    """(index, which number) of a column given by its header text, NAME#K, or its index."""
    name, _, which = spec.partition("#")
    which = int(which) if which else 1
    if name in header:
        return header.index(name), which
    if name.isdigit() and int(name) < len(header):
        return int(name), which
    raise SystemExit(f"plot_tables: no column {name!r}; the columns are: " + ", ".join(repr(h) for h in header))


def plot(table, columns, out, labels=(0,), title="", xlabel="", references=(), log=False, size=(900, 500)):
    """Horizontal grouped bars: rows top to bottom in the table's order, one colour per column."""
    cols = [column(table["header"], c) for c in columns]
    rows = [row for row in table["rows"] if any(i < len(row) and not math.isnan(number(row[i], k)) for i, k in cols)]
    if not rows:
        raise SystemExit("plot_tables: no number in the chosen columns")
    names = [" ".join(row[i] for i in labels if i < len(row)) for row in rows]   # rows with no number are left out
    values = [[number(row[i], k) if i < len(row) else math.nan for row in rows] for i, k in cols]
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    dpi = 100
    fig, ax = plt.subplots(figsize=(size[0] / dpi, size[1] / dpi), dpi=dpi)
    n, width = len(cols), 0.8 / len(cols)
    for k, (spec, series) in enumerate(zip(columns, values)):
        ys = [r + (k - (n - 1) / 2) * width for r in range(len(names))]
        bars = ax.barh(ys, [0 if math.isnan(v) else v for v in series], height=width, label=spec)
        for bar, v in zip(bars, series):
            if not math.isnan(v):
                ax.annotate(f"{v:g}", (bar.get_width(), bar.get_y() + bar.get_height() / 2), xytext=(3, 0),
                            textcoords="offset points", va="center", fontsize=7)
    for value, label in references:
        ax.axvline(value, color="gray", ls="--", lw=1)
        ax.annotate(label, (value, 1.0), xycoords=("data", "axes fraction"), xytext=(2, -3), rotation=90,
                    textcoords="offset points", fontsize=7, color="dimgray", va="top")
    ax.set_yticks(range(len(names)), names, fontsize=8)
    ax.invert_yaxis()
    if log:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    ax.margins(x=0.12)
    if n > 1:
        ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(out, dpi=dpi)
    plt.close(fig)
    shrink_png(out)


def keep_rows(table, where):
    """`table` with only the rows whose cell in each column of `where` ([(spec, text)]) is that text."""
    rows = table["rows"]
    for spec, text in where:
        i, _ = column(table["header"], spec)
        rows = [row for row in rows if i < len(row) and row[i] == text]
    return {**table, "rows": rows}


def plot_lines(table, x, columns, out, title="", xlabel="", ylabel="", references=(), logx=False, logy=False,
               size=(900, 500)):
    """One line per column against column `x`: rows with no number in `x` are left out, and so is each point
    without a number in its column."""
    xi, xk = column(table["header"], x)
    cols = [column(table["header"], c) for c in columns]
    rows = [row for row in table["rows"] if xi < len(row) and not math.isnan(number(row[xi], xk))]
    xs = [number(row[xi], xk) for row in rows]
    series = [[number(row[i], k) if i < len(row) else math.nan for row in rows] for i, k in cols]
    if not any(not math.isnan(v) for s in series for v in s):
        raise SystemExit("plot_tables: no number in the chosen columns")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    dpi = 100
    fig, ax = plt.subplots(figsize=(size[0] / dpi, size[1] / dpi), dpi=dpi)
    for spec, ys in zip(columns, series):
        points = [(a, b) for a, b in zip(xs, ys) if not math.isnan(b)]
        if points:
            ax.plot([a for a, _ in points], [b for _, b in points], marker="o", ms=4, label=spec)
    for value, label in references:
        ax.axhline(value, color="gray", ls="--", lw=1)
        ax.annotate(label, (0.0, value), xycoords=("axes fraction", "data"), xytext=(3, 2),
                    textcoords="offset points", fontsize=7, color="dimgray")
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel or table["header"][xi])
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3, which="both" if logx or logy else "major")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=dpi)
    plt.close(fig)
    shrink_png(out)


def shrink_png(path, colors=128):
    """Rewrites a PNG with a palette of `colors` (Pillow, which matplotlib requires): about a third of the bytes."""
    from PIL import Image
    with Image.open(path) as image:
        small = image.convert("RGB").quantize(colors=colors)
    small.save(path, optimize=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("file", help="a Markdown file, or - for stdin (a benchmark's output)")
    p.add_argument("--table", type=int, help="the file's N-th table, from 0")
    p.add_argument("--after", help="the first table after a line that contains this text")
    p.add_argument("--columns", nargs="+", help="header texts (or indices), NAME#K for a cell's K-th number")
    p.add_argument("--labels", default="0", help="columns whose cells name a row, comma separated (default 0)")
    p.add_argument("--out", help="the PNG to write")
    p.add_argument("--title", default="")
    p.add_argument("--xlabel", default="")
    p.add_argument("--reference", nargs=2, action="append", default=[], metavar=("VALUE", "LABEL"))
    p.add_argument("--log", action="store_true", help="a log scale")
    p.add_argument("--size", default="900x500", help="WIDTHxHEIGHT in pixels")
    p.add_argument("--list", action="store_true", help="print the tables found and exit")
    p.add_argument("--x", help="draw lines against this column instead of bars")
    p.add_argument("--logx", action="store_true", help="a log x axis (with --x)")
    p.add_argument("--ylabel", default="")
    p.add_argument("--where", action="append", default=[], metavar="COLUMN=TEXT",
                   help="keep only the rows whose cell in COLUMN is TEXT (repeatable)")
    a = p.parse_args(argv)
    text = sys.stdin.read() if a.file == "-" else open(a.file, encoding="utf-8").read()
    tables = parse_tables(text)
    if a.list:
        for i, t in enumerate(tables):
            print(f"{i}: after {t['before'][:60]!r}: {len(t['rows'])} rows; columns {t['header']}")
        return 0
    if not a.columns or not a.out:
        p.error("--columns and --out are needed (or --list)")
    w, _, h = a.size.partition("x")
    where = []
    for item in a.where:
        spec, eq, value = item.partition("=")
        if not eq:
            p.error(f"--where {item!r}: COLUMN=TEXT")
        where.append((spec.strip(), value.strip()))
    table = keep_rows(pick_table(tables, text, a.table, a.after), where)
    if a.x:
        plot_lines(table, a.x, a.columns, a.out, title=a.title, xlabel=a.xlabel, ylabel=a.ylabel,
                   references=[(float(v), label) for v, label in a.reference], logx=a.logx, logy=a.log,
                   size=(int(w), int(h)))
        return 0
    plot(table, a.columns, a.out,
         labels=[int(i) for i in a.labels.split(",")], title=a.title, xlabel=a.xlabel,
         references=[(float(v), label) for v, label in a.reference], log=a.log, size=(int(w), int(h)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
