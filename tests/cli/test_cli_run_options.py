"""`weir run` passes its data-path options to the controller: Envoy's workers and where access logs go."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import weir.cli
import weir.controller
from weir.cli import app
from weir.runfolder import default_run_dir

runner = CliRunner()


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Run nothing: record the Options `weir run` builds."""
    seen: dict[str, Any] = {}

    class FakeController:
        def __init__(self, provider: Any, settings: Any, options: weir.controller.Options) -> None:
            seen["options"] = options

    async def run_until_signalled(controller: Any) -> None:
        return None

    monkeypatch.setattr(weir.cli, "_setup_logging", lambda level, fmt="text": None)
    monkeypatch.setattr(weir.controller, "Controller", FakeController)
    monkeypatch.setattr(weir.controller, "run_until_signalled", run_until_signalled)
    return seen


def test_defaults_let_envoy_write_access_logs_itself(tmp_path: Path, captured: dict[str, Any]) -> None:
    result = runner.invoke(app, ["run", "-f", str(tmp_path)])
    assert result.exit_code == 0, result.output
    options = captured["options"]
    assert options.envoy_concurrency is None
    assert options.envoy_access_log_to_stdout is True


def test_envoy_concurrency_and_access_log_through_weirs_log(tmp_path: Path, captured: dict[str, Any]) -> None:
    result = runner.invoke(
        app, ["run", "-f", str(tmp_path), "--envoy-concurrency", "1", "--access-log", "log"]
    )
    assert result.exit_code == 0, result.output
    options = captured["options"]
    assert options.envoy_concurrency == 1
    assert options.envoy_access_log_to_stdout is False


@pytest.mark.parametrize("args", [["--envoy-concurrency", "0"], ["--access-log", "file"]])
def test_bad_values_are_refused(tmp_path: Path, captured: dict[str, Any], args: list[str]) -> None:
    result = runner.invoke(app, ["run", "-f", str(tmp_path), *args])
    assert result.exit_code == 2
    assert "options" not in captured


def test_graceful_stop_and_run_folder_defaults(tmp_path: Path, captured: dict[str, Any]) -> None:
    result = runner.invoke(app, ["run", "-f", str(tmp_path)])
    assert result.exit_code == 0, result.output
    options = captured["options"]
    assert (options.drain_timeout_s, options.shutdown_delay_s, options.envoy_standby) == (5.0, 0.0, False)
    # A lasting run folder per admin address, so that the next weir finds the Envoy left running.
    assert options.run_dir == str(default_run_dir("127.0.0.1", 9900))


def test_graceful_stop_run_folder_and_standby_options(tmp_path: Path, captured: dict[str, Any]) -> None:
    result = runner.invoke(
        app,
        ["run", "-f", str(tmp_path), "--drain-timeout", "25", "--shutdown-delay", "10", "--envoy-standby",
         "--run-dir", str(tmp_path / "run")],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    options = captured["options"]
    assert (options.drain_timeout_s, options.shutdown_delay_s, options.envoy_standby) == (25.0, 10.0, True)
    assert options.run_dir == str(tmp_path / "run")
    # Admin port 0: no address to find the folder again by; a temporary one, Envoy dies with weir.
    result = runner.invoke(app, ["run", "-f", str(tmp_path), "--admin-address", "127.0.0.1:0"])
    assert result.exit_code == 0, result.output
    assert captured["options"].run_dir is None


def test_a_shutdown_delay_longer_than_the_drain_timeout_is_refused(
    tmp_path: Path, captured: dict[str, Any]
) -> None:
    result = runner.invoke(
        app, ["run", "-f", str(tmp_path), "--shutdown-delay", "10", "--drain-timeout", "5"]
    )
    assert result.exit_code != 0
    assert "--shutdown-delay (10 s) must not exceed --drain-timeout (5 s)" in result.output
    assert "options" not in captured
