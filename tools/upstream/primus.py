"""The Primus rows: ``primus_key`` (the experiment's YAML chain, its overrides and Megatron-LM's
argparse dests) and ``primus_env`` (who reads each environment variable the ladders set)."""

from __future__ import annotations

import ast
import posixpath
import re
from dataclasses import dataclass
from typing import Iterator

import yaml

from .mirror import PROBLEMS, Mirror, Row, clip, row
from .pins import (
    ENV_CANDIDATES,
    ENV_SELECTS,
    EXPERIMENT,
    LADDERS_DIR,
    MEGATRON,
    MEGATRON_ARGUMENTS,
    NOT_TRAIN_PREFIXES,
    PRIMUS,
    PRIMUS_RULES,
    WRITEUP,
)


# ---------------------------------------------------------------------------------------------
# primus_key: the experiment's module and model config chains, its overrides, Megatron's argparse
# ---------------------------------------------------------------------------------------------
_NULL_TAG = "tag:yaml.org,2002:null"
_PLACEHOLDER = re.compile(r"\$\{([^:{}]+)(?::([^}]*))?\}")


def _node_text(node: yaml.Node) -> str:
    """A YAML value as text: scalars as written (unquoted), sequences and mappings compact."""
    if isinstance(node, yaml.ScalarNode):
        if node.tag == _NULL_TAG:
            return "null"
        return str(node.value)
    if isinstance(node, yaml.SequenceNode):
        return "[" + ",".join(_node_text(child) for child in node.value) + "]"
    if isinstance(node, yaml.MappingNode):
        return "{" + ",".join(f"{_node_text(k)}:{_node_text(v)}" for k, v in node.value) + "}"
    return ""


def _leaves(node: yaml.MappingNode, prefix: str = "") -> Iterator[tuple[str, yaml.Node]]:
    for key_node, value in node.value:
        key = prefix + str(key_node.value)
        if isinstance(value, yaml.MappingNode) and value.value:
            yield from _leaves(value, key + ".")
        else:
            yield key, value


def _compose(text: str) -> yaml.MappingNode | None:
    node = yaml.compose(text, Loader=yaml.SafeLoader)
    return node if isinstance(node, yaml.MappingNode) else None


def _get(node: yaml.MappingNode, key: str) -> yaml.Node | None:
    for key_node, value in node.value:
        if key_node.value == key and isinstance(value, yaml.Node):
            return value
    return None


@dataclass(frozen=True)
class Defn:
    config: str  # module | model | experiment
    path: str
    text: str


def _chain(mirror: Mirror, path: str, config: str, seen: tuple[str, ...] = ()) -> dict[str, list[Defn]]:
    """Every leaf key of a Primus YAML file and the files it `extends:`, each key's definitions in
    rising precedence (primus/core/config/yaml_loader.py: presets in order, then the file itself)."""
    if path in seen:
        PROBLEMS.fatal.append(f"extends cycle at {path}")
        return {}
    text = mirror.read(path)
    if text is None:
        return {}
    root = _compose(text)
    if root is None:
        PROBLEMS.left_out.append(f"{mirror.pin.repo}:{path}: not a YAML mapping")
        return {}
    out: dict[str, list[Defn]] = {}
    extends = _get(root, "extends")
    parents: list[str] = []
    if isinstance(extends, yaml.ScalarNode) and extends.tag != _NULL_TAG:
        parents = [str(extends.value)]
    elif isinstance(extends, yaml.SequenceNode):
        parents = [str(n.value) for n in extends.value]
    for parent in parents:
        parent_path = posixpath.normpath(posixpath.join(posixpath.dirname(path), parent))
        for key, defs in _chain(mirror, parent_path, config, (*seen, path)).items():
            out.setdefault(key, []).extend(defs)
    for key, value in _leaves(root):
        if key == "extends":
            continue
        out.setdefault(key, []).append(Defn(config, path, _node_text(value)))
    return out


def _placeholder_default(text: str) -> str:
    return _PLACEHOLDER.sub(lambda m: m.group(2) if m.group(2) is not None else m.group(0), text)


@dataclass(frozen=True)
class ArgDef:
    dest: str
    path: str
    default: str
    how: str


def py_default(node: ast.expr | None, source: str) -> str:
    """An argparse/dataclass default as text: literals as YAML would write them, None as empty."""
    if node is None:
        return ""
    try:
        value = ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return ast.get_source_segment(source, node) or ""
    return _literal_text(value)


def _literal_text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_literal_text(v) if v is not None else "null" for v in value) + "]"
    return str(value)


class MegatronArgs:
    """Megatron-LM's argparse dests (what `add_megatron_arguments` defines), read from source."""

    def __init__(self, mirror: Mirror) -> None:
        self.mirror = mirror
        self.args: dict[str, ArgDef] = {}

    def _module_file(self, module: str) -> tuple[str, str] | None:
        base = module.replace(".", "/")
        for candidate in (base + ".py", base + "/__init__.py"):
            proc = self.mirror._git("cat-file", "-e", f"{self.mirror.pin.commit}:{candidate}")
            if proc.returncode == 0:
                text = self.mirror.read(candidate)
                return (candidate, text) if text is not None else None
        PROBLEMS.left_out.append(f"{self.mirror.pin.repo}: module {module} not found")
        return None

    def _find_class(self, module: str, name: str, depth: int = 0) -> tuple[str, str, str, ast.ClassDef] | None:
        """(module, path, source, class) where `name` is defined, following re-exports."""
        found = self._module_file(module)
        if found is None or depth > 5:
            return None
        path, text = found
        tree = ast.parse(text)
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name == name:
                return module, path, text, node
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and any(a.name == name for a in node.names):
                return self._find_class(_absolute(module, path, node), name, depth + 1)
        PROBLEMS.left_out.append(f"{self.mirror.pin.repo}: class {name} not found in {path}")
        return None

    def _dataclass_fields(self, module: str, name: str, exclude: set[str]) -> list[ArgDef]:
        found = self._find_class(module, name)
        if found is None:
            return []
        module, path, text, cls = found
        tree = ast.parse(text)
        imports = _imports(tree, module, path)
        fields: list[ArgDef] = []
        for base in cls.bases:  # base-class fields come first, as dataclasses.fields() lists them
            if isinstance(base, ast.Name) and base.id in imports:
                fields.extend(self._dataclass_fields(imports[base.id], base.id, exclude))
            elif isinstance(base, ast.Name):
                local = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == base.id), None)
                if local is not None:
                    fields.extend(self._dataclass_fields(module, base.id, exclude))
        for stmt in cls.body:
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                continue
            annotation = ast.get_source_segment(text, stmt.annotation) or ""
            if annotation.startswith(("ClassVar", "typing.ClassVar", "InitVar", "dataclasses.InitVar")):
                continue
            attr = stmt.target.id
            if attr in exclude:
                continue
            dest, default = attr, py_default(stmt.value, text)
            value = stmt.value
            if isinstance(value, ast.Call) and call_name(value) in ("field", "dataclasses.field"):
                kwargs = {k.arg: k.value for k in value.keywords if k.arg}
                init = kwargs.get("init")
                if isinstance(init, ast.Constant) and init.value is False:
                    continue
                if "default" in kwargs:
                    default = py_default(kwargs["default"], text)
                elif "default_factory" in kwargs:
                    default = _factory_text(kwargs["default_factory"], text)
                else:
                    default = ""
                meta = kwargs.get("metadata")
                argparse_meta = _dict_get(meta, "argparse_meta") if isinstance(meta, ast.Dict) else None
                if isinstance(argparse_meta, ast.Dict):
                    dest_node = _dict_get(argparse_meta, "dest")
                    if isinstance(dest_node, ast.Constant) and isinstance(dest_node.value, str):
                        dest = dest_node.value
                    default_node = _dict_get(argparse_meta, "default")
                    if default_node is not None:
                        default = py_default(default_node, text)
            fields.append(ArgDef(dest, path, default, f"ArgumentGroupFactory({name}) field {attr}"))
        return fields

    def load(self) -> dict[str, ArgDef]:
        text = self.mirror.read(MEGATRON_ARGUMENTS)
        if text is None:
            return {}
        if "def add_megatron_arguments(" not in text:
            PROBLEMS.fatal.append(f"{MEGATRON_ARGUMENTS}: add_megatron_arguments is gone; re-read the argparse")
        tree = ast.parse(text)
        module = "megatron.training.arguments"
        imports = _imports(tree, module, MEGATRON_ARGUMENTS)
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for func in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
            local_lists = {
                t.id: [e.value for e in s.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
                for s in ast.walk(func)
                if isinstance(s, ast.Assign) and isinstance(s.value, ast.List)
                for t in s.targets
                if isinstance(t, ast.Name)
            }
            for call in (n for n in ast.walk(func) if isinstance(n, ast.Call)):
                name = call_name(call)
                if name.endswith(".add_argument"):
                    arg = _explicit_arg(call, text)
                    conditions = _conditions(call, parents, text)
                    if arg is not None and conditions:
                        arg = ArgDef(
                            arg.dest, arg.path, arg.default, arg.how + " only when " + " and ".join(conditions)
                        )
                    self._add(arg)
                elif name == "ArgumentGroupFactory" and call.args and isinstance(call.args[0], ast.Name):
                    cls = call.args[0].id
                    exclude: set[str] = set()
                    for kw in call.keywords:
                        if kw.arg == "exclude" and isinstance(kw.value, ast.List):
                            exclude = {
                                e.value
                                for e in kw.value.elts
                                if isinstance(e, ast.Constant) and isinstance(e.value, str)
                            }
                        elif kw.arg == "exclude" and isinstance(kw.value, ast.Name):
                            exclude = set(local_lists.get(kw.value.id, []))
                    if cls not in imports:
                        PROBLEMS.left_out.append(f"{MEGATRON_ARGUMENTS}: cannot resolve {cls}")
                        continue
                    for arg in self._dataclass_fields(imports[cls], cls, exclude):
                        self._add(arg)
        return self.args

    def _add(self, arg: ArgDef | None) -> None:
        if arg is not None and arg.dest not in self.args:  # argparse keeps the first default
            self.args[arg.dest] = arg


def _conditions(node: ast.AST, parents: dict[ast.AST, ast.AST], source: str) -> list[str]:
    """The `if` tests an argparse call sits under, inside its function."""
    out: list[str] = []
    while node in parents and not isinstance(node, ast.FunctionDef):
        parent = parents[node]
        if isinstance(parent, ast.If) and node is not parent.test:
            test = ast.get_source_segment(source, parent.test) or ""
            out.append(test if node in parent.body else f"not ({test})")
        node = parent
    return list(reversed(out))


def call_name(call: ast.Call) -> str:
    parts: list[str] = []
    func: ast.expr = call.func
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if isinstance(func, ast.Name):
        parts.append(func.id)
    return ".".join(reversed(parts))


def _dict_get(node: ast.Dict, key: str) -> ast.expr | None:
    for k, v in zip(node.keys, node.values):
        if isinstance(k, ast.Constant) and k.value == key:
            return v
    return None


def _factory_text(node: ast.expr, source: str) -> str:
    if isinstance(node, ast.Name) and node.id in ("list", "dict", "set", "tuple"):
        return {"list": "[]", "dict": "{}", "set": "set()", "tuple": "()"}[node.id]
    if isinstance(node, ast.Lambda):
        return py_default(node.body, source)
    return ast.get_source_segment(source, node) or ""


def _absolute(module: str, path: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module if path.endswith("__init__.py") else module.rsplit(".", 1)[0]
    for _ in range(node.level - 1):
        package = package.rsplit(".", 1)[0]
    return f"{package}.{node.module}" if node.module else package


def _imports(tree: ast.Module, module: str, path: str) -> dict[str, str]:
    """name -> module for every `from X import name` in the file (module level and in functions)."""
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                out.setdefault(alias.asname or alias.name, _absolute(module, path, node))
    return out


def _explicit_arg(call: ast.Call, source: str) -> ArgDef | None:
    options = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    if not options or not options[0].startswith("-"):
        return None
    kwargs = {k.arg: k.value for k in call.keywords if k.arg}
    dest_node = kwargs.get("dest")
    if isinstance(dest_node, ast.Constant) and isinstance(dest_node.value, str):
        dest = dest_node.value
    else:
        long = next((o for o in options if o.startswith("--")), options[0])
        dest = long.lstrip("-").replace("-", "_")
    action = kwargs.get("action")
    action_name = action.value if isinstance(action, ast.Constant) else None
    if "default" in kwargs:
        default = py_default(kwargs["default"], source)
    elif action_name == "store_true":
        default = "false"
    elif action_name == "store_false":
        default = "true"
    else:
        default = ""
    return ArgDef(dest, MEGATRON_ARGUMENTS, default, "add_argument(" + ", ".join(options) + ")")


def primus_keys(primus: Mirror, megatron: Mirror) -> list[Row]:
    for path, needles in PRIMUS_RULES.items():
        text = primus.read(path)
        for needle in needles:
            if text is not None and needle not in text:
                PROBLEMS.fatal.append(f"{PRIMUS.repo}:{path}: no longer has {needle!r}; re-read the precedence")
    exp_text = primus.read(EXPERIMENT)
    if exp_text is None:
        return []
    exp_root = _compose(exp_text)
    modules = _get(exp_root, "modules") if exp_root is not None else None
    trainer = _get(modules, "pre_trainer") if isinstance(modules, yaml.MappingNode) else None
    if not isinstance(trainer, yaml.MappingNode):
        PROBLEMS.fatal.append(f"{EXPERIMENT}: no modules.pre_trainer")
        return []

    def scalar(key: str) -> str:
        node = _get(trainer, key)
        return _placeholder_default(str(node.value)) if isinstance(node, yaml.ScalarNode) else ""

    framework = scalar("framework")
    module_path = f"primus/configs/modules/{framework}/{scalar('config')}"
    model_path = f"primus/configs/models/{framework}/{scalar('model')}"
    module = _chain(primus, module_path, "module")
    model = _chain(primus, model_path, "model")
    overrides = _get(trainer, "overrides")
    experiment: dict[str, list[Defn]] = {}
    if isinstance(overrides, yaml.MappingNode):
        for key, value in _leaves(overrides):
            experiment[key] = [Defn("experiment", EXPERIMENT, _node_text(value))]

    megatron_args = MegatronArgs(megatron).load()
    rows: list[Row] = []
    module_tops = {k.split(".", 1)[0] for k in module}
    for key in sorted(set(module) | set(model) | set(experiment)):
        # parser.py merges the model preset into the module preset with allow_override=False: a
        # top-level key the module defines drops the model's; then the experiment's overrides win.
        model_defs = model.get(key, [])
        shadowed = bool(model_defs) and key not in module and key.split(".", 1)[0] in module_tops
        defs = model_defs + module.get(key, []) + experiment.get(key, [])
        if shadowed and key not in experiment:
            detail = "model; dropped: the module preset defines its top-level key (merge_namespace)"
        else:
            detail = defs[-1].config
        win = defs[-1]
        others = [d for d in reversed(defs[:-1])]
        if others:
            detail += "; also " + "; ".join(f"{d.config} {d.path}: {d.text}" for d in others)
        if key in megatron_args:
            detail += "; Megatron argparse dest (default " + (megatron_args[key].default or "None") + ")"
        else:
            detail += "; Primus-only (not a Megatron argparse dest: stays in the module params)"
        placeholders = sorted({m.group(1) for m in _PLACEHOLDER.finditer(win.text)})
        if placeholders:
            detail += "; env " + ", ".join(placeholders)
        rows.append(row("primus_key", key, PRIMUS, win.path, PRIMUS.commit, win.text, detail))
    yaml_keys = set(module) | set(model) | set(experiment)
    for dest, arg in sorted(megatron_args.items()):
        if dest in yaml_keys:
            continue
        detail = (
            "megatron argparse only (not in the experiment's YAML chain): an override with this key is "
            f"passed to Megatron's args by MegatronArgBuilder; {arg.how}"
        )
        rows.append(row("primus_key", dest, MEGATRON, arg.path, MEGATRON.commit, arg.default, detail))
    return rows


# ---------------------------------------------------------------------------------------------
# primus_env: who reads each environment variable the ladders set
# ---------------------------------------------------------------------------------------------
def ladder_env_vars() -> list[str]:
    """The PRIMUS_* and GPUS_PER_NODE variables the shipped ladders and the write-up's context
    (config/upstream/writeup.yaml) set in `docker_env_vars` (composed, not loaded: the ladder files
    use their own tags such as `!replace`)."""
    names: set[str] = set()

    def walk(node: yaml.Node) -> None:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if key.value == "docker_env_vars" and isinstance(value, yaml.MappingNode):
                    names.update(str(k.value) for k, _ in value.value)
                walk(value)
        elif isinstance(node, yaml.SequenceNode):
            for item in node.value:
                walk(item)

    for path in [*sorted(LADDERS_DIR.glob("*.yaml")), WRITEUP]:
        root = yaml.compose(path.read_text(), Loader=yaml.SafeLoader)
        if root is not None:
            walk(root)
    return sorted(n for n in names if n.startswith("PRIMUS_") or n == "GPUS_PER_NODE")


def _strip_comments(text: str, yaml_file: bool) -> list[str]:
    lines = []
    for line in text.splitlines():
        stripped = line.lstrip()
        if stripped.startswith("#"):
            lines.append("")
            continue
        line = re.sub(r"\s#.*$", "", line) if yaml_file else re.sub(r"\s+#\s.*$", "", line)
        lines.append(line)
    return lines


def _env_reads(path: str, text: str, var: str) -> list[tuple[str, str, str]]:
    """(default, how, config key) for each read of `var` in the file; empty when only named."""
    v = re.escape(var)
    reads: list[tuple[str, str, str]] = []
    if path.endswith(".py"):
        pattern = re.compile(
            rf"""(?:environ\.get|getenv)\(\s*["']{v}["']\s*(?:,\s*(?P<d>[^)]*?))?\s*\)"""
            rf"""|environ\[\s*["']{v}["']\s*\](?!\s*=(?!=))"""
        )
        for line in _strip_comments(text, False):
            for m in pattern.finditer(line):
                default = (m.group("d") or "").strip().strip("\"'")
                reads.append((default, line.strip(), ""))
    elif path.endswith((".yaml", ".yml")):
        placeholder = re.compile(rf"\$\{{{v}(?::(?P<d>[^}}]*))?\}}")
        named = re.compile(rf"""^\s*(?:-\s*|[\w.]+:\s*)["']?{v}["']?\s*$""")
        for line in _strip_comments(text, True):
            for m in placeholder.finditer(line):
                key = re.match(r"\s*([\w.]+):", line)
                reads.append((m.group("d") or "", line.strip(), key.group(1) if key else ""))
            if named.match(line):
                reads.append(("", line.strip(), ""))
    else:  # shell
        pattern = re.compile(rf"\$\{{{v}(?:(?P<op>:?[-=?+])(?P<d>[^}}]*))?\}}|\${v}(?![\w])")
        for line in _strip_comments(text, False):
            for m in pattern.finditer(line):
                default = m.group("d") if m.group("op") in (":-", "-", ":=", "=") else ""
                reads.append(((default or "").strip("\"'"), line.strip(), ""))
    return reads


def _env_where(path: str) -> tuple[bool, str]:
    """(on the `primus-cli ... train pretrain` path, how the file is reached)."""
    if path.startswith("examples/") and not path.endswith((".yaml", ".yml")):
        return False, "example script only (not on primus-cli's path)"
    if path == EXPERIMENT:
        return True, "primus-cli path: ${VAR:default} placeholder in the experiment YAML"
    if path.startswith("primus/configs/platforms/"):
        return True, "primus-cli path: the platform config names it (read by primus/platforms/base_platform.py)"
    if path.startswith("primus/configs/"):
        return True, "primus-cli path: ${VAR:default} placeholder in the experiment's config chain"
    if path == "runner/.primus.yaml":
        return True, "primus-cli container mode: passed into the container (runner/.primus.yaml env list)"
    if path.startswith("runner/primus-cli-slurm"):
        return True, "primus-cli slurm mode (runner shell)"
    if path.startswith("runner/"):
        return True, "primus-cli path: runner shell (primus-cli direct)"
    if path.startswith(NOT_TRAIN_PREFIXES):
        return False, "primus package, another primus-cli subcommand or tool (projection/preflight/agent), not train"
    if path.startswith("primus/"):
        return True, "primus-cli path: Python in the training ranks (primus/)"
    return False, "other"


def primus_env(primus: Mirror) -> list[Row]:
    variables = ladder_env_vars()
    found: dict[str, list[tuple[str, bool, str, str, str, str]]] = {v: [] for v in variables}
    for path in ENV_CANDIDATES:
        text = primus.read(path)
        if text is None:
            continue
        for var in variables:
            reads = _env_reads(path, text, var)
            if not reads:
                continue
            on_path, where = _env_where(path)
            defaults = [d for d, _, _ in reads]
            keys = sorted({k for _, _, k in reads if k})
            first = next((d for d in defaults if d), "")
            others = sorted({d for d in defaults if d and d != first})
            how = clip(reads[0][1], 160)
            extra = ""
            if keys:
                extra += "; feeds key " + ", ".join(keys)
            if others:
                extra += "; other defaults in the file: " + ", ".join(others)
            selects = ENV_SELECTS.get((var, path))
            if selects is not None and selects[0] in text:
                files = [f for f in primus.ls(selects[1]) if re.fullmatch(r"MI\w+\.sh", f)]
                extra += (
                    f"; sources {selects[1]}/<value>.sh when it exists, else common settings only; "
                    f"at the pin: {', '.join(files)}"
                )
            found[var].append((path, on_path, where, first, how, extra))
    rows: list[Row] = []
    for var in variables:
        readers = found[var]
        train_readers = [r for r in readers if r[1]]
        instead = ""
        if not train_readers:
            passed: set[str] = set()
            for path, *_ in readers:
                text = primus.read(path) or ""
                passed.update(re.findall(rf"""--(\w+)[= ]+["']?\$\{{?{re.escape(var)}\b""", text))
            instead = "; no file on primus-cli's path reads it: set the config key " + (
                ", ".join(sorted(passed)) if passed else "(none found)"
            )
            if passed:
                instead += " instead (the example passes it as --" + ", --".join(sorted(passed)) + ")"
        if not readers:
            PROBLEMS.left_out.append(f"primus_env {var}: no reader among ENV_CANDIDATES at the pin")
        for path, _on_path, where, default, how, extra in readers:
            detail = f"{where}; reads: {how}{extra}{instead}"
            rows.append(row("primus_env", var, PRIMUS, path, PRIMUS.commit, default, detail))
    return rows
