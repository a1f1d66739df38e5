"""A run page that reads right around a regression (issue 59, item 8): `make demo-regression`'s
flagged run, a one-rung ladder whose newest week lies beyond the prediction bound of the weeks
before it. Its summary.md, report.html and Ladders page state no ladder-wide call rule over no
comparison, do not set the root against itself, and name the suspect in History instead of
"no change point" and "no new regression"; a ladder with comparisons and no suspect keeps them."""

from __future__ import annotations

import math
from typing import Any

import pytest
from markupsafe import escape

from testkit.regression_summary import FLAGGED_CPU_MS, GOOD_WEEKS_CPU_MS, flagged_week_summary
from testkit.results import index_entries, typed
from traceladder.core.summary_parts import LadderCalls, LadderHistory
from traceladder.stats.history import evaluate, run_points, suspect_sentence
from traceladder.stats.verdicts import calls_sentence
from traceladder.summary.build import build_summary, findings
from traceladder.summary.render.html import to_html
from traceladder.summary.render.markdown import to_markdown
from traceladder.ui.views import page_templates

# what the flagged run said before (issue 59, item 8)
NO_RULE = ("comparisons by", " - j + 1)", "such calls are expected", "CI, Holm", "CI, Benjamini")
NO_SELF = "the tokens/s/GPU of baseline"
NOT_QUIET = ("No change point in any rung's", "No new step-time regression")


def _page(summary: dict[str, Any]) -> str:
    """The Ladders run page's summary part, rendered by the page's own templates."""
    return str(page_templates().get_template("_macros.html").module.summary_body(summary, "", {}))


def _between(text: str, start: str, end: str) -> str:
    return text[text.index(start) : text.index(end, text.index(start))]


@pytest.mark.parametrize("correction", ["holm", "benjamini_hochberg", "per_rung"])
def test_the_flagged_one_rung_run_states_no_rule_no_self_comparison_and_names_its_suspect(correction: str) -> None:
    summary = flagged_week_summary(correction)
    assert summary["calls"]["comparisons"] == 0 and not summary["calls"]["sentence"]
    history = LadderHistory.from_dict(summary["history"])
    (found,) = history.suspects
    assert (found.rung, found.direction, found.reason) == ("baseline", "slower", "prediction bound")
    assert found.good_run_id == "week3" and found.run_id == summary["run_id"] == "week4"
    # the size against the good weeks' geometric mean, by hand
    mean = math.exp(sum(math.log(x) for x in GOOD_WEEKS_CPU_MS) / len(GOOD_WEEKS_CPU_MS))
    assert found.delta_pct == pytest.approx(100 * (FLAGGED_CPU_MS / mean - 1), rel=1e-6)
    sentence = suspect_sentence(history, found)
    for part in (
        "No change point called yet in baseline's step CPU time",
        f"this run ({FLAGGED_CPU_MS:.1f} CPU ms)",
        "beyond the 99% prediction bound of the 4 runs before it",
        f"slower, {found.delta_pct:+.1f}% against their mean",
        "last good run week3",
        "sent to the triage",
    ):
        assert part in sentence, part

    md, html, page = to_markdown(summary), to_html(summary, {}), _page(summary)
    for text in (md, html, page, "\n".join(summary["findings"])):
        assert not any(words in text for words in NO_RULE), text
        assert NO_SELF not in text
        assert not any(words in text for words in NOT_QUIET)
    # History names the suspect, in the same words in each
    assert sentence in _between(md, "## History", "## Findings")
    assert str(escape(sentence)) in _between(html, "<h2>History", "<h2>Findings")
    assert str(escape(sentence)) in _between(page, "<h3>History", "<h3>Findings")
    assert sentence in summary["findings"]


def test_a_stored_rule_over_no_comparison_is_not_shown() -> None:
    """A one-rung summary published before the check stored the rule "over the ladder's 0
    comparisons"; its pages do not state it."""
    summary = flagged_week_summary()
    summary["calls"]["sentence"] = "calls are controlled over the ladder's 0 comparisons by Holm (5%/(0 - j + 1))"
    assert LadderCalls.from_dict(summary["calls"]).stated_rule == ""
    for text in (to_markdown(summary), to_html(summary, {}), _page(summary)):
        assert "0 comparisons" not in text
    assert calls_sentence("holm", 0.05, 0, 0, 0.05, 1.96, 0.05, 1.96) == ""
    assert calls_sentence("holm", 0.05, 3, 1, 0.05 / 3, 2.39, 0.05 / 3, 2.39).startswith(
        "calls are controlled over the ladder's 3 comparisons by Holm"
    )


def test_a_ladder_with_comparisons_and_a_quiet_history_keeps_its_rule_speedup_and_no_change_point() -> None:
    from tests.unit.summary.test_build import make_run

    weeks, summary = [], {}
    for i, scale in enumerate((1.0, 1.01, 0.99)):
        plan, results = make_run(f"w{i}", scale=scale)
        plan["correction"] = "holm"
        summary = build_summary(plan, typed(results), {})
        weeks.append(
            {"run_id": f"w{i}", "logical_date": f"2026-11-{i + 1:02d}", "points": run_points(summary).to_dict()}
        )
    summary["history"] = evaluate(index_entries(weeks)).to_dict()
    summary["findings"] = findings(summary)
    assert summary["history"]["suspects"] == [] and summary["calls"]["comparisons"] == 3
    rule = summary["calls"]["sentence"]
    assert rule.startswith("calls are controlled over the ladder's 3 comparisons by Holm")
    md, html, page = to_markdown(summary), to_html(summary, {}), _page(summary)
    assert rule[1:] in md and str(escape(rule[1:])) in html and str(escape(rule[1:])) in page
    assert f"{rule[:1].upper()}{rule[1:]}." in summary["findings"]
    quiet = "No change point in any rung's step time."
    assert quiet in _between(md, "## History", "## Findings")
    assert str(escape(quiet)) in _between(html, "<h2>History", "<h2>Findings")
    assert str(escape(quiet)) in _between(page, "<h3>History", "<h3>Findings")
    # the last optimisation rung against the root, and the history's word that nothing was called
    speedup = [f for f in summary["findings"] if " runs at " in f and f.endswith("x the tokens/s/GPU of baseline.")]
    assert len(speedup) == 1 and not speedup[0].startswith("baseline ")
    assert "No new step-time regression in the ladder's history (3 full runs)." in summary["findings"]
