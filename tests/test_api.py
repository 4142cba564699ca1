"""The public surface: the spec's examples, the spec model, names that must not move."""

from __future__ import annotations

import asyncio
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


def test_public_names_are_pinned() -> None:
    assert sorted(runtime.__all__) == runtime.__all__
    assert sorted(sandbox_module.__all__) == sandbox_module.__all__
    assert set(runtime.__all__) >= {"create", "acreate", "sandbox", "SandboxResult", "SandboxSpec"}
    assert set(sandbox_module.__all__) >= {
        "Sandbox",
        "SandboxProvider",
        "SandboxResult",
        "SandboxSpec",
        "SubprocessSandbox",
        "acreate",
        "create",
        "set_default_provider",
    }
    for name in sandbox_module.__all__:
        assert getattr(sandbox_module, name) is not None
