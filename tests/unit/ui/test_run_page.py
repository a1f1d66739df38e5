"""The Ladders run page (run.html) of `make demo-regression`'s flagged week (issue 59, item 8),
rendered whole by the page's own templates: no ladder-wide rule over no comparison, no root set
against itself, and History names the suspect as summary.md and report.html do."""

from __future__ import annotations

from pathlib import Path

from markupsafe import escape

from testkit.regression_summary import flagged_week_summary
from traceladder.core.summary_parts import LadderHistory
from traceladder.stats.history import suspect_sentence
from traceladder.summary.render.history import history_notes
from traceladder.summary.render.markdown import to_markdown
from traceladder.ui.data import LadderEntry
from traceladder.ui.views import RunView, TriageRow, page_templates


def test_the_flagged_weeks_run_page_names_its_suspect_in_history() -> None:
    summary = flagged_week_summary()
    entry = LadderEntry(file="proxy-regression", path=Path("proxy-regression.yaml"), name="proxy-regression")
    run = RunView(run_id=str(summary["run_id"]), summary=summary, triages=[TriageRow("baseline")])
    page = page_templates().get_template("run.html").render(base="/traceladder", user="u", entry=entry, run=run)

    history = LadderHistory.from_dict(summary["history"])
    (found,) = history.suspects
    sentence = suspect_sentence(history, found)
    assert history_notes(history) == history_notes(summary["history"]) == [sentence]
    section = page[page.index("<h3>History") : page.index("<h3>Findings")]
    assert f'<p class="history-suspect">{escape(sentence)}</p>' in section
    for words in ("baseline", "slower", f"{found.delta_pct:+.1f}%", "prediction bound", found.good_run_id):
        assert words in section, words
    # the three sentences that did not fit
    for words in (
        "comparisons by",
        "CI, Holm",
        "the tokens/s/GPU of baseline",
        "No change point in any",
        "No new step",
    ):
        assert words not in page, words
    assert "<th>vs parent on CPU time (95% CI)</th>" in page
    # the same sentence in summary.md's History, and the triage row above it
    md = to_markdown(summary)
    assert sentence in md[md.index("## History") : md.index("## Findings")]
    assert "<td>baseline</td><td>not started</td>" in page


def test_the_run_pages_history_links_each_suspects_alert() -> None:
    """History names the suspect's alert too, where its triage filed one (issue 59, item 8)."""
    from traceladder.ui.views import AlertLink

    summary = flagged_week_summary()
    entry = LadderEntry(file="proxy-regression", path=Path("proxy-regression.yaml"), name="proxy-regression")
    link = AlertLink(id="a-123", status="investigating", href="/traceladder/alerts/a-123")
    run = RunView(run_id=str(summary["run_id"]), summary=summary, triages=[TriageRow("baseline", alerts=(link,))])
    page = page_templates().get_template("run.html").render(base="/traceladder", user="u", entry=entry, run=run)
    section = page[page.index("<h3>History") : page.index("<h3>Findings")]
    assert (
        '<p class="history-alert">Suspect baseline: <a href="/traceladder/alerts/a-123">alert a-123</a> '
        "(investigating).</p>" in section
    )
