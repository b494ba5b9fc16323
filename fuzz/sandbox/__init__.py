"""Candidate code runs in child processes of its own; the process that decides a verdict runs the
scheduler, the runner mirror, the audit and the judge, and takes only a candidate's answers from them.

``containment``: the keeper around each child (a session of its own, a kill that reaches all it started,
no writes outside a scratch directory where the kernel allows it); ``channel``: a child spoken to in
JSON lines, every wait bounded; ``views``: the scheduler and request as a sandboxed split reads them;
``child``: the sandbox child's main (loads one policy, answers its split calls); ``remote``: the split as
the deciding process calls it; ``scope``: the deciding scope every process that resolves a user's
policy opens (``fuzz.model.placement``).
"""
