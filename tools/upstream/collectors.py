"""The other rows: ``rocprofv3_flag``, ``rtl_flag`` and ``rtl_mode`` (per rocm-trace-lite release),
``madengine_field`` and ``madengine_tool``, and ``log_segment`` (the iteration line's segments)."""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass

from .mirror import PROBLEMS, Mirror, Row, one_line, row
from .pins import (
    MADENGINE,
    MADENGINE_FIELDS,
    MADENGINE_RTL_PRE,
    MADENGINE_TOOLS,
    MADENGINE_TOOLS_USED,
    PRIMUS,
    PRIMUS_TAGS,
    ROCPROFILER,
    ROCPROFV3,
    ROCPROFV3_EFFECTIVE_DEFAULTS,
    ROCPROFV3_FLAGS,
    RTL,
    RTL_CLI,
    RTL_CMD_TRACE,
    RTL_FLAGS,
    RTL_MODE_NOTES,
    RTL_TAGS,
    segments,
)
from .primus import call_name, py_default


# ---------------------------------------------------------------------------------------------
# rocprofv3 flags
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CliArg:
    options: tuple[str, ...]
    help: str
    default: str
    choices: tuple[str, ...]
    parser: str  # the variable the argument is added to (a subparser for rtl)
    action: str


def _cli_args(text: str) -> list[CliArg]:
    tree = ast.parse(text)
    out: list[CliArg] = []
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
        name = call_name(call)
        args = list(call.args)
        if name == "add_parser_bool_argument" and args:  # rocprofv3's helper: (group, *options)
            target, args = args[0], args[1:]
            parser = target.id if isinstance(target, ast.Name) else ""
        elif name.endswith(".add_argument"):
            parser = name.rsplit(".", 1)[0]
        else:
            continue
        options = tuple(a.value for a in args if isinstance(a, ast.Constant) and isinstance(a.value, str))
        if not options:
            continue
        kwargs = {k.arg: k.value for k in call.keywords if k.arg}
        help_node = kwargs.get("help")
        help_text = help_node.value if isinstance(help_node, ast.Constant) and isinstance(help_node.value, str) else ""
        choices_node = kwargs.get("choices")
        choices: tuple[str, ...] = ()
        if isinstance(choices_node, (ast.List, ast.Tuple)):
            choices = tuple(str(e.value) for e in choices_node.elts if isinstance(e, ast.Constant))
        default = py_default(kwargs.get("default"), text)
        action_node = kwargs.get("action")
        action = str(action_node.value) if isinstance(action_node, ast.Constant) else ""
        out.append(CliArg(options, help_text.replace("%%", "%"), default, choices, parser, action))
    return out


def rocprofv3_flags(rocprof: Mirror) -> list[Row]:
    text = rocprof.read(ROCPROFV3)
    if text is None:
        return []
    args = _cli_args(text)
    rows: list[Row] = []
    for flag in ROCPROFV3_FLAGS:
        if flag == "--":
            if 'if itr == "--":' in text:
                detail = "separates rocprofv3's options from the application command (main splits argv at it)"
                rows.append(row("rocprofv3_flag", flag, ROCPROFILER, ROCPROFV3, ROCPROFILER.commit, "", detail))
            else:
                PROBLEMS.left_out.append(f"rocprofv3_flag --: the split at '--' not found in {ROCPROFV3}")
            continue
        arg = next((a for a in args if flag in a.options), None)
        if arg is None:
            PROBLEMS.left_out.append(f"rocprofv3_flag {flag}: not in {ROCPROFV3}")
            continue
        aliases = [o for o in arg.options if o != flag]
        detail = (f"aliases {', '.join(aliases)}; " if aliases else "") + arg.help
        if arg.choices:
            detail += "; choices " + ",".join(arg.choices)
        default = arg.default
        effective = ROCPROFV3_EFFECTIVE_DEFAULTS.get(flag)
        if effective is not None and effective[0] in text:
            detail += f"; argparse default {default or 'None'}, main() then sets {effective[1]}"
            default = effective[1]
        rows.append(row("rocprofv3_flag", flag, ROCPROFILER, ROCPROFV3, ROCPROFILER.commit, default, detail))
    return rows


# ---------------------------------------------------------------------------------------------
# rocm-trace-lite (rtl) flags and modes, per release
# ---------------------------------------------------------------------------------------------
def _rtl_versions() -> list[tuple[str, str]]:
    return [*RTL_TAGS.items(), (f"{RTL.label}@{RTL.commit[:8]}", RTL.commit)]


def rtl_rows(rtl: Mirror) -> list[Row]:
    flag_tags: dict[str, list[str]] = {f: [] for f in RTL_FLAGS}
    flag_arg: dict[str, CliArg] = {}
    mode_tags: dict[str, list[str]] = {}
    mode_help: dict[str, list[tuple[str, str]]] = {}
    for label, commit in _rtl_versions():
        text = rtl.read(RTL_CLI, commit)
        if text is None:
            continue
        args = _cli_args(text)
        subparsers = dict(re.findall(r"(\w+)\s*=\s*\w+\.add_parser\(\s*[\"'](\w+)[\"']", text))
        trace_var = next((var for var, sub in subparsers.items() if sub == "trace"), None)
        for flag in RTL_FLAGS:
            if flag == "trace":
                present, arg = trace_var is not None, None
            elif flag == "--":
                cmd_text = rtl.read(RTL_CMD_TRACE, commit) or ""
                present, arg = 'cmd = [c for c in args.cmd if c != "--"]' in cmd_text, None
            else:
                arg = next(
                    (a for a in args if flag in a.options and (flag == "--version" or a.parser == trace_var)), None
                )
                present = arg is not None
            if present:
                flag_tags[flag].append(label)
            if arg is not None:
                flag_arg[flag] = arg  # the newest release's definition
        mode_arg = next((a for a in args if "--mode" in a.options and a.parser == trace_var), None)
        if mode_arg is not None:
            for choice in mode_arg.choices:
                mode_tags.setdefault(choice, []).append(label)
                said = re.search(rf"(?<![\w'])({re.escape(choice)}) \(([^)]*)\)", mode_arg.help)
                alias = re.search(rf"'{re.escape(choice)}' is accepted as alias for '(\w+)'", mode_arg.help)
                if alias:
                    mode_help.setdefault(choice, []).append((label, f"an alias for '{alias.group(1)}'"))
                elif said:
                    mode_help.setdefault(choice, []).append((label, said.group(2)))
    rows: list[Row] = []
    for flag in RTL_FLAGS:
        tags = flag_tags[flag]
        if not tags:
            PROBLEMS.left_out.append(f"rtl_flag {flag}: in no release read")
            continue
        arg = flag_arg.get(flag)
        if flag == "trace":
            what = "subcommand: trace a workload"
            path, default = RTL_CLI, ""
        elif flag == "--":
            what = "every '--' token is dropped from the traced command (cmd_trace.run_trace)"
            path, default = RTL_CMD_TRACE, ""
        else:
            assert arg is not None
            aliases = [o for o in arg.options if o != flag]
            what = (f"aliases {', '.join(aliases)}; " if aliases else "") + (
                arg.help or f"argparse action={arg.action}"
            )
            path, default = RTL_CLI, arg.default
        detail = f"accepted by {' '.join(tags)}; {what}"
        rows.append(row("rtl_flag", flag, RTL, path, RTL.commit, default, detail))
    for mode, tags in sorted(mode_tags.items()):
        missing = [label for label, _ in _rtl_versions() if label not in tags]
        detail = f"accepted by {' '.join(tags)}"
        if missing:
            detail += f"; refused by {' '.join(missing)}"
        described: list[tuple[str, list[str]]] = []  # consecutive releases with one description
        for label, text in mode_help.get(mode, []):
            if described and described[-1][0] == text:
                described[-1][1].append(label)
            else:
                described.append((text, [label]))
        for text, labels in described:
            span = labels[0] if len(labels) == 1 else f"{labels[0]}..{labels[-1]}"
            detail += f"; {span}: {text}" if len(described) > 1 else f"; {text}"
        if mode in RTL_MODE_NOTES:
            detail += f"; {RTL_MODE_NOTES[mode]}"
        rows.append(row("rtl_mode", mode, RTL, RTL_CLI, RTL.commit, "", detail))
    return rows


# ---------------------------------------------------------------------------------------------
# madengine: --additional-context fields and tools
# ---------------------------------------------------------------------------------------------
def madengine_rows(madengine: Mirror) -> list[Row]:
    rows: list[Row] = []
    for field_name, (path, needle, what, default) in MADENGINE_FIELDS.items():
        text = madengine.read(path)
        if text is None:
            continue
        if needle not in text:
            PROBLEMS.left_out.append(f"madengine_field {field_name}: {needle!r} not in {path}")
            continue
        detail = f"{what}; read at: {needle}"
        rows.append(row("madengine_field", field_name, MADENGINE, path, MADENGINE.commit, default, detail))
    text = madengine.read(MADENGINE_TOOLS)
    tools = json.loads(text).get("tools", {}) if text is not None else {}
    pre = madengine.read(MADENGINE_RTL_PRE) or ""
    rtl_pin = re.search(r"rocm-trace-lite/releases/download/(v[\w.]+)/", pre)
    for name in MADENGINE_TOOLS_USED:
        tool = tools.get(name)
        if tool is None:
            if text is not None:
                PROBLEMS.left_out.append(f"madengine_tool {name}: not in {MADENGINE_TOOLS}")
            continue
        parts = []
        if tool.get("env_vars"):
            parts.append("env_vars " + ",".join(f"{k}={v}" for k, v in sorted(tool["env_vars"].items())))
        for kind in ("pre_scripts", "post_scripts"):
            scripts = tool.get(kind) or []
            if scripts:
                parts.append(f"{kind} " + ",".join(f"{s.get('path', '')} {s.get('args', '')}".strip() for s in scripts))
        if name.startswith("rocm_trace_lite") and rtl_pin:
            parts.append(f"the pre-script installs rocm-trace-lite {rtl_pin.group(1)} ({MADENGINE_RTL_PRE})")
        rows.append(
            row(
                "madengine_tool",
                name,
                MADENGINE,
                MADENGINE_TOOLS,
                MADENGINE.commit,
                tool.get("cmd", ""),
                "; ".join(parts),
            )
        )
    return rows


# ---------------------------------------------------------------------------------------------
# log_segment: the iteration line's segments and the statements that print them
# ---------------------------------------------------------------------------------------------
def _statement_text(source: str, needle: str, span: int) -> str | None:
    """The source of the smallest simple statement holding `needle` (and the span-1 after it)."""
    start = source.find(needle)
    if start < 0:
        return None
    line = source.count("\n", 0, start) + 1
    tree = ast.parse(source)
    best: ast.stmt | None = None
    simple = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.Return)
    for node in ast.walk(tree):
        end = getattr(node, "end_lineno", None)
        if isinstance(node, simple) and end is not None and node.lineno <= line <= end:
            if best is None or (end - node.lineno) < ((best.end_lineno or 0) - best.lineno):
                best = node
    if best is None:
        return None
    parts = [ast.get_source_segment(source, best) or ""]
    if span > 1:
        for body in (getattr(n, "body", None) for n in ast.walk(tree)):
            if isinstance(body, list) and best in body:
                i = body.index(best)
                parts += [ast.get_source_segment(source, s) or "" for s in body[i + 1 : i + span]]
                break
    return " ".join(one_line(p) for p in parts)


def log_segments(primus: Mirror, megatron: Mirror) -> list[Row]:
    rows: list[Row] = []
    tag_of = {commit: tag for tag, commit in PRIMUS_TAGS.items()}
    for seg in segments():
        mirror = primus if seg.pin is PRIMUS else megatron
        text = mirror.read(seg.path, seg.commit)
        if text is None:
            continue
        statement = _statement_text(text, seg.needle, seg.span)
        if statement is None:
            PROBLEMS.left_out.append(f"log_segment {seg.name}: {seg.needle!r} not in {seg.path}@{seg.commit[:8]}")
            continue
        detail = seg.note
        if seg.commit in tag_of:
            detail = f"tag {tag_of[seg.commit]}: " + detail
        rows.append(row("log_segment", seg.name, seg.pin, seg.path, seg.commit, statement, detail))
    return rows
