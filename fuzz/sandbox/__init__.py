"""Candidate code runs in child processes of its own; the deciding process runs the scheduler, the runner mirror,
the audit and the judge, and takes only a candidate's answers: whole runs' answer tapes (``tape``), checked
call by call, or one exchange a call (``remote``, over ``views``), from contained children (``containment``,
``channel``, ``child``) that a deciding ``scope`` keeps.
"""
