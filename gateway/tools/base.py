"""Tools the agent can call: the base class, the ``@tool`` decorator and the registry."""

from __future__ import annotations

import asyncio
import importlib
import inspect
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, ClassVar, Literal, get_type_hints, overload

from pydantic import BaseModel, ConfigDict, PydanticUserError, ValidationError, create_model

from gateway.confirm.model import Risk

Level = Literal["auto", "notify", "confirm", "manual", "deny"]


@dataclass(frozen=True, slots=True)
class ToolPreview:
    """What a call would do, worked out before any policy or person sees it."""

    summary: str
    # Shown with the call and stored with its confirmation; ``grant_scope`` in it is what a
    # grant given on the call covers besides the tool (gateway/confirm/grants.py).
    details: Mapping[str, Any] = field(default_factory=dict)
    risk: Risk | None = None
    # Set when the call is refused outright (e.g. SQL the parser cannot read).
    error: str | None = None
    # Set when the call must not run without a person whatever its level says: the tool
    # cannot vouch for what it does (SQL calling a function off the allow-list, an opaque
    # command, several statements). Fail closed (tools/policy.py): auto/notify become
    # confirm, every rule's ``tables`` condition holds, no rule lowers its risk, and no
    # grant covers it (tools/runner.py).
    hold: str | None = None

    def for_record(self, rule: str) -> dict[str, Any]:
        """What a confirmation keeps of this preview: its details, the rule that asked, and
        why it is held, so that the policy can be checked again from the record alone."""
        kept = {**self.details, "policy_rule": rule}
        if self.hold:
            kept["hold"] = self.hold
        return kept

    @classmethod
    def of_record(cls, summary: str, details: Mapping[str, Any], risk: Risk) -> ToolPreview:
        """The preview a confirmation kept (``for_record``), as the policy reads it."""
        hold = details.get("hold")
        return cls(summary=summary, details=details, risk=risk, hold=str(hold) if hold else None)


class ToolFailedError(Exception):
    """A tool's failure in one sentence for people (from gateway/texts); ``detail`` is the
    raw error, for the log and the audit trail only (issue 26: a driver's text with a
    sqlalche.me link reached the chat)."""

    def __init__(self, message: str, *, detail: str) -> None:
        super().__init__(message)
        self.detail = detail


class EffectChangedError(ToolFailedError):
    """The data changed between the approval and the run (issue 24): what would happen now
    is not what the approver saw. The run's transaction is rolled back, the record says the
    run failed with ``message``, and the call is asked again with a fresh preview.

    ``effect`` is the effect found at run time: entries in the shape of the preview's
    ``details["effects"]`` (gateway/tools/sql_effect.py), so the new question can show it.
    """

    def __init__(self, message: str, *, detail: str, effect: Sequence[Mapping[str, Any]]) -> None:
        super().__init__(message, detail=detail)
        self.effect = effect


def failure(exc: Exception) -> tuple[str, str]:
    """A tool's failure: what people read, and the raw error for the log and audit trail."""
    raw = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, ToolFailedError):
        return str(exc), exc.detail
    return raw, raw


async def _not_noted(_kind: str, _detail: Mapping[str, Any]) -> None:
    return


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovedRun:
    """What a person approved, handed to the tool that runs it (``Tool.run_approved``).

    ``details`` are the record's (the preview the approver saw), so a tool can check that
    what it is about to do is still that (issue 24: the SQL drift check) rather than
    trusting a new preview. ``note`` adds a line to the record's audit trail.
    """

    confirmation_id: str
    details: Mapping[str, Any]
    note: Callable[[str, Mapping[str, Any]], Awaitable[None]] = _not_noted


class ToolArgumentsError(ValueError):
    """The model or user passed arguments that do not fit the tool's schema.

    ``field`` is the path of the first bad argument (``sql``, ``rows.0.id``), when known.
    """

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class Tool(ABC):
    """One callable capability. Subclasses set the class attributes and ``run``."""

    name: ClassVar[str]
    description: ClassVar[str]
    params: ClassVar[type[BaseModel]]
    default_level: ClassVar[Level] = "auto"
    risk: ClassVar[Risk] = Risk.LOW
    # True only when running the call twice has the effect of running it once. Such a call
    # may be claimed once more after its claimer died; any other call is reported
    # interrupted instead. "One transaction" is not enough: a process can die after COMMIT
    # and before the ledger heard of it (docs/model.md, "Idempotent tools").
    idempotent: ClassVar[bool] = False

    def parse_args(self, args: Mapping[str, Any]) -> BaseModel:
        try:
            return self.params.model_validate(dict(args))
        except ValidationError as exc:
            where = [".".join(str(p) for p in e["loc"]) for e in exc.errors()]
            problems = "; ".join(
                f"{w or 'args'}: {e['msg']}" for w, e in zip(where, exc.errors(), strict=True)
            )
            raise ToolArgumentsError(
                f"bad arguments for {self.name}: {problems}", field=where[0] or None
            ) from exc

    def schema(self) -> dict[str, Any]:
        """The OpenAI function-calling schema."""
        params = self.params.model_json_schema()
        params.pop("title", None)
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": params},
        }

    async def preview(self, args: BaseModel) -> ToolPreview:
        shown = ", ".join(f"{k}={v!r}" for k, v in args.model_dump().items())
        return ToolPreview(summary=f"{self.name}({shown})")

    @abstractmethod
    async def run(self, args: BaseModel) -> Any:
        """Do the thing. Only ever called after the policy (and a person, if asked) allowed it."""

    async def run_approved(self, args: BaseModel, approved: ApprovedRun) -> Any:
        """Run a call a person approved (the executor's one way in). A tool that can check
        its effect against what was approved overrides this; others just run."""
        return await self.run(args)


class FunctionTool(Tool):
    """A tool made from a plain (sync or async) function by ``@tool``."""

    def __init__(
        self,
        func: Callable[..., Any],
        *,
        name: str,
        description: str,
        params: type[BaseModel],
        level: Level,
        risk: Risk,
        idempotent: bool = False,
    ) -> None:
        self._func = func
        self.idempotent = idempotent  # type: ignore[misc]
        self.name = name  # type: ignore[misc]
        self.description = description  # type: ignore[misc]
        self.params = params  # type: ignore[misc]
        self.default_level = level  # type: ignore[misc]
        self.risk = risk  # type: ignore[misc]

    async def run(self, args: BaseModel) -> Any:
        kwargs = args.model_dump()
        if inspect.iscoroutinefunction(self._func):
            return await self._func(**kwargs)
        # Sync plugin code may block: keep it off the event loop.
        return await asyncio.to_thread(self._func, **kwargs)


TOOL_ATTR = "__gateway_tool__"


def _params_model(func: Callable[..., Any], name: str) -> type[BaseModel]:
    hints = get_type_hints(func)
    fields: dict[str, Any] = {}
    for pname, param in inspect.signature(func).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"tool {name}: *args/**kwargs cannot be described to a model")
        if pname not in hints:
            raise TypeError(f"tool {name}: parameter {pname!r} needs a type hint")
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[pname] = (hints[pname], default)
    model: type[BaseModel] = create_model(
        f"{name}_args", __config__=ConfigDict(extra="forbid"), **fields
    )
    return model


@overload
def tool(func: Callable[..., Any], /) -> Callable[..., Any]: ...
@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    requires_confirmation: bool = False,
    level: Level | None = None,
    risk: Risk | str = Risk.MEDIUM,
    idempotent: bool = False,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]: ...


def tool(
    func: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    requires_confirmation: bool = False,
    level: Level | None = None,
    risk: Risk | str = Risk.MEDIUM,
    idempotent: bool = False,
) -> Any:
    """Mark a function as a tool. The registry picks it up from its module.

    ``requires_confirmation=True`` means level ``confirm`` unless a policy rule says otherwise.
    ``idempotent=True`` promises that running a call twice does what running it once does.
    The function is returned unchanged (still callable in tests), with the tool attached.
    """

    def wrap(f: Callable[..., Any]) -> Callable[..., Any]:
        tool_name = name or f.__name__
        doc = description or inspect.getdoc(f) or tool_name
        chosen: Level = level or ("confirm" if requires_confirmation else "auto")
        t = FunctionTool(
            f,
            name=tool_name,
            description=doc,
            params=_params_model(f, tool_name),
            level=chosen,
            risk=Risk(risk),
            idempotent=idempotent,
        )
        setattr(f, TOOL_ATTR, t)
        return f

    if func is not None:
        return wrap(func)
    return wrap


class PluginError(Exception):
    """A plugin module could not be loaded; names the module."""


class ToolRegistry:
    """The tools an agent may call, by name."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for t in tools:
            self.register(t)

    def register(self, t: Tool) -> None:
        if t.name in self._tools:
            raise ValueError(f"tool {t.name!r} is registered twice")
        self._tools[t.name] = t

    def register_module(self, module: ModuleType) -> list[str]:
        names = []
        for value in vars(module).values():
            t = getattr(value, TOOL_ATTR, None)
            if isinstance(t, Tool):
                try:
                    # Fail at start-up, not on the model's first turn (e.g. a Callable arg).
                    t.schema()
                except PydanticUserError as exc:
                    first = str(exc).splitlines()[0]
                    raise TypeError(
                        f"tool {t.name}: no JSON schema for its arguments: {first}"
                    ) from exc
                self.register(t)
                names.append(t.name)
        return names

    def load_plugins(self, modules: Iterable[str]) -> list[str]:
        loaded: list[str] = []
        for module_name in modules:
            try:
                module = importlib.import_module(module_name)
            except ModuleNotFoundError as exc:
                missing = exc.name or ""
                if module_name != missing and not module_name.startswith(missing + "."):
                    raise PluginError(_import_failed(module_name, exc)) from exc
                # The module itself is not there: say where the gateway looks for it.
                raise PluginError(
                    f"tools.plugins: cannot import {module_name!r} ({exc}): install the "
                    "package that provides it into the gateway's Python, or put the "
                    "directory that holds it on PYTHONPATH (docs/plugins.md)"
                ) from exc
            except Exception as exc:  # any error in the plugin's own code stops start-up
                raise PluginError(_import_failed(module_name, exc)) from exc
            try:
                names = self.register_module(module)
            except (TypeError, ValueError) as exc:
                raise PluginError(f"tools.plugins: module {module_name!r}: {exc}") from exc
            if not names:
                raise PluginError(f"tools.plugins: module {module_name!r} defines no @tool")
            loaded.extend(names)
        return loaded

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def schemas(self) -> list[dict[str, Any]]:
        return [t.schema() for t in self._tools.values()]


def _import_failed(module_name: str, exc: BaseException) -> str:
    return f"tools.plugins: cannot import {module_name!r}: {type(exc).__name__}: {exc}"
