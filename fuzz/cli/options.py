"""Flags several subcommands share, defined once."""

from __future__ import annotations

import argparse
import difflib
import os
import shutil
from pathlib import Path

from fuzz.model.checkout import BRANCH_PREFIX
from fuzz.model.deadline import check_deadline, set_deadline
from fuzz.model.policies import BUILTINS, Policy, PolicyError, resolve_policy
from fuzz.oracle.verdict import FailOn, default_fail_on, fail_on_choices
from fuzz.search.profiles import DEFAULT_PROFILE, PROFILE_NAMES, max_steps_of_profile
from fuzz.search.settings import default_crashes

HELP_WIDTH = 100  # the widest line ``--help`` writes: a flag, its help and its default, on one line
HELP_COLUMN = 48  # where help starts at the latest: past the longest invocation, ``--profile {mixed,...}``


class DefaultsFormatter(argparse.HelpFormatter):
    """``--help`` appends ``(default: X)`` unless the help already says it or there is none worth saying. Each
    flag is one line: its help starts past the parser's longest invocation (at most :data:`HELP_COLUMN`), and
    lines of up to :data:`HELP_WIDTH` columns are not wrapped, however narrow the terminal."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = HELP_COLUMN,
                 width: int | None = None) -> None:
        width = max(width or shutil.get_terminal_size().columns - 2, HELP_WIDTH)
        super().__init__(prog, indent_increment, max_help_position, width)

    def add_argument(self, action: argparse.Action) -> None:
        """As argparse's, with the subcommands measured at their own indent (argparse counts them one step
        short, so the longest subcommand name would push its help to the next line)."""
        super().add_argument(action)
        if isinstance(action, argparse._SubParsersAction) and action.help is not argparse.SUPPRESS:
            names = [len(self._format_action_invocation(choice)) for choice in action._get_subactions()]
            indent = self._current_indent + self._indent_increment  # where argparse writes them
            self._action_max_length = max(self._action_max_length, max(names, default=0) + indent)

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
    add_policy_option(p, "--candidate", default=DEFAULT_CANDIDATE, help="the split policy under test")
    add_policy_option(p, "--reference", default="vllm", help="the reference split policy")


def add_store_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--corpus", default=os.environ.get("GDNFUZZ_CORPUS", "corpus"),
                   help="corpus root ($GDNFUZZ_CORPUS)")
    p.add_argument("--crashes", default=str(default_crashes()),
                   help="crash store")


def add_fail_on_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--fail-on", type=FailOn, choices=fail_on_choices(), default=default_fail_on(),
                   help="which findings fail the run")


def add_profile_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", choices=PROFILE_NAMES, default=DEFAULT_PROFILE,
                   help="workload shape inputs lean toward")


def add_search_args(p: argparse.ArgumentParser) -> None:
    """``--profile`` and ``--max-steps``, as ``run`` and the campaign take them."""
    add_profile_arg(p)
    p.add_argument("--max-steps", type=positive_int, default=None,
                   help="max scheduler steps per input (default: by profile)")


def max_steps_of(args: argparse.Namespace) -> int:
    """``--max-steps``, else the profile's bound."""
    return args.max_steps or max_steps_of_profile(args.profile)


def add_deadline_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--deadline", type=_seconds, default=None, metavar="S",
                   help="seconds a run may take before `hang` (default: by tier)")


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
