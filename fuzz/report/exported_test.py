"""``gdnfuzz export-test``: a finding as a self-contained pytest file that needs only vLLM and pytest.

The file is ``regression_test_template.py`` (a generic driver: vLLM's real Scheduler and KV-cache
manager, the model runner mirrored over exact states, the asserts) with the finding written into its
``SCENARIO`` and its docstring and test named after the finding. Nothing of gdnfuzz is imported by it.

Invariant: the scenario is written whole (knobs as the vLLM arguments the knob table maps them to,
the requests, the pool and step limit the sim tier used, and for a cost finding what vLLM's reference
split paid), so the file replays exactly the run the finding was judged on.
"""

from __future__ import annotations

import pprint
import re
from pathlib import Path
from typing import Any

from fuzz.model.cost import run_cost
from fuzz.model.knobs import engine_args, scheduler_settings
from fuzz.oracle.efficiency import comparable, costs
from fuzz.oracle.finding import Finding
from fuzz.report.vllm_terms import model_words, serve_command, vllm_locations, vllm_release

TEMPLATE = Path(__file__).with_name("regression_test_template.py")
BEGIN = "# ---------------------------------------------------------------- the finding (written by gdnfuzz export-test)"
END = "# ---------------------------------------------------------------- end of the finding"
TEST_NAME = "test_gdnfuzz_regression"


def _reference_costs(f: Finding) -> dict[str, Any] | None:
    """What vLLM's reference split paid, over the requests both runs compare (a cost finding only)."""
    if not f.finding_class.exact_on_sim or f.reference_run is None:
        return None
    candidate, reference = run_cost(f.minimized, f.candidate_run), run_cost(f.minimized, f.reference_run)
    requests = [r for _, r in comparable(candidate, reference)]
    paid = costs(reference, requests)
    return {"prompt_tokens": {r.request_id: r.prompt_tokens for r in requests},
            "recomputed tokens": paid.recomputed_tokens, "forward passes": paid.forward_passes,
            "steps to first token": paid.steps_to_first_token}


def scenario_data(f: Finding, configuration: dict[str, Any]) -> dict[str, Any]:
    """Everything the test replays, as plain Python data."""
    s, knobs = f.minimized, f.minimized.engine
    data = s.to_dict()
    return {
        "signature": f.signature,
        "seed": s.seed,
        "segments": data["segments"],
        "requests": data["requests"],
        "engine_args": engine_args(knobs),
        "scheduler": scheduler_settings(knobs),
        "step_budgets": list(knobs.step_budgets),
        "attention_block_size": knobs.block_size,
        "prefill_checkpoint_alignment": knobs.prefill_checkpoint_alignment,
        **configuration,
        "reference_costs": _reference_costs(f),
    }


def _docstring(f: Finding) -> str:
    head = f.head
    knobs = f.minimized.engine
    cause = f.verdict.root_cause
    found = f"Found on the split `{f.candidate}` itself" if f.candidate == f.reference else \
        f"Found with the split `{f.candidate}` against `{f.reference}`"
    lines = [f"Regression test for gdnfuzz finding {f.signature}: {head.summary}.", "",
             f"{found}; vLLM {vllm_release()}.", "",
             "Configuration, as vLLM is started for it:", "", f"    {serve_command(knobs)}", ""]
    lines += [f"- {w}" for w in model_words(knobs)]
    if cause is not None:
        lines += ["", f"Root cause: at step {cause.step}, request {cause.request_id} was offered {cause.offered} tokens "
                      f"from position {cause.start}; the split under test scheduled {cause.candidate} where vLLM's "
                      f"scheduled {cause.reference} ({cause.departure}, at vLLM's {cause.decider} stop"
                      + (f", which needs {', '.join(cause.conditions)}" if cause.conditions else "") + ")."]
    lines += ["", "Code involved: " + "; ".join(f"{name} ({where})" for name, where in vllm_locations().items()), "",
              "It drives vLLM's real Scheduler and KV-cache manager through the finding's exact arrivals and per-step",
              "budgets, mirrors what the model runner writes into the Mamba state slots over exact states, and asserts",
              "what the finding broke. It fails while the bug is there and passes once it is fixed: run it with",
              "`pytest <this file>`. Exported by `gdnfuzz export-test`; it imports nothing of gdnfuzz."]
    return '"""' + "\n".join(lines).replace('"""', "'''") + '\n"""'


def render_test(f: Finding, configuration: dict[str, Any]) -> str:
    """The pytest file of finding ``f``, whose sim-tier ``configuration`` (``Executor.configuration``) it replays."""
    template = TEMPLATE.read_text()
    body = template[template.index('"""', 3) + 3:]  # the template's own docstring is replaced
    before, rest = body.split(BEGIN, 1)
    _, after = rest.split(END, 1)
    data = pprint.pformat(scenario_data(f, configuration), width=116, sort_dicts=False)
    name = "test_" + re.sub(r"\W+", "_", f.signature).strip("_")
    text = f"{_docstring(f)}{before}{BEGIN}\nSCENARIO: dict[str, Any] = {data}\n{END}{after}"
    return text.replace(f"def {TEST_NAME}(", f"def {name}(")
