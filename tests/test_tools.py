"""sandbox_tool under a permission policy: real sandboxes, model-shaped calls, the risk table."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pydantic
import pytest

from rewyn_kernel.errors import PolicyError
from rewyn_kernel.runtime import ContainerProvider, create, sandbox_tool
from rewyn_kernel.runtime._tool import risk_of
from rewyn_kernel.runtime.sandbox import (
    BubblewrapProvider,
    LandlockProvider,
    Sandbox,
    SandboxSpec,
    SubprocessProvider,
)
from rewyn_kernel.tools import (
    MaxRiskLevel,
    PermissionDecision,
    PermissionPolicy,
    RiskLevel,
    Tool,
    ToolArgumentsError,
    to_anthropic,
    to_openai,
)

from .conftest import TEST_IMAGE, sandboxes

MEDIUM = MaxRiskLevel(RiskLevel.MEDIUM)


@pytest.fixture
def open_box() -> Iterator[Callable[..., Sandbox]]:
    """``create(**limits)`` on the subprocess provider (the host's files open: the policy's
    middle rows), with ``inherit_env=[]`` unless given; every box is closed after."""
    with sandboxes(inherit_env=[], provider=SubprocessProvider()) as make:
        yield make


@pytest.fixture
def box(open_box: Callable[..., Sandbox]) -> Sandbox:
    return open_box(timeout=15.0)


def require_namespaces(box: Sandbox) -> None:
    assert box.isolation.network == "isolated", (
        f"this test needs Linux namespaces (unshare): {box.isolation.notes}"
    )


def test_risk_levels_are_ordered() -> None:
    assert RiskLevel.LOW < RiskLevel.MEDIUM < RiskLevel.HIGH < RiskLevel.CRITICAL
    assert RiskLevel.CRITICAL >= RiskLevel.HIGH
    assert max(RiskLevel) is RiskLevel.CRITICAL
    assert sorted([RiskLevel.HIGH, RiskLevel.LOW]) == [RiskLevel.LOW, RiskLevel.HIGH]
    assert str(RiskLevel.MEDIUM) == "medium"
    with pytest.raises(TypeError):
        assert RiskLevel.LOW < 1


def test_the_spec_production_example_is_allowed_under_medium(
    open_box: Callable[..., Sandbox],
) -> None:
    box = open_box(
        timeout=15.0,
        network="none",
        memory_limit_mb=512,
        env={"DATA_DIR": "/tmp/analysis"},
        inherit_env=[],
    )
    require_namespaces(box)
    tool = sandbox_tool(box)
    assert tool.name == "run_code"
    assert tool.risk_level is RiskLevel.MEDIUM
    decision = MEDIUM.check(tool, {"code": "1"})
    assert decision == PermissionDecision(allowed=True, reason=decision.reason)
    assert "within this policy's limit (medium)" in decision.reason
    payload = tool.run({"code": "import os\nprint(os.environ['DATA_DIR'])"}, policy=MEDIUM)
    assert payload["stdout"] == "/tmp/analysis\n"


def test_the_same_tool_with_network_allowed_is_denied_and_nothing_runs(
    open_box: Callable[..., Sandbox],
) -> None:
    box = open_box(timeout=15.0, network="allow", memory_limit_mb=512)
    tool = sandbox_tool(box)
    assert tool.risk_level is RiskLevel.CRITICAL  # a subprocess reads this user's files
    decision = MEDIUM.check(tool, {"code": "1"})
    assert not decision.allowed
    assert not decision.requires_approval
    assert "critical risk" in decision.reason
    assert "network='allow'" in decision.reason
    assert "denies tools above medium" in decision.reason
    with pytest.raises(PolicyError, match="denied: tool 'run_code' is critical risk"):
        tool.run({"code": "open('ran', 'w').close()"}, policy=MEDIUM)
    assert not (box.workdir / "ran").exists()


def test_approval_flow(box: Sandbox) -> None:
    require_namespaces(box)
    tool = sandbox_tool(box)
    policy = MaxRiskLevel(RiskLevel.HIGH, approve_above=RiskLevel.LOW)
    decision = policy.check(tool, {"code": "1"})
    assert decision.allowed
    assert decision.requires_approval
    assert "approval above low" in decision.reason

    with pytest.raises(PolicyError, match="pass approve="):
        tool.run({"code": "print(1)"}, policy=policy)
    with pytest.raises(PolicyError, match="not approved"):
        tool.run({"code": "print(1)"}, policy=policy, approve=lambda *_: False)

    asked: list[tuple[Tool, dict[str, Any], PermissionDecision]] = []

    def approve(tool: Tool, arguments: dict[str, Any], decision: PermissionDecision) -> bool:
        asked.append((tool, arguments, decision))
        return True

    payload = tool.run('{"code": "print(2)"}', policy=policy, approve=approve)
    assert payload["stdout"] == "2\n"
    assert asked == [(tool, {"code": "print(2)"}, decision)]

    async def approve_later(*_: object) -> bool:
        await asyncio.sleep(0)
        return True

    payload = asyncio.run(tool.arun({"code": "print(3)"}, policy=policy, approve=approve_later))
    assert payload["stdout"] == "3\n"


def test_approve_all_asks_for_a_low_risk_tool_too() -> None:
    """A person may ask to approve every call: approve_above stops at low, approve_all does not."""
    low = Tool(
        name="look",
        description="a low-risk tool",
        input_schema={"type": "object"},
        risk_level=RiskLevel.LOW,
        handler=lambda arguments: {},
    )
    assert not MaxRiskLevel("high", approve_above="low").check(low, {}).requires_approval
    decision = MaxRiskLevel("high", approve_all=True).check(low, {})
    assert (decision.allowed, decision.requires_approval) == (True, True)
    assert "approval for every call" in decision.reason
    high = Tool(
        name="act",
        description="a high-risk tool",
        input_schema={"type": "object"},
        risk_level=RiskLevel.HIGH,
        handler=lambda arguments: {},
    )
    assert not MaxRiskLevel("medium", approve_all=True).check(high, {}).allowed  # (denial first)


def test_policy_arguments_are_checked() -> None:
    assert MaxRiskLevel("high") == MaxRiskLevel(RiskLevel.HIGH)
    assert isinstance(MEDIUM, PermissionPolicy)
    with pytest.raises(pydantic.ValidationError, match="nothing could ever need approval"):
        MaxRiskLevel(RiskLevel.LOW, approve_above=RiskLevel.HIGH)
    with pytest.raises(pydantic.ValidationError):
        MaxRiskLevel("extreme")
    with pytest.raises(pydantic.ValidationError, match="a denial is final"):
        PermissionDecision(allowed=False, requires_approval=True, reason="x")
    with pytest.raises(pydantic.ValidationError):
        MEDIUM.deny_above = RiskLevel.CRITICAL


def test_a_refused_call_is_told_with_its_arguments_and_the_error_still_raises() -> None:
    """``on_refused`` (how sandbox_tool records a refusal in the run log) hears of each call
    refused before it ran, by every entry point; one that raises changes nothing for the
    caller."""
    heard: list[tuple[object, str]] = []

    def on_refused(arguments: object, error: Exception) -> None:
        heard.append((arguments, type(error).__name__))
        raise RuntimeError("a broken recorder")

    schema = {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}
    tool = Tool(
        name="t",
        description="d",
        input_schema=schema,
        risk_level=RiskLevel.HIGH,
        handler=lambda arguments: {"ran": True},
        on_refused=on_refused,
    )
    with pytest.raises(ToolArgumentsError):
        tool.call("{not json")
    with pytest.raises(ToolArgumentsError):
        asyncio.run(tool.acall({"code": 1}))
    with pytest.raises(PolicyError):
        tool.run({"code": "x"}, policy=MEDIUM)
    with pytest.raises(PolicyError):
        asyncio.run(tool.arun({"code": "x"}, policy=MaxRiskLevel("high", approve_above="low")))
    assert heard == [
        ("{not json", "ToolArgumentsError"),
        ({"code": 1}, "ToolArgumentsError"),
        ({"code": "x"}, "PolicyError"),
        ({"code": "x"}, "PolicyError"),
    ]
    assert tool.run({"code": "x"}) == {"ran": True}
    assert len(heard) == 4


@pytest.mark.parametrize(
    ("limits", "named"),
    [
        ({"env": {"OPENAI_API_KEY": "sk-not-a-real-key"}}, "OPENAI_API_KEY"),
        ({"env": {"db_password": "hunter2"}}, "db_password"),
        ({"inherit_env": ["GITHUB_TOKEN"]}, "GITHUB_TOKEN"),
    ],
)
def test_a_secret_named_variable_raises_the_level_to_high(
    open_box: Callable[..., Sandbox], limits: dict[str, Any], named: str
) -> None:
    box = open_box(**limits)
    require_namespaces(box)
    tool = sandbox_tool(box)
    assert tool.risk_level is RiskLevel.HIGH
    decision = MEDIUM.check(tool, {"code": "1"})
    assert not decision.allowed
    assert named in decision.reason
    for value in ("sk-not-a-real-key", "hunter2"):
        assert value not in decision.reason


def test_an_inherit_pattern_counts_by_the_names_it_matches(
    open_box: Callable[..., Sandbox], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    assert sandbox_tool(open_box(inherit_env=["AWS_*"])).risk_level is RiskLevel.MEDIUM
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-a-real-key")
    tool = sandbox_tool(open_box(inherit_env=["AWS_*"]))
    assert tool.risk_level is RiskLevel.HIGH
    assert "AWS_SECRET_ACCESS_KEY" in tool.risk_reason


def test_a_container_sandbox_is_low_risk_and_making_the_tool_starts_nothing() -> None:
    provider = ContainerProvider(image=TEST_IMAGE, pull="never")
    before = provider.containers() if provider.available else []
    box = create(provider=provider, network="none", inherit_env=[])
    try:
        tool = sandbox_tool(box)
        assert tool.risk_level is RiskLevel.LOW
        assert MEDIUM.check(tool, {"code": "1"}).allowed
        assert MaxRiskLevel(RiskLevel.LOW).check(tool, {"code": "1"}).allowed
        if provider.available:
            assert provider.containers() == before  # create() and sandbox_tool() ran nothing
    finally:
        box.close()


@pytest.mark.parametrize(
    ("maker", "limits", "level"),
    [
        (ContainerProvider(image=TEST_IMAGE), {}, RiskLevel.LOW),
        (ContainerProvider(image=TEST_IMAGE, oci_runtime="runsc"), {}, RiskLevel.LOW),
        (ContainerProvider(image=TEST_IMAGE), {"env": {"API_TOKEN": "x"}}, RiskLevel.HIGH),
        (ContainerProvider(image=TEST_IMAGE), {"network": "allow"}, RiskLevel.HIGH),
        (
            ContainerProvider(image=TEST_IMAGE),
            {"network": "allow", "env": {"API_TOKEN": "x"}},
            RiskLevel.CRITICAL,
        ),
        (BubblewrapProvider(), {}, RiskLevel.LOW),
        (BubblewrapProvider(), {"env": {"API_TOKEN": "x"}}, RiskLevel.HIGH),
        (BubblewrapProvider(), {"network": "allow"}, RiskLevel.HIGH),
        (BubblewrapProvider(), {"network": "allow", "env": {"API_TOKEN": "x"}}, RiskLevel.CRITICAL),
        (SubprocessProvider(), {"env": {"DATA_DIR": "/tmp"}}, RiskLevel.MEDIUM),
        (SubprocessProvider(), {"env": {"API_TOKEN": "x"}}, RiskLevel.HIGH),
        (SubprocessProvider(), {"network": "allow"}, RiskLevel.CRITICAL),
        # (no namespace, but network="none" kept by the filter: the user's files, no way out)
        (SubprocessProvider(namespaces=False), {}, RiskLevel.MEDIUM),
        (SubprocessProvider(namespaces=False), {"network": "allow"}, RiskLevel.CRITICAL),
        (LandlockProvider(), {}, RiskLevel.LOW),
        (LandlockProvider(), {"network": "allow"}, RiskLevel.HIGH),
        (LandlockProvider(), {"network": ["pypi.org"]}, RiskLevel.MEDIUM),
    ],
)
def test_the_risk_table(maker: Any, limits: dict[str, Any], level: RiskLevel) -> None:
    spec = SandboxSpec(inherit_env=(), **limits)
    isolation = maker.isolation(spec)
    if isolation.provider == "subprocess" and spec.network == "none" and maker.use_namespaces:
        assert isolation.network == "isolated", "this machine needs working namespaces"
    assert risk_of(isolation, spec) is level


def test_a_local_sandbox_without_its_seccomp_filter_is_not_low_risk() -> None:
    """Where libseccomp cannot be loaded, bubblewrap has no filter of its own (a container's
    engine has its own profile): the host user's keyrings are in reach, so not LOW."""
    spec = SandboxSpec(inherit_env=())
    isolation = BubblewrapProvider().isolation(spec)
    assert isolation.seccomp is not None  # (this machine has libseccomp: the control)
    assert risk_of(isolation, spec) is RiskLevel.LOW
    unfiltered = isolation.model_copy(update={"seccomp": None})
    assert risk_of(unfiltered, spec) is RiskLevel.MEDIUM
    container = ContainerProvider(image=TEST_IMAGE).isolation(spec)
    assert container.seccomp is not None  # (its engine's profile, and this one on top)
    assert risk_of(container, spec) is RiskLevel.LOW
    # (without this one, the engine's profile still stands: a container stays LOW)
    assert risk_of(container.model_copy(update={"seccomp": None}), spec) is RiskLevel.LOW


def test_a_model_shaped_tool_call_is_parsed_checked_run_and_answered(box: Sandbox) -> None:
    require_namespaces(box)
    tools = {tool.name: tool for tool in [sandbox_tool(box)]}
    # What the OpenAI Chat Completions API returns in message.tool_calls ...
    openai_call: dict[str, Any] = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "run_code", "arguments": '{"code": "print(sum(range(10)))"}'},
    }
    # ... and what the Anthropic Messages API returns as a content block.
    anthropic_call: dict[str, Any] = {
        "type": "tool_use",
        "id": "toolu_1",
        "name": "run_code",
        "input": json.loads('{"code": "print(sum(range(10)))"}'),
    }
    function = openai_call["function"]
    answers = [
        tools[function["name"]].run(function["arguments"], policy=MEDIUM),
        tools[anthropic_call["name"]].run(anthropic_call["input"], policy=MEDIUM),
    ]
    for payload in answers:
        assert payload["stdout"] == "45\n"
        assert payload["exit_code"] == 0
        assert payload["ok"] is True
        assert payload["timed_out"] is False
        assert payload["ending"] == "completed"
        assert payload["error"] is None
        assert payload["truncated"] == {}
        assert set(payload) == {
            "ok",
            "exit_code",
            "timed_out",
            "ending",
            "message",
            "stdout",
            "stderr",
            "error",
            "outputs",
            "state_lost",
            "duration_ms",
            "truncated",
        }
        text = json.dumps(payload, allow_nan=False)
        assert json.loads(text) == payload
        assert len(text) < 1000


def test_rich_outputs_arrive_as_text(box: Sandbox) -> None:
    payload = sandbox_tool(box).call({"code": "display({'a': 1})\n6 * 7"})
    assert payload["outputs"] == ["{'a': 1}", "42"]
    lone_surrogate = "class X:\n    def __repr__(self):\n        return 'a\\ud800b'\nX()"
    payload = sandbox_tool(box).call({"code": lone_surrogate})
    json.dumps(payload, ensure_ascii=False).encode("utf-8")  # JSON-safe as UTF-8 too
    assert payload["outputs"][0].startswith("a")


def test_a_flood_is_bounded_and_says_how_much_was_left_out(box: Sandbox) -> None:
    tool = sandbox_tool(box, max_result_chars=5_000)
    payload = tool.call({"code": "print('x' * 10**6)"})
    assert payload["ok"]
    stdout = payload["stdout"]
    assert len(stdout) <= 5_000
    assert stdout.startswith("xxx")
    assert stdout.endswith("xxx\n")
    found = re.search(r"\[\.\.\. ([\d,]+) characters omitted \.\.\.\]", stdout)
    assert found is not None
    omitted = int(found.group(1).replace(",", ""))
    kept = len(stdout) - len(found.group(0)) - 2  # the marker's own newlines
    assert omitted + kept == 10**6 + 1
    assert payload["truncated"] == {
        "stdout": {"shown_chars": kept, "omitted_chars": omitted},
    }
    assert "write large results to a file" in payload["message"]
    assert len(json.dumps(payload)) < 6_000


def test_a_flood_past_the_sandbox_cap_states_the_bytes_written(
    open_box: Callable[..., Sandbox],
) -> None:
    tool = sandbox_tool(open_box(output_limit_bytes=64 * 1024), max_result_chars=4_000)
    payload = tool.call({"code": "print('y' * 10**6)\nprint('the end')"})
    stdout = payload["stdout"]
    assert len(stdout) <= 4_000
    assert stdout.endswith("the end\n")
    assert "rewyn:" not in stdout  # the sandbox's own marker went with the middle
    found = re.search(r"\[\.\.\. ([\d,]+) of 1,000,009 bytes omitted \.\.\.\]", stdout)
    assert found is not None
    cut = payload["truncated"]["stdout"]
    assert cut["written_bytes"] == 1_000_009
    assert int(found.group(1).replace(",", "")) == 1_000_009 - cut["shown_chars"]


def test_many_fields_share_the_budget(box: Sandbox) -> None:
    code = (
        "import sys\n"
        "for i in range(30):\n    display('o' * 5000)\n"
        "sys.stderr.write('e' * 50000)\n"
        "print('short')\n"
        "raise ValueError('v' * 50000)"
    )
    payload = sandbox_tool(box, max_result_chars=8_000).call({"code": code})
    assert payload["stdout"] == "short\n"
    assert len(payload["outputs"]) == 20
    assert payload["truncated"]["outputs"]["omitted_items"] == 10
    assert payload["truncated"]["outputs"]["shortened_items"] == 20
    assert len(payload["message"]) < 500
    assert payload["message"].startswith("ValueError: vvv")
    error = payload["error"]
    texts = [payload["stdout"], payload["stderr"], error["evalue"], error["traceback"]]
    assert sum(map(len, texts + payload["outputs"])) <= 8_000
    assert set(payload["truncated"]) >= {"stderr", "error.evalue", "error.traceback"}


def test_an_exception_gives_the_error_fields(box: Sandbox) -> None:
    payload = sandbox_tool(box).call({"code": "def f():\n    return 1 / 0\n\nf()"})
    assert payload["ok"] is False
    assert payload["exit_code"] == 1
    assert payload["ending"] == "exception"
    assert payload["message"] == "ZeroDivisionError: division by zero"
    error = payload["error"]
    assert error["ename"] == "ZeroDivisionError"
    assert error["evalue"] == "division by zero"
    assert isinstance(error["traceback"], str)
    assert "return 1 / 0" in error["traceback"]
    assert error["traceback"].rstrip().endswith("ZeroDivisionError: division by zero")


def test_a_timeout_is_reported_and_the_model_may_only_shorten_it(box: Sandbox) -> None:
    tool = sandbox_tool(box)
    payload = tool.call({"code": "while True:\n    pass", "timeout": 0.5})
    assert payload["timed_out"] is True
    assert payload["exit_code"] == 124
    assert payload["ending"] == "timeout"
    assert payload["ok"] is False
    assert "timed out" in payload["message"]
    with pytest.raises(ToolArgumentsError, match=r"'timeout' must be at most 15"):
        tool.call({"code": "1", "timeout": 60})


@pytest.mark.parametrize(
    ("arguments", "fragment"),
    [
        ({}, "missing required argument 'code'"),
        ("", "missing required argument 'code'"),
        ({"code": 5}, "'code' must be a string, not an integer"),
        ({"code": None}, "'code' must be a string, not null"),
        ({"code": "1", "cmd": "ls"}, r"unknown argument 'cmd' \(allowed: 'code', 'timeout'\)"),
        ({"code": "1", "timeout": "1"}, "'timeout' must be a number, not a string"),
        ({"code": "1", "timeout": True}, "'timeout' must be a number, not a boolean"),
        ({"code": "1", "timeout": 0}, "'timeout' must be greater than 0"),
        ('{"code": "1", "timeout": NaN}', "'timeout' must be a finite number"),
        ('{"code": "print(1)"', "not valid JSON"),
        ('["print(1)"]', "must be a JSON object, not list"),
    ],
)
def test_invalid_arguments_say_what_is_wrong(box: Sandbox, arguments: Any, fragment: str) -> None:
    tool = sandbox_tool(box)
    with pytest.raises(ToolArgumentsError, match=fragment) as caught:
        tool.run(arguments, policy=MEDIUM)
    assert isinstance(caught.value, ValueError)
    assert "tool 'run_code'" in str(caught.value)


def test_acall_runs_without_blocking_the_loop(box: Sandbox) -> None:
    tool = sandbox_tool(box)

    async def scenario() -> list[dict[str, Any]]:
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticker = asyncio.create_task(tick())
        payloads = await asyncio.gather(
            tool.acall({"code": "import time\ntime.sleep(0.3)\nprint('a')"}),
            tool.arun('{"code": "print(\'b\')"}', policy=MEDIUM),
        )
        ticker.cancel()
        assert ticks >= 5
        return list(payloads)

    first, second = asyncio.run(scenario())
    assert first["stdout"] == "a\n"
    assert second["stdout"] == "b\n"


def test_a_session_keeps_state_between_calls(box: Sandbox) -> None:
    with box.session() as session:
        tool = sandbox_tool(session, name="python")
        assert "kept between calls" in tool.description
        tool.call({"code": "x = 41"})
        assert tool.call({"code": "print(x + 1)"})["stdout"] == "42\n"
    one_shot = sandbox_tool(box)
    assert "do not carry over" in one_shot.description
    one_shot.call({"code": "x = 41"})
    assert one_shot.call({"code": "x"})["error"]["ename"] == "NameError"


def test_exporters_give_the_documented_shapes(box: Sandbox) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    tool = sandbox_tool(box)
    openai = to_openai(tool)
    assert openai == {
        "type": "function",
        "function": {
            "name": "run_code",
            "description": tool.description,
            "parameters": tool.input_schema,
        },
    }
    responses = to_openai(tool, api="responses")
    assert responses == {
        "type": "function",
        "name": "run_code",
        "description": tool.description,
        "parameters": tool.input_schema,
        "strict": False,
    }
    anthropic = to_anthropic(tool)
    assert anthropic == {
        "name": "run_code",
        "description": tool.description,
        "input_schema": tool.input_schema,
    }
    for schema in (openai["function"]["parameters"], anthropic["input_schema"]):
        assert schema["type"] == "object"
        assert set(schema["properties"]) == {"code", "timeout"}
        assert schema["required"] == ["code"]
        assert schema["additionalProperties"] is False
        jsonschema.Draft7Validator.check_schema(schema)
        jsonschema.Draft202012Validator.check_schema(schema)
        json.dumps(schema, allow_nan=False)
    # The exports are copies: changing one leaves the tool as it was.
    anthropic["input_schema"]["required"].append("timeout")
    assert tool.input_schema["required"] == ["code"]
    # jsonschema and the tool's own check agree on what is valid.
    validator = jsonschema.Draft7Validator(tool.input_schema)
    samples: list[dict[str, Any]] = [{"code": "1"}, {"code": "1", "timeout": 2.5}, {"code": 1}]
    for arguments in [*samples, {"x": 1}, {"code": "1", "timeout": 0}]:
        try:
            tool.validate(arguments)
            ours = True
        except ToolArgumentsError:
            ours = False
        assert ours is validator.is_valid(arguments)


def test_any_function_can_be_a_tool_under_the_same_policy() -> None:
    add = Tool(
        name="add",
        description="Add two integers.",
        input_schema={
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
            "additionalProperties": False,
        },
        risk_level=RiskLevel.LOW,
        handler=lambda arguments: {"sum": arguments["a"] + arguments["b"]},
    )
    assert add.run('{"a": 2, "b": 3.0}', policy=MaxRiskLevel(RiskLevel.LOW)) == {"sum": 5.0}
    assert asyncio.run(add.acall({"a": 1, "b": 1})) == {"sum": 2}
    with pytest.raises(ValueError, match="not allowed"):
        Tool(
            name="run code",
            description="",
            input_schema={"type": "object"},
            risk_level=RiskLevel.LOW,
            handler=dict,
        )
    with pytest.raises(ValueError, match="unsupported keywords: items"):
        Tool(
            name="t",
            description="",
            input_schema={"type": "object", "properties": {"xs": {"type": "array", "items": {}}}},
            risk_level=RiskLevel.LOW,
            handler=dict,
        )


def test_sandbox_tool_rejects_what_it_cannot_use(box: Sandbox, tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="needs a Sandbox or a Session"):
        sandbox_tool(tmp_path)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least 2000"):
        sandbox_tool(box, max_result_chars=100)
    with pytest.raises(ValueError, match="not allowed"):
        sandbox_tool(box, name="run code")


def test_a_container_with_a_mounted_directory_of_yours_is_not_low_risk(tmp_path: Path) -> None:
    from rewyn_kernel.runtime import ContainerProvider
    from rewyn_kernel.runtime.sandbox import SandboxSpec

    spec = SandboxSpec(network="none", inherit_env=(), workdir=tmp_path)
    assert risk_of(ContainerProvider().isolation(spec), spec) is RiskLevel.MEDIUM
    fresh = SandboxSpec(network="none", inherit_env=())
    assert risk_of(ContainerProvider().isolation(fresh), fresh) is RiskLevel.LOW


def test_a_failure_shows_its_traceback_once(box: Sandbox) -> None:
    """The result's stderr ends with the traceback (as Python prints it); the payload gives it
    in ``error`` only, so it does not take the model's budget twice."""
    tool = sandbox_tool(box)
    payload = tool.run({"code": "import sys\nprint('before', file=sys.stderr)\n1/0"})
    assert payload["error"]["ename"] == "ZeroDivisionError"
    assert "ZeroDivisionError" in payload["error"]["traceback"]
    assert payload["stderr"] == "before\n"
