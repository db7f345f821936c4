"""The defaults every entry point shares (the Luigi tasks, ``gemm-tune``, the stage workers), each named once.

A margin is the fraction by which one time must beat another: 0.02 is 2%. The three margins are separate
settings because they decide separate things: ``TUNE_MARGIN`` what Bench crowns (part of the stack
fingerprint, so a change tunes again), ``GATE_MARGIN`` what Validate keeps (not in the fingerprint: tightening
the gate re-judges the same measurements' rows without tuning again), ``LOGIC_MARGIN`` when merged logic
replaces a base entry (the ``faster`` policy).
"""

TUNE_MARGIN = 0.02
GATE_MARGIN = 0.02
LOGIC_MARGIN = 0.02
