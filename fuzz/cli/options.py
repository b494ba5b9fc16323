"""Flags several subcommands share, defined once."""

from __future__ import annotations

import argparse
import difflib
import os
from pathlib import Path

from fuzz.model.checkout import BRANCH_PREFIX
from fuzz.model.deadline import DEADLINE_ENV, DEFAULT_DEADLINE_S, check_deadline, set_deadline
from fuzz.model.policies import BUILTINS, Policy, PolicyError, resolve_policy
from fuzz.oracle.verdict import FailOn, default_fail_on, fail_on_choices, finding_classes
from fuzz.search.profiles import DEFAULT_PROFILE, MIXED, PROFILE_NAMES, PROFILES, max_steps_of_profile
from fuzz.search.settings import DEFAULT_CRASHES, default_crashes


class DefaultsFormatter(argparse.HelpFormatter):
    """``--help`` appends ``(default: X)`` unless the help already says it or there is none worth saying."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if (not action.option_strings or "default" in text or action.default is argparse.SUPPRESS
                or action.default is None or action.default is False or action.default == []):
            return action.help
        return f"{text} (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """``gdnfuzz``'s parsers: :class:`DefaultsFormatter` unless told otherwise (subcommands inherit it)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", DefaultsFormatter)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]


DEFAULT_CANDIDATE = "vllm"  # every subcommand's: the installed vLLM, the code a user is working on
SPEC_FORMS = "module:attr, file.py:attr, a vLLM checkout directory or branch:DIR"


def check_policy_spec(flag: str, text: str) -> None:
    """A spec that can only be an unknown name is bad input at once (with the nearest built-ins), before any
    vLLM import; every other form is checked where it is loaded (``resolve_policy``)."""
    if text in BUILTINS or ":" in text or text.startswith(BRANCH_PREFIX) or Path(text).is_dir():
        return
    near = difflib.get_close_matches(text, BUILTINS, n=2, cutoff=0.6)
    hint = f" (did you mean {' or '.join(near)}?)" if near else ""
    raise PolicyError(f"{flag}: unknown policy {text!r}{hint}: use a built-in ({', '.join(BUILTINS)}), {SPEC_FORMS}")


def check_policy_options(args: argparse.Namespace) -> None:
    """:func:`check_policy_spec` over every policy option the subcommand has (``add_policy_option``)."""
    for flag, dest in getattr(args, "policy_options", ()):
        value = getattr(args, dest)
        if value is not None:
            check_policy_spec(flag, value)


def complete_policy(prefix: str, **kwargs: object) -> list[str]:
    """Shell completion of a policy option: the built-in names, then files and directories."""
    from argcomplete.completers import FilesCompleter

    return [name for name in BUILTINS if name.startswith(prefix)] + list(FilesCompleter()(prefix, **kwargs))


def add_policy_option(p: argparse.ArgumentParser, flag: str, help: str, **kwargs: object) -> None:
    """A policy option, checked by :func:`check_policy_options` before the subcommand runs; :func:`complete_policy`."""
    action = p.add_argument(flag, metavar="POLICY", help=help, **kwargs)  # type: ignore[arg-type]
    action.completer = complete_policy  # type: ignore[attr-defined]
    p.set_defaults(policy_options=(*(p.get_default("policy_options") or ()), (flag, action.dest)))


def add_policy_args(p: argparse.ArgumentParser) -> None:
    add_policy_option(p, "--candidate", default=DEFAULT_CANDIDATE,
                      help=f"split policy under test (default {DEFAULT_CANDIDATE}: the installed vLLM's own split; "
                           "see `gdnfuzz policies`)")
    add_policy_option(p, "--reference", default="vllm", help="reference split policy (default vllm)")


def add_store_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--corpus", default=os.environ.get("GDNFUZZ_CORPUS", "corpus"),
                   help="corpus root ($GDNFUZZ_CORPUS, default corpus): its committed seeds/ and regressions/ are "
                        "only read; libFuzzer's working queue is its queue/ (git-ignored)")
    p.add_argument("--crashes", default=str(default_crashes()),
                   help=f"crash store, written ($GDNFUZZ_CRASHES, default {DEFAULT_CRASHES}: git-ignored)")


def add_fail_on_arg(p: argparse.ArgumentParser) -> None:
    classes = "; ".join(f"{c.name} ({c.description})" for c in finding_classes())
    p.add_argument("--fail-on", type=FailOn, choices=fail_on_choices(), default=default_fail_on(),
                   help=f"which findings fail the command: {classes}; or any (default {default_fail_on()})")


def add_profile_arg(p: argparse.ArgumentParser) -> None:
    shapes = "; ".join(f"{name} ({profile.doc})" for name, profile in PROFILES.items())
    p.add_argument("--profile", choices=PROFILE_NAMES, default=DEFAULT_PROFILE,
                   help=f"the workload shape generation is weighted toward: {MIXED} (every profile below, each "
                        f"input drawn under one, in shares that follow what each finds per second); or one "
                        f"alone: {shapes} (default {DEFAULT_PROFILE})")


def add_search_args(p: argparse.ArgumentParser) -> None:
    """``--profile`` and ``--max-steps``, as ``run`` and the campaign take them."""
    add_profile_arg(p)
    p.add_argument("--max-steps", type=positive_int, default=None,
                   help="drop mutations whose requests, run one after another, take more scheduler steps "
                        "(the structural -max_len; default: the profile's, "
                        + ", ".join(f"{n} {max_steps_of_profile(n)}" for n in PROFILE_NAMES) + ")")


def max_steps_of(args: argparse.Namespace) -> int:
    """``--max-steps``, else the profile's bound."""
    return args.max_steps or max_steps_of_profile(args.profile)


def add_deadline_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--deadline", type=_seconds, default=None, metavar="S",
                   help=f"seconds one run of a scenario may take before it is a `hang` finding (default "
                        f"${DEADLINE_ENV}, else {DEFAULT_DEADLINE_S:g} on sim and kernels, the engine tier's own "
                        "timeout there)")


def apply_deadline(args: argparse.Namespace) -> None:
    """Put ``--deadline`` in force for this process and the processes it starts."""
    if args.deadline is not None:
        set_deadline(args.deadline)


def _seconds(text: str) -> float:
    """argparse's type for ``--deadline``: a bad value is argparse's one-line usage error (exit 2)."""
    try:
        return check_deadline(float(text), "--deadline")
    except ValueError:  # InputError is one
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}") from None


def positive_int(text: str) -> int:
    """argparse's type for a count that must be at least 1 (a bad value: one-line usage error, exit 2)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}")
    return value


def policies_of(args: argparse.Namespace) -> tuple[Policy, Policy]:
    """The candidate and reference the user named (a bad one raises PolicyError, exit 2)."""
    return resolve_policy(args.candidate), resolve_policy(args.reference)
