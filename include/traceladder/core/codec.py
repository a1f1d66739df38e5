"""The codec the stage documents share, standard library only: one frozen dataclass per
document with ``to_json``/``from_json`` and a schema version (``Document``), its fields' JSON kinds
checked on read, unknown keys kept in ``extra``, and a nested part (``_Part``) parsed in place.
core/documents.py holds the stage documents, core/summary_parts.py a summary's parts."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar, TypeAlias, TypeVar, Union, cast

from traceladder.core.errors import TraceladderError

JSONValue: TypeAlias = Union[None, bool, int, float, str, list["JSONValue"], dict[str, "JSONValue"]]
JSONObject: TypeAlias = dict[str, JSONValue]

D = TypeVar("D", bound="Document")

# A field's JSON kind, checked on read ("?" allows null); element types are not checked.
_KINDS: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "int": (int,),
    "number": (int, float),
    "bool": (bool,),
    "list": (list,),
    "object": (dict,),
    "scalar": (bool, int, float, str),
    "any": (bool, int, float, str, list, dict),
}


class DocumentError(TraceladderError, ValueError):
    """A stage document that does not parse; one line: ``<file>: <field>: <reason>``."""


def _f(
    kind: str,
    *,
    key: str | None = None,
    default: Any = MISSING,
    omit_none: bool = False,
    one_of: tuple[str, ...] | None = None,
    part: type[Document] | None = None,
    by_name: bool = False,
    empty_is_none: bool = False,
) -> Any:
    """A document field: its JSON kind, its JSON key where it differs, its default (a list or
    dict default is copied per document), whether a None is left out of the JSON, the strings it
    may hold (``one_of``; a nullable kind may hold None too), and the class its JSON is read as
    (``part``: an object is one part, a list a part per item; ``by_name``: an object of parts;
    ``empty_is_none``: an empty object reads as None, as a summary's optional parts are written)."""
    meta = {
        "kind": kind,
        "key": key,
        "omit_none": omit_none,
        "one_of": one_of,
        "part": part,
        "by_name": by_name,
        "empty_is_none": empty_is_none,
    }
    if isinstance(default, (list, dict)):
        empty = type(default)
        return field(default_factory=empty, metadata=meta)
    return field(default=default, metadata=meta)


def _kind_ok(kind: str, value: object) -> bool:
    nullable = kind.endswith("?")
    if value is None:
        return nullable
    allowed = _KINDS[kind.rstrip("?")]
    if isinstance(value, bool) and bool not in allowed:
        return False
    return isinstance(value, allowed)


def _plain(value: object) -> JSONValue:
    """A field's value as JSON data (tuples become lists, nested documents dicts)."""
    if isinstance(value, Document):
        return value.to_dict()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"not JSON data: {type(value).__name__}")


def _load_json(text: str | bytes, where: str) -> object:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise DocumentError(f"{where}: (json): {exc}") from None


def _read_parts(meta: Mapping[str, Any], value: Any, where: str) -> Any:
    """A field's JSON read as its ``part`` class: one, a list of them, or an object of them."""
    part = meta["part"]
    if meta["empty_is_none"] and not value:
        return None
    if isinstance(value, list):
        return [part.from_dict(item, f"{where}[{i}]") for i, item in enumerate(value)]
    if meta["by_name"]:
        return {name: part.from_dict(item, f"{where}[{name}]") for name, item in value.items()}
    return part.from_dict(value, where)


def _one_of(where: str, key: str, value: object, allowed: tuple[str, ...]) -> None:
    if value is None or value in allowed:  # None got here only where the field's kind allows it
        return
    raise DocumentError(f"{where}: {key}: {value!r} is not one of {', '.join(allowed)}")


@dataclass(frozen=True, kw_only=True)
class Document:
    """The codec the documents share: ``SCHEMA`` is the version written; ``READS`` the older
    versions ``upgrade`` turns into the current one; ``UNVERSIONED`` the version of a document
    written before it carried a ``schema`` key (None: the key is required)."""

    FILE: ClassVar[str] = "document"
    SCHEMA: ClassVar[int] = 1
    READS: ClassVar[tuple[int, ...]] = ()
    UNVERSIONED: ClassVar[int | None] = None
    WRITES_SCHEMA: ClassVar[bool] = True
    JSON_INDENT: ClassVar[int | None] = None  # to_json's layout of the stored file
    JSON_SORT_KEYS: ClassVar[bool] = False
    JSON_NEWLINE: ClassVar[bool] = False

    extra: JSONObject = field(default_factory=dict)  # keys this version does not know, as read

    @classmethod
    def upgrade(cls, data: JSONObject, version: int, source: str) -> JSONObject:
        """An older version's data in the current shape (only versions in ``READS`` get here)."""
        return data

    def to_dict(self) -> JSONObject:
        out: JSONObject = {"schema": self.SCHEMA} if self.WRITES_SCHEMA else {}
        for f in fields(self):
            if f.name == "extra":
                continue
            value = getattr(self, f.name)
            if not self._written(f.name, value):
                continue
            out[f.metadata["key"] or f.name] = _plain(value)
        out.update(self.extra)
        return out

    def to_json(self) -> str:
        """The stored file's text, laid out as its class says (JSON_INDENT, JSON_SORT_KEYS,
        JSON_NEWLINE), so each file keeps the bytes it always had."""
        text = json.dumps(self.to_dict(), indent=self.JSON_INDENT, sort_keys=self.JSON_SORT_KEYS)
        return text + "\n" if self.JSON_NEWLINE else text

    def _written(self, name: str, value: object) -> bool:
        """Whether a field goes into the JSON: a None is left out where its field says so."""
        return not (value is None and self.__dataclass_fields__[name].metadata["omit_none"])

    @classmethod
    def from_json(cls: type[D], text: str | bytes, source: str | None = None) -> D:
        where = source or cls.FILE
        return cls.from_dict(_load_json(text, where), where)

    @classmethod
    def checked_json(cls, text: str | bytes, source: str | None = None) -> JSONObject:
        """The document's JSON as stored (keys in their order, no defaults filled in, no upgrade),
        after the checks ``from_json`` makes: for a reader that shows the stored document itself."""
        where = source or cls.FILE
        data = _load_json(text, where)
        cls.from_dict(data, where)
        return cast(JSONObject, data)  # from_dict refused anything but an object

    @classmethod
    def from_dict(cls: type[D], data: object, source: str | None = None) -> D:
        where = source or cls.FILE
        if not isinstance(data, dict):
            raise DocumentError(f"{where}: (top level): expected a JSON object")
        doc: JSONObject = dict(data)
        version = cls._version(doc, where)
        if version != cls.SCHEMA:
            doc = cls.upgrade(doc, version, where)
        values: JSONObject = {}
        known = {"schema"}
        for f in fields(cls):
            if f.name == "extra":
                continue
            key = f.metadata["key"] or f.name
            known.add(key)
            if key not in doc:
                if f.default is MISSING and f.default_factory is MISSING:
                    raise DocumentError(f"{where}: {key}: missing")
                continue
            value = doc[key]
            if not _kind_ok(f.metadata["kind"], value):
                kind = f.metadata["kind"].rstrip("?")
                raise DocumentError(f"{where}: {key}: expected {kind}, got {type(value).__name__}")
            values[f.name] = value
        for f in fields(cls):  # after every field is there: a missing field is said first
            allowed = f.metadata.get("one_of")
            if allowed is not None and f.name in values:
                _one_of(where, f.metadata["key"] or f.name, values[f.name], allowed)
            if f.metadata.get("part") is not None and values.get(f.name) is not None:
                values[f.name] = _read_parts(f.metadata, values[f.name], f"{where}: {f.metadata['key'] or f.name}")
        return cls(**values, extra={k: v for k, v in doc.items() if k not in known})

    @classmethod
    def _version(cls, doc: JSONObject, where: str) -> int:
        if "schema" not in doc:
            if cls.UNVERSIONED is None:
                raise DocumentError(f"{where}: schema: missing")
            version = cls.UNVERSIONED
        else:
            raw = doc["schema"]
            if not isinstance(raw, int) or isinstance(raw, bool):
                raise DocumentError(f"{where}: schema: expected int, got {type(raw).__name__}")
            version = raw
        if version > cls.SCHEMA:
            raise DocumentError(
                f"{where}: schema: version {version} is newer than this traceladder reads ({cls.SCHEMA})"
            )
        if version != cls.SCHEMA and version not in cls.READS:
            raise DocumentError(
                f"{where}: schema: version {version} is no longer read (now {cls.SCHEMA}); publish the run again"
            )
        return version


@dataclass(frozen=True, kw_only=True)
class _Part(Document):
    """A nested part of a document: no schema key of its own (its document's version covers it)."""

    WRITES_SCHEMA: ClassVar[bool] = False
    UNVERSIONED: ClassVar[int | None] = 1


# The names a module outside core declares its documents with (ui/responses.py, the docker hygiene's
# answers): a field's JSON kind, key and allowed values, and a nested part.
doc_field = _f
Part = _Part


def _parts(cls: type[D], value: object, where: str) -> list[D]:
    return [cls.from_dict(item, f"{where}[{i}]") for i, item in enumerate(value if isinstance(value, list) else [])]


def _replace(doc: D, **changes: Any) -> D:
    """A frozen document with some fields replaced (nested parts parsed in place of their dicts)."""
    from dataclasses import replace

    return replace(doc, **changes)
