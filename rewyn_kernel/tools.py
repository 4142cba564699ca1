"""Tools an agent can call, and the permission policies that decide whether a call may run.

A ``Tool`` is what a model is offered: a name, a description, a JSON Schema of its input, a
``RiskLevel``, and a sync and an async call. A ``PermissionPolicy`` looks at the tool and the
arguments and returns a ``PermissionDecision``; ``MaxRiskLevel`` is the policy the spec shows::

    from rewyn_kernel.runtime import create, sandbox_tool
    from rewyn_kernel.tools import MaxRiskLevel, RiskLevel, to_openai

    tool = sandbox_tool(create(network="none", inherit_env=[]))
    policy = MaxRiskLevel(RiskLevel.MEDIUM)
    tools = [to_openai(tool)]                  # or to_anthropic(tool), in the request
    payload = tool.run(call.function.arguments, policy=policy)   # JSON string or dict

``run`` validates the arguments, asks the policy and raises ``PolicyError`` when the call may
not run; an agent framework that keeps its own policy calls ``tool.validate`` and
``policy.check`` itself, then ``tool.call``. Nothing here imports Jupyter or the runtime.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import inspect
import json
import logging
import re
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rewyn_kernel import _schema
from rewyn_kernel.errors import PolicyError, RewynError

__all__ = [
    "Approver",
    "MaxRiskLevel",
    "PermissionDecision",
    "PermissionPolicy",
    "RiskLevel",
    "Tool",
    "ToolArgumentsError",
    "to_anthropic",
    "to_openai",
]

_logger = logging.getLogger(__name__)
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
"""Tool names both APIs accept (OpenAI: 64 characters at most; Anthropic: 128)."""


@functools.total_ordering
class RiskLevel(Enum):
    """How much harm a tool call can do, ordered: LOW < MEDIUM < HIGH < CRITICAL."""

    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        """0 for LOW up to 3 for CRITICAL."""
        return list(RiskLevel).index(self)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, RiskLevel):
            return NotImplemented
        return self.rank < other.rank

    def __str__(self) -> str:
        return self.value


class ToolArgumentsError(RewynError, ValueError):
    """A tool call's arguments are not valid JSON or do not match the tool's input schema."""


class PermissionDecision(BaseModel):
    """A policy's answer for one tool call."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    allowed: bool = Field(description="The call may run (once approved, if approval is needed).")
    requires_approval: bool = Field(
        default=False, description="A person must approve this call before it runs."
    )
    reason: str = Field(description="Why, in words, to show a person or the model.")

    @model_validator(mode="after")
    def _approval_only_when_allowed(self) -> PermissionDecision:
        if self.requires_approval and not self.allowed:
            raise ValueError("requires_approval=True needs allowed=True: a denial is final")
        return self


@runtime_checkable
class PermissionPolicy(Protocol):
    """Decides whether ``tool`` may run with ``arguments`` (already validated)."""

    def check(self, tool: Tool, arguments: Mapping[str, Any]) -> PermissionDecision:
        """Allow, deny, or ask for approval of this call."""
        ...


class MaxRiskLevel(BaseModel):
    """Allow tools up to ``deny_above``; deny riskier ones; ask for approval above
    ``approve_above``, or of every call with ``approve_all``: ``MaxRiskLevel(RiskLevel.MEDIUM)``,
    ``MaxRiskLevel(RiskLevel.HIGH, approve_above=RiskLevel.LOW)``,
    ``MaxRiskLevel(RiskLevel.HIGH, approve_all=True)``."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    deny_above: RiskLevel = Field(description="Tools riskier than this are denied.")
    approve_above: RiskLevel | None = Field(
        default=None,
        description="Tools riskier than this (and not denied) need a person's approval; "
        "None: no approval step.",
    )
    approve_all: bool = Field(
        default=False,
        description="Every tool not denied needs a person's approval, low risk too "
        "(approve_above then asks nothing more).",
    )

    def __init__(
        self,
        deny_above: RiskLevel | str,
        *,
        approve_above: RiskLevel | str | None = None,
        approve_all: bool = False,
    ) -> None:
        super().__init__(
            deny_above=deny_above, approve_above=approve_above, approve_all=approve_all
        )

    @model_validator(mode="after")
    def _ordered(self) -> MaxRiskLevel:
        if self.approve_above is not None and self.approve_above > self.deny_above:
            raise ValueError(
                f"approve_above ({self.approve_above}) is above deny_above ({self.deny_above}): "
                "nothing could ever need approval"
            )
        return self

    def check(self, tool: Tool, arguments: Mapping[str, Any]) -> PermissionDecision:
        """Deny past ``deny_above``, ask past ``approve_above``, else allow."""
        level = tool.risk_level
        what = f"tool {tool.name!r} is {level} risk" + (
            f" ({tool.risk_reason})" if tool.risk_reason else ""
        )
        if level > self.deny_above:
            return PermissionDecision(
                allowed=False, reason=f"{what}; this policy denies tools above {self.deny_above}"
            )
        if self.approve_all:
            return PermissionDecision(
                allowed=True,
                requires_approval=True,
                reason=f"{what}; this policy needs a person's approval for every call",
            )
        if self.approve_above is not None and level > self.approve_above:
            return PermissionDecision(
                allowed=True,
                requires_approval=True,
                reason=f"{what}; this policy needs a person's approval above {self.approve_above}",
            )
        return PermissionDecision(
            allowed=True, reason=f"{what}, within this policy's limit ({self.deny_above})"
        )


Handler = Callable[[dict[str, Any]], Mapping[str, Any]]
AsyncHandler = Callable[[dict[str, Any]], Awaitable[Mapping[str, Any]]]
RefusalHandler = Callable[[object, RewynError], None]


@dataclass(frozen=True, eq=False, kw_only=True)
class Tool:
    """A function a model can call, with what a policy needs to judge it.

    ``handler`` receives validated arguments and returns a JSON-safe mapping; ``async_handler``
    is used by ``acall``/``arun`` when given (else ``handler`` runs in a thread).
    """

    name: str
    description: str
    input_schema: Mapping[str, Any]
    """A JSON Schema object of scalar arguments (see ``rewyn_kernel._schema``)."""
    risk_level: RiskLevel
    handler: Handler
    async_handler: AsyncHandler | None = None
    risk_reason: str = ""
    """Why the tool has its risk level, in words (policies quote it)."""
    on_refused: RefusalHandler | None = None
    """Told of each call refused before it ran, with the arguments as given and the error that
    refused it (``ToolArgumentsError``, or ``PolicyError`` for a denial): ``sandbox_tool``
    records it in the run log. What it raises is logged, never the caller's."""

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(
                f"tool name {self.name!r} is not allowed: 1 to 64 letters, digits, '_' or '-'"
            )
        _schema.check_schema(self.input_schema)
        object.__setattr__(self, "input_schema", copy.deepcopy(dict(self.input_schema)))

    def validate(self, arguments: str | bytes | Mapping[str, Any]) -> dict[str, Any]:
        """Return the arguments as a dict, from a JSON string (OpenAI's ``arguments``) or a
        mapping (Anthropic's ``input``); raise ``ToolArgumentsError`` saying what is wrong."""
        if isinstance(arguments, (str, bytes)):
            try:
                text = arguments.decode() if isinstance(arguments, bytes) else arguments
                arguments = json.loads(text) if text.strip() else {}
            except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError alike
                raise ToolArgumentsError(
                    f"arguments for tool {self.name!r} are not valid JSON: {exc}"
                ) from exc
        if not isinstance(arguments, Mapping):
            raise ToolArgumentsError(
                f"arguments for tool {self.name!r} must be a JSON object, "
                f"not {type(arguments).__name__}"
            )
        found = _schema.problems(self.input_schema, arguments)
        if found:
            raise ToolArgumentsError(_schema.message(self.name, found))
        return dict(arguments)

    def call(self, arguments: str | bytes | Mapping[str, Any]) -> dict[str, Any]:
        """Validate ``arguments`` and run the tool, with no policy check."""
        with self._refusals(arguments):
            valid = self.validate(arguments)
        return dict(self.handler(valid))

    async def acall(self, arguments: str | bytes | Mapping[str, Any]) -> dict[str, Any]:
        """``call`` without blocking the event loop."""
        with self._refusals(arguments):
            valid = self.validate(arguments)
        return await self._ainvoke(valid)

    def run(
        self,
        arguments: str | bytes | Mapping[str, Any],
        policy: PermissionPolicy | None = None,
        approve: Callable[[Tool, dict[str, Any], PermissionDecision], bool] | None = None,
    ) -> dict[str, Any]:
        """Validate, check ``policy`` (asking ``approve`` when it needs approval), then run.

        Raises ``PolicyError`` when the call is denied, needs approval and no ``approve`` was
        given, or ``approve`` did not return True; nothing runs then.
        """
        with self._refusals(arguments):
            valid, asking = self._admit(arguments, policy, approve is not None)
            if asking is not None and approve is not None:
                self._approved(approve(self, valid, asking), asking)
        return dict(self.handler(valid))

    async def arun(
        self,
        arguments: str | bytes | Mapping[str, Any],
        policy: PermissionPolicy | None = None,
        approve: Approver | None = None,
    ) -> dict[str, Any]:
        """``run`` without blocking the event loop; ``approve`` may be async."""
        with self._refusals(arguments):
            valid, asking = self._admit(arguments, policy, approve is not None)
            if asking is not None and approve is not None:
                answer = approve(self, valid, asking)
                self._approved(await answer if inspect.isawaitable(answer) else answer, asking)
        return await self._ainvoke(valid)

    def _admit(
        self, arguments: str | bytes | Mapping[str, Any], policy: PermissionPolicy | None, ask: bool
    ) -> tuple[dict[str, Any], PermissionDecision | None]:
        """The valid arguments, and the decision a person must approve (None: none needed);
        raise when they are not valid, the policy denies, or approval is needed and ``ask``
        is False (no one to ask)."""
        valid = self.validate(arguments)
        decision = self._decide(valid, policy)
        if decision is None or not decision.requires_approval:
            return valid, None
        if not ask:
            raise PolicyError(f"{decision.reason}; pass approve= to ask a person")
        return valid, decision

    @contextlib.contextmanager
    def _refusals(self, arguments: object) -> Iterator[None]:
        """Tell ``on_refused`` of a call refused within (then let the error go on)."""
        try:
            yield
        except (ToolArgumentsError, PolicyError) as exc:
            if self.on_refused is not None:
                try:
                    self.on_refused(arguments, exc)
                except Exception:
                    _logger.exception("on_refused of tool %r failed", self.name)
            raise

    async def _ainvoke(self, arguments: dict[str, Any]) -> dict[str, Any]:
        if self.async_handler is not None:
            return dict(await self.async_handler(arguments))
        return dict(await asyncio.to_thread(self.handler, arguments))

    def _decide(
        self, arguments: dict[str, Any], policy: PermissionPolicy | None
    ) -> PermissionDecision | None:
        if policy is None:
            return None
        decision = policy.check(self, arguments)
        if not decision.allowed:
            raise PolicyError(f"denied: {decision.reason}")
        return decision

    def _approved(self, answer: object, decision: PermissionDecision) -> None:
        if answer is not True:
            raise PolicyError(f"not approved: {decision.reason}")

    def __repr__(self) -> str:
        return f"<Tool {self.name} risk={self.risk_level}>"


Approver = Callable[[Tool, dict[str, Any], PermissionDecision], bool | Awaitable[bool]]
"""Asked when a policy needs approval: ``approve(tool, arguments, decision) -> bool``
(``arun`` also awaits an async one)."""


def to_openai(tool: Tool, *, api: Literal["chat", "responses"] = "chat") -> dict[str, Any]:
    """The tool in OpenAI's ``tools`` format: Chat Completions by default,
    ``{"type": "function", "function": {"name", "description", "parameters"}}``.

    ``api="responses"`` gives the Responses API's flat form, ``{"type": "function", "name",
    "description", "parameters", "strict": False}``: strict mode (that API's default) needs
    every property required, and ``timeout`` is optional.
    """
    function = {
        "name": tool.name,
        "description": tool.description,
        "parameters": copy.deepcopy(dict(tool.input_schema)),
    }
    if api == "responses":
        return {"type": "function", **function, "strict": False}
    return {"type": "function", "function": function}


def to_anthropic(tool: Tool) -> dict[str, Any]:
    """The tool in the Anthropic Messages API's ``tools`` format:
    ``{"name", "description", "input_schema"}``."""
    return {
        "name": tool.name,
        "description": tool.description,
        "input_schema": copy.deepcopy(dict(tool.input_schema)),
    }
