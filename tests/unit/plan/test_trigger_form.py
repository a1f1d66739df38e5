"""The trigger form is defined once (plan/trigger_form.py, issue 29): the Ladders page's form shows
its bounds and pattern, and Airflow's Params built from it accept and refuse what the page does."""

from __future__ import annotations

import re

import pytest

from traceladder.plan.trigger_form import REPEATS_MAX, REPEATS_MIN, SWITCH_VALUE, trigger_fields


class _Entry:
    name = file = "proxy-local"
    rungs = ["baseline", "fusions"]
    lenses = ["none"]
    repeats = "3"


def test_the_page_form_has_the_params_bounds_and_pattern() -> None:
    from traceladder.ui.views import page_templates

    html = str(page_templates().get_template("_macros.html").module.trigger_form(_Entry, "/traceladder", "token"))
    repeats = re.search(r'<input id="repeats-proxy-local"[^>]*>', html)
    override = re.search(r'<input id="override-proxy-local"[^>]*>', html)
    assert repeats and override, html
    assert f'min="{REPEATS_MIN}"' in repeats.group() and f'max="{REPEATS_MAX}"' in repeats.group()
    assert f'pattern="{SWITCH_VALUE}"' in override.group()


@pytest.mark.parametrize(
    ("field", "value", "ok"),
    [
        ("repeats", None, True),
        ("repeats", REPEATS_MAX, True),
        ("repeats", REPEATS_MAX + 1, False),
        ("repeats", REPEATS_MIN - 1, False),
        ("override", "", True),
        ("override", "global_batch=16", True),
        ("override", "global_batch", False),
        ("ladder", "proxy-local", True),
        ("ladder", "nope", False),
    ],
)
def test_airflow_params_from_the_one_definition(field: str, value: object, ok: bool) -> None:
    from airflow.sdk import Param
    from airflow.sdk.exceptions import ParamValidationError

    schema = trigger_fields(["proxy-local", "proxy-aa"], ["none", "pytorch"])[field]
    param = Param(schema.pop("default"), **schema)
    if ok:
        assert param.resolve(value) == value
    else:
        with pytest.raises(ParamValidationError):
            param.resolve(value)
    if field == "override":  # the page's HTML pattern is the same expression, anchored by the browser
        assert bool(re.fullmatch(SWITCH_VALUE, str(value))) == (ok and value != "")
