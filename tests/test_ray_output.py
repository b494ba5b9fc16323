"""The campaign driver's Ray output: plain text off a terminal, printed through Ray's own driver-side
printer (the line a killed actor made in a redirected ``gdnfuzz campaign`` log)."""

from __future__ import annotations

import io

import pytest

from workers.campaign.ray_output import quiet_ray_output


@pytest.fixture
def clean_env(monkeypatch):
    monkeypatch.delenv("RAY_COLOR_PREFIX", raising=False)
    return monkeypatch


def test_off_a_terminal_rays_error_lines_carry_no_colour_codes(clean_env):
    from ray._private.worker import print_worker_logs

    line = {"lines": ["A worker died or was killed while executing a task."], "pid": "raylet", "ip": "127.0.0.1",
            "localhost": "127.0.0.1"}
    before = io.StringIO()
    print_worker_logs(line, before)
    assert "\x1b[" in before.getvalue()  # what a redirected campaign log held
    assert quiet_ray_output() == {"RAY_COLOR_PREFIX": "0"}  # pytest's stdout is no terminal
    after = io.StringIO()
    print_worker_logs(line, after)
    assert after.getvalue() == "(raylet) A worker died or was killed while executing a task.\n"


def test_what_the_user_set_stays(clean_env):
    clean_env.setenv("RAY_COLOR_PREFIX", "1")
    assert quiet_ray_output() == {}
