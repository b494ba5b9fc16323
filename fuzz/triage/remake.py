"""Re-make crash bundles with today's code: each ``original.json`` judged and minimized again, stored anew.

Invariant: old bundles are only read; new ones go to another directory under today's signatures (two old bundles of
one finding become one), and an input that no longer reproduces is reported, not stored."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fuzz.model.policies import resolve_policy
from fuzz.model.scenario import scenario_summary
from fuzz.oracle.verdict import FailOn
from fuzz.reduce.minimize import minimize_raw_bundle, signature_of
from fuzz.report.finding_report import store_finding
from fuzz.store.bundle import load_bundle


@dataclass(frozen=True)
class Remade:
    """An old bundle and what it became: the new signature (``clean``: nothing), original and minimized sizes."""

    old: str
    new: str
    original: dict[str, int]
    minimized: dict[str, int] | None
    timed_out: bool


def remake(bundles: list[Path], out: Path, seconds: float) -> list[Remade]:
    """Each of ``bundles`` re-made into ``out`` (module docstring), minimized for at most ``seconds``."""
    made = []
    for path in bundles:
        bundle = load_bundle(path)
        v = bundle.verdict
        fail_on = FailOn(v.get("fail_on") or v["class"])
        sig = signature_of(bundle.original, resolve_policy(v["candidate"]), resolve_policy(v["reference"]),
                           fail_on=fail_on)
        finding = None if sig == "clean" else minimize_raw_bundle(path, sig, v["candidate"], v["reference"],
                                                                     seconds, fail_on)
        if finding is not None:
            store_finding(finding, out, None)
        made.append(Remade(bundle.signature, sig, scenario_summary(bundle.original),
                           None if finding is None else scenario_summary(finding.minimized),
                           finding is not None and finding.timed_out))
    return made
