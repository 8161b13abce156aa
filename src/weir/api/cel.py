"""CEL validation rules (``x-kubernetes-validations``), declared once on the models.

A rule is a :class:`CelRule`: the CEL expression and the message the API server
returns when it evaluates to false, word for word as in the upstream CRD. It
is declared where the CRD places it:

* on an object: in ``cel_rules`` of a :class:`CelModel` subclass::

      class BackendTLS(CelModel):
          cel_rules: ClassVar[tuple[CelRule, ...]] = (CelRule("self.mode == ...", "..."),)

* on a scalar or list field: as ``Annotated`` metadata::

      hostname: Annotated[PreciseHostname, CelRule("!self.endsWith('.cluster.local')", "...")]

From that one declaration, the model's JSON schema (and so the CRD that
:mod:`weir.api.crds` prints) carries ``x-kubernetes-validations: [{rule,
message}]`` at that node, and validating a resource kind that mixes in
:class:`CelChecked` evaluates every rule in the object with a real CEL engine
(the Rust ``cel`` crate through the ``common-expression-language``
bindings). Each rule is compiled once, when its model is defined.

When rules run. As the API server does: after the object has passed its
OpenAPI schema, every rule of every node present runs, and every failing
rule is reported (a child's failure does not hide its parent's). An object
with schema errors is reported with those only; the API server also skips
CEL after "blocking" schema errors (wrong type, enum, required, too long,
too many) but still runs it after a pattern or range error, and then says
"some validation rules were not checked": weir does neither.

What ``self`` is. The API server evaluates a rule on the node as it stores
it: unknown fields pruned, ``null`` dropped, the schema's defaults applied,
properties under their JSON names (CEL keywords escaped: ``namespace`` reads
``self.__namespace__``). :func:`cel_value` builds exactly that from the
validated model: a field is present if the manifest set it to a non-null
value or the CRD declares a default for it (:func:`weir.api.meta.crd_default`);
a field that only has a model-side convenience default (``None``, ``()``)
is absent, so ``has(self.caCertificateRefs)`` is false when the manifest
omits it, as in the cluster. Building it from the model rather than from the
raw input means the value has the types the schema promises. A rule that
only reads ``self.<field>`` gets only those fields (``CelRule.fields``), which keeps evaluation cheap.

A failing rule is a pydantic error of type ``cel`` at the node that carries
the rule, whose message is the rule's message and whose input is the node's
schema type (``"object"``, ``"string"``): the API server reports
``field.Invalid(path, <schema type>, message)``, so the loader prints
``spec.tls: Invalid value: "object": clientCertificateRef must be set ...``.
An evaluation error is worded as the API server words it:
``no such key: x evaluating rule: <message>``.

Kubernetes' CEL libraries used by the rules are implemented in
:mod:`weir.api.cel_library`: ``format.<name>().validate(s)`` (and ``format.named``),
``isIP``, and the string functions ``lowerAscii``, ``upperAscii``, ``trim``,
``split``, ``join``, ``replace``, ``indexOf``, ``lastIndexOf`` and
``substring``. ``validate`` returns an optional, as Kubernetes' does:
``optional.none()`` when the value is valid, else ``optional.of([errors])``;
except in a rule that compares it with ``null`` (XBackend's port name rule),
where it returns ``null`` for a valid value, so that the rule means what it
says rather than rejecting every name as the v1.6 API server does (see
:func:`~weir.api.cel_library.format_validate_or_null`).
"""

from __future__ import annotations

import re
import threading
import types
import typing
from dataclasses import dataclass, field
from functools import cache
from typing import Any, ClassVar

from pydantic import BaseModel, GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

from weir.api.cel_library import LIBRARY, engine, format_validate_or_null
from weir.api.listtypes import ObjectChecked, ObjectError, model_types, raise_errors
from weir.api.meta import NO_DEFAULT, Model, crd_default

__all__ = [
    "CelChecked",
    "CelModel",
    "CelRule",
    "cel_errors",
    "cel_value",
    "check_rules",
    "escape_property",
    "schema_type",
]


# ------------------------------------------------------------------ the value a rule sees

_CEL_RESERVED = frozenset(
    {
        "true", "false", "null", "in", "as", "break", "const", "continue", "else", "for", "function",
        "if", "import", "let", "loop", "package", "namespace", "return", "var", "void", "while",
    }
)  # fmt: skip
_ESCAPED = re.compile(r"__|[-./]")
_ESCAPES = {"__": "__underscores__", ".": "__dot__", "-": "__dash__", "/": "__slash__"}


@cache
def escape_property(name: str) -> str:
    """A property name as CEL reads it (Kubernetes' ``cel.Escape``): ``namespace`` → ``__namespace__``."""
    if name in _CEL_RESERVED:
        return f"__{name}__"
    return _ESCAPED.sub(lambda m: _ESCAPES[m.group(0)], name)


@dataclass(frozen=True, slots=True)
class _FieldPlan:
    name: str
    key: str  # the escaped JSON name
    default: Any  # the CRD default, or NO_DEFAULT


@cache
def _plan(model: type[BaseModel]) -> tuple[_FieldPlan, ...]:
    return tuple(
        _FieldPlan(name, escape_property(info.alias or name), crd_default(info))
        for name, info in model.model_fields.items()
    )


def cel_value(value: Any, only: frozenset[str] | None = None) -> Any:
    """``value`` (a validated model, or part of one) as the API server stores it; see the module doc.

    ``only`` keeps just those properties of a model (escaped names).
    """
    if isinstance(value, BaseModel):
        out: dict[str, Any] = {}
        given = value.model_fields_set
        for plan in _plan(type(value)):
            if only is not None and plan.key not in only:
                continue
            if plan.name in given:
                item = getattr(value, plan.name)
                if item is None:
                    continue  # null is pruned, and then defaulted
                out[plan.key] = cel_value(item)
            elif plan.default is not NO_DEFAULT:
                out[plan.key] = cel_value(plan.default)
        return out
    if isinstance(value, tuple | list):
        return [cel_value(v) for v in value]
    if isinstance(value, dict):
        return {k: cel_value(v) for k, v in value.items()}
    return value


def schema_type(value: Any) -> str:
    """The OpenAPI type of a value, as the API server names a node in a CEL error."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, tuple | list):
        return "array"
    return "object"


# ------------------------------------------------------------------ rules

_STRING_LITERAL = re.compile(
    r"""[rR]?(?:'''(?:\\.|[^\\])*?'''|\"\"\"(?:\\.|[^\\])*?\"\"\"|'(?:\\.|[^'\\])*'|"(?:\\.|[^"\\])*")""",
    re.DOTALL,
)
_VALIDATE_VS_NULL = re.compile(r"\.validate\((?:[^()]|\([^()]*\))*\)\s*[!=]=\s*null\b")
_SELF = re.compile(r"\bself\b(\s*\.\s*([A-Za-z_][A-Za-z0-9_]*)\s*(\()?)?")


def _fields_read(rule: str) -> frozenset[str] | None:
    """The properties of ``self`` a rule can read, or ``None`` if it may read all of ``self``.

    Every use of ``self`` must be a property access ``self.name`` (inside
    ``has()`` or not); ``self`` alone, ``self[...]`` or a method call
    ``self.all(...)`` may touch everything.
    """
    code = _STRING_LITERAL.sub('""', rule)
    names: set[str] = set()
    for match in _SELF.finditer(code):
        if match.group(1) is None or match.group(3) is not None:
            return None
        names.add(match.group(2))
    return frozenset(names)


@dataclass(frozen=True)
class CelRule:
    """One ``x-kubernetes-validations`` entry: a CEL expression and the message when it is false.

    Compiled when created (a syntax error is an import-time error). Declare
    it in a :class:`CelModel`'s ``cel_rules``, or as ``Annotated`` metadata of
    a field; see the module doc.
    """

    rule: str
    message: str = ""
    #: The properties of ``self`` the rule reads (``None``: possibly all).
    fields: frozenset[str] | None = field(init=False, repr=False, compare=False)
    _program: engine.Program = field(init=False, repr=False, compare=False)
    _extras: dict[str, Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        program = engine.compile(self.rule)
        refs = program.references()
        extras = {name: LIBRARY[name] for name in (*refs["variables"], *refs["functions"]) if name in LIBRARY}
        if "validate" in extras and _VALIDATE_VS_NULL.search(_STRING_LITERAL.sub('""', self.rule)):
            extras["validate"] = format_validate_or_null
        object.__setattr__(self, "_program", program)
        object.__setattr__(self, "_extras", extras)
        object.__setattr__(self, "fields", _fields_read(self.rule))

    def to_schema(self) -> dict[str, str]:
        """The ``x-kubernetes-validations`` entry."""
        return {"rule": self.rule, "message": self.message} if self.message else {"rule": self.rule}

    def failure(self, value: Any) -> str | None:
        """The API server's message if the rule fails for ``value`` (a :func:`cel_value`), else None."""
        found = _RuleSet((self,)).failures(value)
        return found[0] if found else None

    def _outcome(self, context: engine.Context) -> str | None:
        try:
            result = self._program.execute(context)
        except Exception as exc:  # any evaluation error fails the rule, as in Kubernetes
            return f"{_describe(exc)} evaluating rule: {self.message.strip() or self.rule.strip()}"
        if result is True:
            return None
        if result is False:
            return self.message or f"failed rule: {self.rule.strip()}"
        return f"rule did not evaluate to a bool: {self.message.strip() or self.rule.strip()}"

    # As Annotated metadata of a field: nothing to validate here (see check_rules), a schema entry.

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return handler(source)

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        json_schema = handler(schema)
        target = handler.resolve_ref_schema(json_schema)
        target.setdefault("x-kubernetes-validations", []).append(self.to_schema())
        return json_schema


_contexts = threading.local()


class _RuleSet:
    """The rules on one node, grouped so that rules with the same library bindings share a context.

    ``self`` is converted to a CEL value once per group, not once per rule:
    the conversion costs far more than evaluating a rule.
    """

    __slots__ = ("groups", "rules")

    def __init__(self, rules: tuple[CelRule, ...]) -> None:
        self.rules = rules
        groups: list[tuple[dict[str, Any], list[int]]] = []
        for i, rule in enumerate(rules):
            for extras, members in groups:
                if all(extras.get(k, v) is v for k, v in rule._extras.items()):
                    extras.update(rule._extras)
                    members.append(i)
                    break
            else:
                groups.append((dict(rule._extras), [i]))
        self.groups = tuple(
            (extras, tuple(sorted((k, id(v)) for k, v in extras.items())), tuple(members))
            for extras, members in groups
        )

    def __bool__(self) -> bool:
        return bool(self.rules)

    def failures(self, value: Any) -> list[str]:
        """The messages of the rules that fail for ``value`` (a :func:`cel_value`), in order."""
        if len(self.groups) == 1:
            extras, key, _ = self.groups[0]
            context = _context(extras, key, value)
            return [m for m in (rule._outcome(context) for rule in self.rules) if m is not None]
        outcomes: list[str | None] = [None] * len(self.rules)
        for extras, key, members in self.groups:
            context = _context(extras, key, value)
            for i in members:
                outcomes[i] = self.rules[i]._outcome(context)
        return [m for m in outcomes if m is not None]


def _context(extras: dict[str, Any], key: tuple[tuple[str, int], ...], value: Any) -> engine.Context:
    """A CEL context with ``self`` bound to ``value``.

    Contexts with library functions are costly to build; each thread keeps
    one per set of bindings (``key``) and rebinds ``self``.
    """
    if not extras:
        return engine.Context({"self": value})
    try:
        cache: dict[tuple[tuple[str, int], ...], engine.Context] = _contexts.cache
    except AttributeError:
        cache = _contexts.cache = {}
    context = cache.get(key)
    if context is None:
        variables = {k: v for k, v in extras.items() if not callable(v)}
        functions = {k: v for k, v in extras.items() if callable(v)}
        context = cache[key] = engine.Context(variables, functions)
    context.add_variable("self", value)
    return context


def _describe(exc: Exception) -> str:
    if isinstance(exc, KeyError):
        return f"no such key: {exc.args[0] if exc.args else ''}"
    if isinstance(exc, TypeError):
        return "no such overload"
    text = str(exc)
    library = re.search(r"CelError: (.*?)(?:\. Check function arguments.*)?$", text)
    return library.group(1) if library else text


class CelModel(Model):
    """A model whose object carries CEL rules: ``cel_rules``, in the CRD at this object's schema."""

    cel_rules: ClassVar[tuple[CelRule, ...]] = ()

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        json_schema = super().__get_pydantic_json_schema__(schema, handler)
        if cls.cel_rules:
            target = handler.resolve_ref_schema(json_schema)
            target["x-kubernetes-validations"] = [rule.to_schema() for rule in cls.cel_rules]
        return json_schema


# ------------------------------------------------------------------ checking an object


def _annotated_rules(annotation: Any) -> list[CelRule]:
    """CelRules in ``Annotated`` metadata of a field's type (through ``X | None``, not into items)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        args = typing.get_args(annotation)
        return [*_annotated_rules(args[0]), *(a for a in args[1:] if isinstance(a, CelRule))]
    if origin is typing.Union or origin is types.UnionType:
        return [rule for arg in typing.get_args(annotation) for rule in _annotated_rules(arg)]
    return []


@dataclass(frozen=True, slots=True)
class _Checks:
    """What :func:`cel_errors` does for one model class."""

    rules: _RuleSet
    only: frozenset[str] | None  # the properties its rules read
    #: (name, JSON name, rules on the field, may hold models with rules) of the fields that matter.
    fields: tuple[tuple[str, str, _RuleSet, bool], ...]

    @property
    def empty(self) -> bool:
        return not self.rules and not self.fields


@cache
def _checks(model: type[BaseModel]) -> _Checks:
    rules = tuple(getattr(model, "cel_rules", ()))
    reads = [rule.fields for rule in rules]
    only = None if None in reads else frozenset().union(*(r for r in reads if r is not None))
    fields = []
    for name, info in model.model_fields.items():
        on_field = tuple(
            [m for m in info.metadata if isinstance(m, CelRule)] + _annotated_rules(info.annotation)
        )
        nested = any(m is not model and not _checks(m).empty for m in model_types(info.annotation))
        if on_field or nested:
            fields.append((name, info.alias or name, _RuleSet(on_field), nested))
    return _Checks(_RuleSet(rules), only, tuple(fields))


def cel_errors(
    obj: BaseModel, loc: tuple[int | str, ...] = ()
) -> list[tuple[tuple[int | str, ...], str, str]]:
    """Every CEL rule in ``obj`` (a validated model) that fails: ``(loc, message, schema type)``.

    Rules run on every node present, parents before children, fields in
    order; ``loc`` is in pydantic's terms (JSON names, list indexes).
    """
    checks = _checks(type(obj))
    out: list[tuple[tuple[int | str, ...], str, str]] = []
    if checks.rules:
        out.extend((loc, m, "object") for m in checks.rules.failures(cel_value(obj, checks.only)))
    for name, alias, rules, nested in checks.fields:
        item = getattr(obj, name)
        if item is None:
            continue
        if rules:
            kind = schema_type(item)
            out.extend(((*loc, alias), m, kind) for m in rules.failures(cel_value(item)))
        if not nested:
            continue
        if isinstance(item, BaseModel):
            out.extend(cel_errors(item, (*loc, alias)))
        elif isinstance(item, tuple | list):
            for i, element in enumerate(item):
                if isinstance(element, BaseModel):
                    out.extend(cel_errors(element, (*loc, alias, i)))
        elif isinstance(item, dict):
            for key, element in item.items():
                if isinstance(element, BaseModel):
                    out.extend(cel_errors(element, (*loc, alias, key)))
    return out


def check_rules(obj: BaseModel) -> None:
    """Raise a :class:`~pydantic.ValidationError` (type ``cel``) for each rule in ``obj`` that fails."""
    raise_errors(type(obj), [(loc, "cel", message, kind) for loc, message, kind in cel_errors(obj)])


class CelChecked(ObjectChecked):
    """Mixin for a resource kind: once the object has passed its schema, check every CEL rule in it.

    The rules run on the whole object at once, as the API server runs them
    after the OpenAPI schema: all failing rules are reported, a child's
    failure does not hide its parent's, and an object that failed its schema
    is reported with those errors only (the API server, too, skips CEL when
    such errors are "blocking": wrong type, enum, required, too long, too
    many; it still runs CEL after a pattern or range error, weir does not).
    Repeated keys of list types (:mod:`weir.api.listtypes`) are reported
    with them, first, as the API server does. Nested models are not checked
    on their own: validate the kind.
    """

    def object_errors(self) -> list[ObjectError]:
        return [*super().object_errors(), *((loc, "cel", m, kind) for loc, m, kind in cel_errors(self))]
