"""Trust boundaries (issue 34): data never runs code, a candidate's process holds nothing that judges it and
cannot reach past its sandbox, issue text from a bundle is inert, and checkouts are read inside themselves.
``bench/hostile_candidates.py`` runs the same cases against whole commands, before and after."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from bundle_fixtures import write_bundle
from checkout_fixtures import SCHEDULER, make_checkout
from conftest import seed_case
from hostile_fixtures import FORGERIES, forging_file
from lifecycle_fixtures import real_bundle

from fuzz.cli import main
from fuzz.model.policies import PolicyError, resolve_policy
from fuzz.report.issue import MAX_BODY, issue_body, issue_title
from fuzz.sandbox.containment import describe, landlock_abi, process_table
from fuzz.sandbox.scope import deciding
from fuzz.store.bundle import load_bundle

EVIL = """import pathlib
pathlib.Path({marker!r}).write_text("imported")
def split(self, request, num_new_tokens, num_new_local_computed_tokens=0, num_external_computed_tokens=0):
    return num_new_tokens
"""


ROOT = Path(__file__).resolve().parent.parent


def _evil(directory: Path) -> tuple[str, Path]:
    """A policy file that leaves a marker when it is imported; its spec and the marker."""
    marker = directory / "EXECUTED"
    (directory / "evil.py").write_text(EVIL.format(marker=str(marker)))
    return f"{directory / 'evil.py'}:split", marker


@pytest.fixture(scope="module")
def bundle_naming_code(tmp_path_factory) -> tuple[Path, str, Path]:
    """A real bundle whose verdict names a policy file as its candidate and reference."""
    work = tmp_path_factory.mktemp("data")
    spec, marker = _evil(work)
    bundle = real_bundle(work / "crashes")
    verdict = json.loads((bundle / "verdict.json").read_text())
    (bundle / "verdict.json").write_text(json.dumps({**verdict, "candidate": spec, "reference": spec}))
    return bundle, spec, marker


@pytest.mark.parametrize(("argv", "field"), [
    (["export-test", "{bundle}", "--out", "{work}/t.py"], "verdict.json: candidate"),
    (["export-test", "{bundle}", "--candidate", "pre-51113", "--out", "{work}/t.py"], "verdict.json: reference"),
    (["confirm", "{bundle}"], "verdict.json: candidate"),
    (["verify-fixed", "{bundle}", "--tries", "1"], "verdict.json: reference"),
    (["bisect", "{bundle}", "--checkout", "{work}", "--good", "HEAD~1", "--bad", "HEAD"], "verdict.json: reference"),
])
def test_a_policy_a_bundle_names_is_reported_never_loaded(bundle_naming_code, tmp_path, capsys, argv, field):
    bundle, spec, marker = bundle_naming_code
    argv = [a.format(bundle=bundle, work=tmp_path) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{field}: names the policy '{spec}', which is code" in err and f"--{field.split(': ')[1]} '{spec}'" in err
    assert not marker.exists()


def test_a_policy_a_scenario_expects_is_reported_never_loaded(tmp_path, capsys):
    spec, marker = _evil(tmp_path)
    scenario = tmp_path / "scenario.json"
    scenario.write_text(json.dumps({**json.loads(seed_case().read_text()), "expect": {spec: "diverged"}}))
    assert main(["export-test", str(scenario), "--out", str(tmp_path / "t.py")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{scenario}: expect: names the policy '{spec}', which is code" in err
    assert not marker.exists()


def test_a_resumed_campaign_runs_a_policy_its_record_names_only_when_given_again(tmp_path, capsys):
    from workers.campaign.resume import CampaignRecord, write_record

    spec, marker = _evil(tmp_path)
    crashes = tmp_path / "crashes"
    write_record(crashes, CampaignRecord({"candidate": spec, "max_time": 60.0, "fail_on": "correctness",
                                          "stats": str(tmp_path / "stats.jsonl")}, (time.time() - 10,)))
    assert main(["campaign", "--resume", "--crashes", str(crashes)]) == 2
    assert f"campaign.json: arguments.candidate: names the policy '{spec}'" in capsys.readouterr().err
    assert not marker.exists()


def test_a_key_named_twice_is_an_error_naming_file_and_key(tmp_path, capsys):
    scenario = tmp_path / "twice.json"
    scenario.write_text(seed_case().read_text().replace('"requests"', '"seed": 1, "requests"', 1)
                        .replace('{\n', '{"seed": 0,\n', 1))
    assert main(["replay", str(scenario)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{scenario}: <json>: the key 'seed' appears twice in one object" in err


HOSTILE_TEXT = "@octocat <script>alert(1)</script> <!-- gdnfuzz-signature: other --> ``` <b>x</b> "


def test_issue_text_from_a_bundle_is_inert_and_capped(tmp_path):
    bundle = load_bundle(write_bundle(tmp_path / "crashes", "split-at-defer-runs-past", summary=HOSTILE_TEXT * 200_000,
                                      kind=HOSTILE_TEXT, candidate=HOSTILE_TEXT))
    title, body = issue_title(bundle), issue_body(bundle)
    assert len(body) <= MAX_BODY and len(title) <= 256  # a 20 MB summary
    assert "@octocat" not in title and "<" not in title  # "@\u200boctocat": no mention
    rendered = _outside_code(body)  # what GitHub renders as markdown (code it shows as it is)
    assert "@" not in rendered and "<script" not in rendered and "<b>" not in rendered
    assert rendered.count("<!--") == 1 and body.startswith("<!-- gdnfuzz-signature: split-at-defer-runs-past -->")


def _outside_code(body: str) -> str:
    """``body`` without its fenced blocks (one left open runs to the end) and code spans."""
    body = re.sub(r"^(`{3,})[^\n]*\n.*?(^\1$|\Z)", "", body, flags=re.S | re.M)
    return re.sub(r"(`+) .*? \1", "", body)


def test_checkout_readers_refuse_a_link_out_of_the_checkout(tmp_path):
    from fuzz.model.checkout import CheckoutError, changed_files

    outside = tmp_path / "outside.py"
    outside.write_text("SECRET = 1\n")
    root = make_checkout(tmp_path / "linked")
    (root / "vllm" / "v1" / "core" / "stolen.py").symlink_to(outside)
    with pytest.raises(CheckoutError, match=r"stolen.py: a link to .*outside.py, outside the checkout"):
        changed_files(root)  # the work tree a ci report is written from
    with pytest.raises(PolicyError, match="outside the checkout"):
        resolve_policy(f"branch:{root}")
    split_only = tmp_path / "split-only"
    (split_only / SCHEDULER).parent.mkdir(parents=True)
    (split_only / SCHEDULER).symlink_to(outside)
    with pytest.raises(PolicyError, match="outside the checkout"):
        resolve_policy(str(split_only))


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=dev", "-c", "user.email=dev@example.invalid",
                           *args], check=True, capture_output=True, text=True).stdout.strip()


def test_a_base_that_is_not_an_ancestor_of_head_is_a_one_line_warning(tmp_path, capsys):
    repo = make_checkout(tmp_path / "vllm")
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "A")
    _git(repo, "checkout", "-q", "-b", "other")
    (repo / "vllm" / "v1" / "request.py").write_text((repo / "vllm" / "v1" / "request.py").read_text() + "# other\n")
    _git(repo, "commit", "-q", "-am", "C")
    _git(repo, "checkout", "-q", "main")
    (tmp_path / "corpus" / "regressions").mkdir(parents=True)
    assert main(["ci", "--checkout", str(repo), "--base", "other", "--corpus", str(tmp_path / "corpus"),
                 "--fuzz-time", "0", "--out", str(tmp_path / "out"), "--no-strict"]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "--base other" in warnings[0] and "is not an ancestor of HEAD" in warnings[0]


@pytest.mark.slow
def test_a_sandboxed_split_reads_the_scheduler_and_keeps_its_writes_to_itself(tmp_path):
    path = tmp_path / "reader.py"
    path.write_text(
        "def split(self, request, n, a=0, b=0):\n"
        "    seen = self.__dict__ if False else None\n"
        "    self.noted = getattr(self, 'noted', 0) + 1\n"  # kept in the child, for this scheduler's life
        "    request.num_tokens = -5\n"  # a write to the request changes nothing in the deciding process
        "    try:\n        self.reset()\n    except TypeError:\n        called = 0\n"
        # asked directly (a candidate can reach its view's channel): the deciding process reads no dunder
        "    dunder = int('missing' not in self._View__ask({'get': ['self', ['a', '__class__']]}))\n"
        "    return self.deep.value + self.noted + request.num_tokens + called + dunder\n")

    class Deep:
        value = 10

    class Scheduler:
        deep = Deep()

        def reset(self) -> None:
            raise AssertionError("a method of the deciding process's object was called")

    class Request:
        num_tokens = 7

    scheduler, request = Scheduler(), Request()
    with deciding():
        split = resolve_policy(f"{path}:split").split
        assert split(scheduler, request, 100) == 10 + 1 - 5  # deep attribute read on demand, its note 1
        assert split(scheduler, request, 100) == 10 + 2 - 5  # its note on this scheduler kept
        assert split(Scheduler(), request, 100) == 10 + 1 - 5  # another scheduler: a fresh note
    assert request.num_tokens == 7 and not hasattr(scheduler, "noted")


@pytest.mark.slow
def test_a_candidate_writes_only_its_scratch_and_nothing_it_started_outlives_its_scope(tmp_path):
    path = tmp_path / "escapes.py"
    outside = tmp_path / "outside-written"
    listener = socket.socket(socket.AF_UNIX)  # a server of the deciding process's user, as a fork server is
    listener.bind(str(tmp_path / "server.sock"))
    listener.listen(1)
    path.write_text(
        "import os, pathlib, time, ctypes, socket\n"
        "def split(self, request, n, a=0, b=0):\n"
        "    try:\n"
        f"        socket.socket(socket.AF_UNIX).connect({str(tmp_path / 'server.sock')!r})\n"
        "        return 1000\n"
        "    except OSError:\n"
        "        pass\n"
        "    try:\n"
        f"        pathlib.Path({str(outside)!r}).write_text('x')\n"
        "        wrote_outside = 1\n"
        "    except OSError:\n"
        "        wrote_outside = 0\n"
        "    scratch = pathlib.Path(os.environ['TMPDIR'], 'mine')\n"
        "    scratch.write_text('x')\n"
        "    if os.fork() == 0:\n"
        "        os.setsid()\n"
        "        if os.fork() == 0:\n"
        "            ctypes.CDLL(None).prctl(15, b'gdnfuzz-t-dmn', 0, 0, 0)\n"
        "            time.sleep(600)\n"
        "        os._exit(0)\n"
        "    return 10 * wrote_outside + int(scratch.read_text() == 'x') + 100 * int('GITHUB_TOKEN' in os.environ)\n")
    os.environ["GITHUB_TOKEN"] = "not for candidates"
    with deciding():
        got = resolve_policy(f"{path}:split").split(None, None, 1)
        assert _eventually(lambda: _daemons() != [])  # the double-forked, setsid daemon is running
    listener.close()
    assert got == (1 if landlock_abi() else 11)  # no connection, its scratch written; outside only without Landlock
    assert not outside.exists() or not landlock_abi()
    assert _daemons() == []  # the scope's close killed it, through the keeper
    assert "Landlock" in describe()


def test_a_sandbox_child_whose_process_dies_without_closing_it_leaves_no_scratch_directory(tmp_path):
    """A fuzzing worker that libFuzzer ends never closes its sandbox children: each one's keeper, told of its
    parent's death, removes the child's scratch directory once everything the child started is gone."""
    path = tmp_path / "candidate.py"
    path.write_text("def split(self, request, n, a=0, b=0):\n    return n\n")
    scratch_root = tmp_path / "tmp"
    scratch_root.mkdir()
    script = ("import os, sys\nfrom fuzz.model.policies import resolve_policy\nfrom fuzz.sandbox.scope import deciding\n"
              "with deciding():\n    resolve_policy(sys.argv[1])\n    print('up', flush=True)\n    os._exit(0)\n")
    done = subprocess.run([sys.executable, "-c", script, f"{path}:split"], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "TMPDIR": str(scratch_root)}, cwd=ROOT)
    assert done.returncode == 0 and done.stdout.strip() == "up", done.stderr
    assert _eventually(lambda: not list(scratch_root.glob("gdnfuzz-scratch-*")))


def _eventually(condition: Callable[[], bool], seconds: float = 10.0) -> bool:
    end = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


def _daemons() -> list[int]:
    """The test's daemons still alive (a zombie, killed and not yet reaped by init, is not)."""
    return [pid for pid, (_, state, name) in process_table().items()
            if name == "gdnfuzz-t-dmn" and state not in ("Z", "X")]


@pytest.mark.slow
@pytest.mark.parametrize("how", sorted(FORGERIES.keys() - {"judge"}))
def test_a_candidate_that_forges_what_judges_it_still_fails(tmp_path, capsys, how):
    """Each of these forgeries gave exit 0 before issue 34 (bench/hostile_candidates.py --groups forge)."""
    code = main(["replay", str(seed_case()), "--candidate", forging_file(tmp_path, how), "--json"])
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 1 and row["verdict"] == "diverged" and row["side"] == "candidate", row
