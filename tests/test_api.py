"""The public surface: the spec's examples, the spec model, names that must not move."""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable
from pathlib import Path

import pydantic
import pytest

import rewyn_kernel.runtime.sandbox as sandbox_module
from rewyn_kernel import runtime
from rewyn_kernel.errors import SandboxClosedError
from rewyn_kernel.runtime import create, sandbox
from rewyn_kernel.runtime.sandbox import (
    DEFAULT_INHERIT_ENV,
    Sandbox,
    SandboxProvider,
    SandboxSpec,
    SubprocessProvider,
    SubprocessSandbox,
)

pytestmark = pytest.mark.providers("subprocess")


def test_minimal_example_prints_45_and_exit_code_0(capsys: pytest.CaptureFixture[str]) -> None:
    result = create().execute("print(sum(range(10)))")
    print(result.stdout, result.exit_code)
    assert capsys.readouterr().out == "45\n 0\n"
    assert result.ok
    assert result.ending == "completed"
    assert len(result.code_hash) == 64


def test_production_example_runs_as_written(tmp_path: Path) -> None:
    async def scenario() -> None:
        box = create(
            timeout=15.0,
            network="none",
            memory_limit_mb=512,
            env={"DATA_DIR": str(tmp_path)},
            inherit_env=[],
        )
        generated_code = "import os\nprint(os.environ['DATA_DIR'])"
        result = await box.aexecute(generated_code)
        assert result.exit_code == 0, result.stderr[:2000]
        assert not result.timed_out
        assert result.stdout == f"{tmp_path}\n"
        await box.aclose()

    asyncio.run(scenario())


def test_execute_works_inside_a_running_event_loop() -> None:
    async def cell() -> str:
        return create().execute("print('inside a loop')").stdout

    assert asyncio.run(cell()) == "inside a loop\n"


def test_one_shot_execute_keeps_nothing_between_calls(make_box: Callable[..., Sandbox]) -> None:
    box = make_box()
    assert box.execute("x = 1").ok
    result = box.execute("print(x)")
    assert result.exit_code == 1
    assert result.error is not None
    assert result.error.ename == "NameError"


def test_session_keeps_state(make_box: Callable[..., Sandbox]) -> None:
    with make_box().session() as session:
        session.execute("x = 1")
        assert session.execute("print(x)").stdout == "1\n"
        value = session.execute("x + 41")
        assert [o.data["text/plain"] for o in value.outputs] == ["42"]
        assert value.outputs[0].output_type == "execute_result"


@pytest.mark.parametrize(
    ("fields", "fragment"),
    [
        ({"timeout": -1}, "greater than 0"),
        ({"network": "maybe"}, "'none' or 'allow'"),
        ({"memory_limit_mb": 1}, "greater than or equal to 32"),
        ({"env": {"1BAD": "x"}}, "not allowed"),
        ({"env": {"OK": "a\0b"}}, "NUL"),
        ({"inherit_env": "PATH"}, "list of names"),
        ({"inherit_env": ["A B"]}, "not a variable name"),
        ({"workdir": "/does/not/exist"}, "not an existing directory"),
        ({"output_limit_bytes": 10}, "greater than or equal to 1024"),
        ({"tiemout": 3}, "Extra inputs are not permitted"),
    ],
)
def test_invalid_spec_fails_at_construction_saying_what_is_allowed(
    fields: dict[str, object], fragment: str
) -> None:
    with pytest.raises(pydantic.ValidationError, match=fragment):
        SandboxSpec.model_validate(fields)


def test_create_rejects_bad_values_before_starting_anything() -> None:
    with pytest.raises(pydantic.ValidationError, match="timeout"):
        create(timeout=0)


def test_create_merges_keywords_over_a_spec(make_box: Callable[..., Sandbox]) -> None:
    spec = SandboxSpec(timeout=5, memory_limit_mb=64)
    box = make_box(spec=spec, timeout=7)
    assert box.spec.timeout == 7
    assert box.spec.memory_limit_mb == 64


def test_default_inherit_list_is_short_and_holds_no_secrets() -> None:
    assert SandboxSpec().inherit_env == DEFAULT_INHERIT_ENV
    assert len(DEFAULT_INHERIT_ENV) <= 6
    for name in DEFAULT_INHERIT_ENV:
        assert not any(word in name for word in ("KEY", "TOKEN", "SECRET", "PASS", "HOME"))


def test_spec_summary_never_holds_env_values() -> None:
    summary = SandboxSpec(env={"API_KEY": "hunter2"}).summary()
    assert "hunter2" not in repr(summary)
    assert summary["env_names"] == ["API_KEY"]


def test_set_default_provider_is_used_by_create() -> None:
    provider = SubprocessProvider()
    sandbox.set_default_provider(provider)
    try:
        box = create()
        assert box.provider is provider
        box.close()
    finally:
        sandbox.set_default_provider(None)
    with pytest.raises(TypeError):
        sandbox.set_default_provider("docker")  # type: ignore[arg-type]


def test_closed_sandbox_says_so(make_box: Callable[..., Sandbox]) -> None:
    box = make_box()
    workdir = box.workdir
    assert workdir.is_dir()
    box.close()
    box.close()
    assert not workdir.exists()
    with pytest.raises(SandboxClosedError, match="create a new one"):
        box.execute("1")
    with pytest.raises(SandboxClosedError):
        box.session()


def test_context_managers_close() -> None:
    with create() as box:
        assert box.execute("print(2)").stdout == "2\n"
    assert box.closed

    async def scenario() -> None:
        async with await runtime.acreate() as abox:
            assert (await abox.aexecute("print(3)")).stdout == "3\n"
        assert abox.closed

    asyncio.run(scenario())


def test_protocols_are_satisfied() -> None:
    provider = SubprocessProvider()
    assert isinstance(provider, SandboxProvider)
    with provider.create() as box:
        assert isinstance(box, SubprocessSandbox)
        assert isinstance(box, Sandbox)


PUBLIC: dict[str, list[str]] = {
    "rewyn_kernel": ["__version__", "load_ipython_extension", "unload_ipython_extension"],
    "rewyn_kernel.errors": [
        "ForkError",
        "PolicyError",
        "ProtocolError",
        "ProviderUnavailableError",
        "RewynError",
        "SandboxClosedError",
        "SandboxError",
    ],
    "rewyn_kernel.tools": [
        "Approver",
        "MaxRiskLevel",
        "PermissionDecision",
        "PermissionPolicy",
        "RiskLevel",
        "Tool",
        "ToolArgumentsError",
        "to_anthropic",
        "to_openai",
    ],
    "rewyn_kernel.server": ["AgentAuthorizer", "AgentIdentityProvider"],
    "rewyn_kernel.settings": [
        "CONTAINER_CLIS",
        "CONTAINER_ONLY",
        "KERNEL_CLASS",
        "KERNEL_TIMEOUT",
        "KernelSettings",
        "OPTIONS",
        "Option",
        "SANDBOX_SETTINGS",
        "add_options",
        "default_run_log",
        "describe_error",
        "from_options",
        "option_arguments",
        "plain_type",
    ],
    "rewyn_kernel.runtime": [
        "BatchSummary",
        "BubblewrapProvider",
        "BubblewrapSandbox",
        "ContainerProvider",
        "ContainerSandbox",
        "JsonlRunLog",
        "LandlockProvider",
        "Sandbox",
        "SandboxEvent",
        "SandboxPool",
        "SandboxProvider",
        "SandboxResult",
        "SandboxSpec",
        "Session",
        "SubprocessProvider",
        "SubprocessSandbox",
        "acreate",
        "container",
        "create",
        "events",
        "get_default_provider",
        "local_provider",
        "sandbox",
        "sandbox_tool",
        "set_default_provider",
    ],
    "rewyn_kernel.runtime.sandbox": [
        "BaseSandbox",
        "BubblewrapProvider",
        "BubblewrapSandbox",
        "CheckItem",
        "CommFrame",
        "DEFAULT_DISK_MB",
        "DEFAULT_INHERIT_ENV",
        "DEFAULT_MEMORY_MB",
        "DEFAULT_PIDS",
        "Ending",
        "ErrorInfo",
        "ExitInfo",
        "Isolation",
        "LandlockProvider",
        "Payload",
        "RichOutput",
        "Sandbox",
        "SandboxProvider",
        "SandboxResult",
        "SandboxSpec",
        "Session",
        "SubprocessProvider",
        "SubprocessSandbox",
        "WorkerProcess",
        "acreate",
        "create",
        "get_default_provider",
        "local_provider",
        "sandbox_tool",
        "set_default_provider",
    ],
    "rewyn_kernel.runtime.container": [
        "ContainerProvider",
        "ContainerSandbox",
        "DEFAULT_IMAGE",
        "LABEL",
    ],
    "rewyn_kernel.runtime.pool": ["BatchSummary", "Lease", "SandboxPool"],
    "rewyn_kernel.runtime.events": [
        "EVENT_TYPE",
        "EventListener",
        "GRANT_TYPE",
        "JsonlRunLog",
        "NetworkGrant",
        "SandboxEvent",
        "TOOL_CALL_TYPE",
        "TOOL_RESULT_TYPE",
        "ToolCall",
        "ToolResult",
        "add_listener",
        "emit",
        "record_grant",
        "record_tool_call",
        "record_tool_result",
        "remove_listener",
    ],
    "rewyn_kernel.runtime.providers.scripted": [
        "ScriptedProcess",
        "ScriptedProvider",
        "ScriptedSandbox",
        "ScriptedWorker",
    ],
    "rewyn_kernel.kernel.kernelspec": [
        "DISPLAY_NAME",
        "KERNEL_NAME",
        "KernelSettings",
        "build_kernel_dict",
        "default_display_name",
        "install",
        "launches_sandbox_kernel",
        "normalize_kernel_name",
        "write_kernel_spec",
    ],
    "rewyn_kernel.kernel.safety": [
        "FilteredOutput",
        "MAX_SVG_BYTES",
        "MAX_VALUE_BYTES",
        "WIDGET_VIEW_MIME",
        "clean_html",
        "drop_note",
        "filter_bundle",
    ],
    "rewyn_kernel.notebooks.review": [
        "DEFAULT_LIMITS",
        "add_parser",
        "build_notebook",
        "check",
        "compare",
        "convert",
        "install_command",
        "kernel_name_for",
        "limits_of",
        "main",
        "read_log",
        "write_notebook",
    ],
}
"""Every public module and exactly the names it exports: a change here is an API change."""


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_public_names_are_pinned(module: str) -> None:
    imported = importlib.import_module(module)
    assert list(imported.__all__) == PUBLIC[module]
    assert sorted(imported.__all__) == list(imported.__all__)
    for name in imported.__all__:
        assert hasattr(imported, name), name


def test_the_spec_names_its_paths() -> None:
    """The spec's import paths, with the package prefix rewyn replaced by rewyn_kernel."""
    from rewyn_kernel.runtime import ContainerProvider, create, sandbox, sandbox_tool
    from rewyn_kernel.runtime.container import ContainerSandbox
    from rewyn_kernel.tools import MaxRiskLevel, RiskLevel

    assert sandbox.set_default_provider is runtime.set_default_provider
    assert sandbox_module.create is create
    assert ContainerSandbox.__module__.startswith("rewyn_kernel.runtime")
    assert all((ContainerProvider, sandbox_tool, MaxRiskLevel, RiskLevel))
