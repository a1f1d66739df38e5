"""The docs' generated figures blocks (testkit/docs_figures.py): each matches the figures file it
names, and the renderer takes a section file's table and a bench run's rows as they stand."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from testkit import docs_figures
from testkit.bench_table import Row, format_table, write_run_figures


def test_every_block_in_the_docs_matches_its_figures_file() -> None:
    found = [b for doc in docs_figures.docs() for b in docs_figures.blocks(doc)]
    assert len(found) >= 4, "the docs' generated figures blocks went missing"
    stale = [b.where() for b in found if docs_figures.render(b) != b.body]
    assert not stale, f"run `make docs-figures`: {stale}"


def _folder(tmp_path: Path) -> tuple[Path, Path]:
    figures = tmp_path / "docs" / "figures"
    figures.mkdir(parents=True)
    (figures / "2026-12-01-shape.md").write_text(
        "# shape\n\nintro\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\nbetween\n\n| c |\n|---|\n| 3 |\n", encoding="utf-8"
    )
    (figures / "2026-12-02-shape.md").write_text("| a | b |\n|---|---|\n| 5 | 6 |\n", encoding="utf-8")
    rows = [
        Row("noise", "run sd, before", 6.8, "%", "", None, "6.82%; 10 runs"),
        Row("noise", "run sd, after", 2.1, "%", "<= 2%", False, "2.10%; a | in a cell"),
        Row("noise", "ratio", 0.773, "x", "", None, "0.88"),
    ]
    started = datetime.datetime(2026, 12, 3, 17, 7, tzinfo=datetime.timezone.utc)
    write_run_figures(figures, ["--only", "noise"], ["noise"], format_table(rows), started, (1.0, 1.0, 1.0))
    return tmp_path / "docs", figures


def test_a_section_table_and_bench_rows_render_as_they_stand(tmp_path: Path) -> None:
    docs, figures = _folder(tmp_path)
    doc = docs / "page.md"
    doc.write_text(
        "text\n<!-- figures: 2026-12-01-shape.md table 2 -->\nold\n<!-- /figures -->\n"
        "more\n<!-- figures: 2026-12-03-bench-1707-noise.md rows ^run sd -->\n<!-- /figures -->\nend\n",
        encoding="utf-8",
    )
    text, changed = docs_figures.update(doc, figures)
    assert len(changed) == 2
    assert "\n| c |\n|---|\n| 3 |\n\nGenerated from [2026-12-01-shape.md](figures/2026-12-01-shape.md)" in text
    assert "| metric | value | target | ok | detail |" in text
    assert "| run sd, before | 7 % |  |  | 6.82%; 10 runs |" in text
    assert "| run sd, after | 2 % | <= 2% | NO | 2.10%; a \\| in a cell |" in text
    assert "ratio" not in text and "old" not in text
    doc.write_text(text, encoding="utf-8")
    assert docs_figures.update(doc, figures) == (text, [])  # rendered once, it stays


def test_newest_points_a_block_at_the_latest_file_of_its_kind(tmp_path: Path) -> None:
    docs, figures = _folder(tmp_path)
    doc = docs / "page.md"
    doc.write_text("<!-- figures: 2026-12-01-shape.md table 1 -->\n<!-- /figures -->\n", encoding="utf-8")
    text, changed = docs_figures.update(doc, figures, to_newest=True)
    assert "<!-- figures: 2026-12-02-shape.md table 1 -->" in text and "| 5 | 6 |" in text
    assert changed and "2026-12-02-shape.md" in changed[0]
    # a bench run's file is newest among bench runs of the same sections only
    assert (
        docs_figures.newest("2026-12-01-bench-0100-noise.md rows x", figures) == "2026-12-03-bench-1707-noise.md rows x"
    )


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("2026-11-30-gone.md table 1", "no figures file"),
        ("2026-12-01-shape.md table 3", "has 2 table(s)"),
        ("2026-12-03-bench-1707-noise.md rows ^nothing", "no row of 2026-12-03-bench-1707-noise.md"),
        ("2026-12-01-shape.md", "expected '<file>.md table N'"),
    ],
)
def test_a_block_that_cannot_render_is_one_line_naming_the_doc_and_marker(tmp_path: Path, spec: str, says: str) -> None:
    docs, figures = _folder(tmp_path)
    doc = docs / "page.md"
    doc.write_text(f"<!-- figures: {spec} -->\n<!-- /figures -->\n", encoding="utf-8")
    with pytest.raises(docs_figures.FiguresError) as err:
        docs_figures.update(doc, figures)
    line = str(err.value)
    assert "\n" not in line and "page.md" in line and spec in line and says in line
