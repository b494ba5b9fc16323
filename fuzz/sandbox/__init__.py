"""Candidate code runs in child processes; the process that decides a verdict reads only JSON from them.

``channel``: a child spoken to in JSON lines, every wait bounded; ``child``: the sandbox child's main
(loads policies, runs them on a tier); ``executor``: a tier executor that runs calls involving a
sandboxed policy in its child and turns an exit or a hang there into a fault of that run; ``scope``:
the deciding scope every command opens (``fuzz.model.placement``).
"""
