"""tools/bench/plot_tables.py draws a benchmark's Markdown table as a PNG: on a sample table (a file and stdin), the
table chosen by index and by the heading before it, a cell's numbers, and the errors that name what is wrong."""
import math
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "tools", "bench", "plot_tables.py")
sys.path.insert(0, os.path.dirname(SCRIPT))
import plot_tables  # noqa: E402

SAMPLE = """# A benchmark

Some words.

| step | writers | ours GB/s | memcpy GB/s | ours/memcpy | 1 / 2 |
|---|---:|---:|---:|---:|---:|
| small | 1 | 1.10 | 1.43 | 77% | 0.70 / 1.60 |
| atari | 2 | 8.98 ±5% | 8.52 | 105% | 3.02 / 6.88 |
| note | - | - | - | starved | - |

## Second run

| configuration | 2 / 1 | memcpy 2 / 1 |
|---|---:|---:|
| small, L 1 | 2.28 * | 2.23 |
| large, L 1 | 1,041.2 | 3.27M |
"""


def png_size(path):
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", data[:8]
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_a_cell_gives_its_numbers():
    n = plot_tables.number
    assert n("2.28 *") == 2.28 and n("77%") == 77 and n("0.9x") == 0.9 and n("1,041.2") == 1041.2
    assert n("3.27M ±8%") == 3.27e6 and n("33.1k") == 33100 and n("2 GB/s") == 2
    assert n("0.70 / 1.60", 2) == 1.60 and math.isnan(n("-")) and math.isnan(n("starved"))


def test_the_tables_of_a_file_are_found_with_their_rows():
    tables = plot_tables.parse_tables(SAMPLE)
    assert [len(t["rows"]) for t in tables] == [3, 2]
    assert tables[0]["header"][4] == "ours/memcpy" and tables[1]["before"] == "## Second run"
    assert plot_tables.pick_table(tables, SAMPLE, after="Second run") is not None
    assert plot_tables.pick_table(tables, SAMPLE, after="Second run")["header"][1] == "2 / 1"


def test_the_script_writes_a_png_of_the_size_asked(tmp_path):
    pytest.importorskip("matplotlib")
    md = tmp_path / "bench.md"
    md.write_text(SAMPLE)
    out = tmp_path / "a.png"
    r = subprocess.run([sys.executable, SCRIPT, str(md), "--table", "0", "--labels", "0,1", "--columns", "ours GB/s",
                        "memcpy GB/s", "1 / 2#2", "--reference", "1", "one", "--size", "640x360", "--out", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert png_size(out) == (640, 360)
    out = tmp_path / "b.png"                      # from stdin, as a benchmark's output is piped in
    r = subprocess.run([sys.executable, SCRIPT, "-", "--after", "Second run", "--columns", "2 / 1", "memcpy 2 / 1",
                        "--log", "--out", str(out)], input=SAMPLE, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert png_size(out) == (900, 500)            # the default size
    assert os.path.getsize(out) < 150_000


def test_a_wrong_column_or_table_says_what_there_is(tmp_path):
    md = tmp_path / "bench.md"
    md.write_text(SAMPLE)
    r = subprocess.run([sys.executable, SCRIPT, str(md), "--columns", "nope", "--out", str(tmp_path / "x.png")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "no column 'nope'; the columns are: 'step', 'writers'" in r.stderr, r.stderr
    r = subprocess.run([sys.executable, SCRIPT, str(md), "--table", "5", "--columns", "2 / 1", "--out",
                        str(tmp_path / "x.png")], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "--table 5: the input has 2 tables (0 to 1)" in r.stderr, r.stderr
    r = subprocess.run([sys.executable, SCRIPT, str(md), "--list"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.startswith("0: after 'Some words.': 3 rows"), r.stdout


LINES = """### Size: small steps

| stored steps | seq len | ours/gather | p99 µs |
|---:|---:|---:|---:|
| 1,024 | 1 | 25% | 30.1 |
| 1,024 | 64 | 85% | 250 |
| 1,000,000 | 1 | 49% | 61.0 |
| 1,000,000 | 64 | 95% | 410 |
| 100,000,000 | 1 | skipped | - |
"""


def test_lines_against_a_column_keep_the_rows_asked_for(tmp_path):
    table = plot_tables.parse_tables(LINES)[0]
    kept = plot_tables.keep_rows(table, [("seq len", "64")])
    assert [row[0] for row in kept["rows"]] == ["1,024", "1,000,000"]
    pytest.importorskip("matplotlib")
    out = tmp_path / "lines.png"
    r = subprocess.run([sys.executable, SCRIPT, "-", "--after", "### Size", "--x", "stored steps", "--logx", "--log",
                        "--where", "seq len=1", "--columns", "ours/gather", "p99 µs", "--reference", "100", "limit",
                        "--size", "640x360", "--out", str(out)], input=LINES, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert png_size(out) == (640, 360)
    r = subprocess.run([sys.executable, SCRIPT, "-", "--x", "stored steps", "--where", "seq len", "--columns",
                        "p99 µs", "--out", str(out)], input=LINES, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "COLUMN=TEXT" in r.stderr, r.stderr
