"""The verdict words users read, one vocabulary per question, each word written once here.

The stage that decides a verdict imports its words from this module (and re-exports them under
the names its callers already import); a renderer that colours them, a reader that checks a
report's verdict, a refusal that names one, all use these constants, never a string literal.
docs/verdicts.md says what each word means.

The spellings differ by vocabulary, and stay so: each is part of a JSON report users' scripts
read (``first_divergence.verdict``, ``classification``, ``verdict``) and of documented output. The
differ's words are identifiers (``CONTROL_FLOW``); the others are phrases (``NOT ON PATH``,
``SINGLE-SOURCE``). Prose that names a differ's verdict writes it as the differ does
(``a CONTROL_FLOW divergence``).
"""
from __future__ import annotations

# --------------------------------------------------------------------------- diff: one record pair, one rank
#: outputs differ, inputs matched: this op made the difference
ORIGIN = "ORIGIN"
#: an input differs: a consequence of an earlier difference (or of another rank, for a collective)
RECEIVER = "RECEIVER"
#: the record has no counterpart in the other run
CONTROL_FLOW = "CONTROL_FLOW"
#: outputs differ and no input was recorded: the input test cannot be applied
INPUTS_UNKNOWN = "INPUTS_UNKNOWN"
#: a difference found after a control-flow divergence, once the runs align again
AFTER_CONTROL_FLOW = "AFTER_CONTROL_FLOW"
DIFF_VERDICTS = (ORIGIN, RECEIVER, INPUTS_UNKNOWN, CONTROL_FLOW, AFTER_CONTROL_FLOW)
#: what a divergence's input test rests on (``Divergence.evidence``)
PROVEN, UNPROVEN_EVIDENCE, NO_EVIDENCE = "proven", "unproven", "none"

# --------------------------------------------------------------------------- compare: one site occurrence, two arms
IDENTICAL = "IDENTICAL"
NO_DIFFERENCE_SEEN = "NO DIFFERENCE SEEN"
INPUTS_DIFFER = "INPUTS DIFFER"
SELECTION_DIFFERS = "SELECTION DIFFERS"
SAME_KERNEL_DIFFERENT_BITS = "SAME KERNEL, DIFFERENT BITS"
BITS_DIFFER_KERNEL_UNKNOWN = "BITS DIFFER, KERNEL UNKNOWN"
NO_COUNTERPART = "NO COUNTERPART"
NO_DIGEST = "NO DIGEST"
ARM_CRASHED = "ARM ENDED"
CLASSIFICATIONS = (IDENTICAL, NO_DIFFERENCE_SEEN, INPUTS_DIFFER, SELECTION_DIFFERS, SAME_KERNEL_DIFFERENT_BITS,
                   BITS_DIFFER_KERNEL_UNKNOWN, NO_COUNTERPART, NO_DIGEST, ARM_CRASHED)
#: the discriminator table's status of one captured instance
CLEAN, DIVERGENT, MIXED = "CLEAN", "DIVERGENT", "MIXED"

# --------------------------------------------------------------------------- analyze: one (scope, kernel), the two-instrument rule
NAMED = "NAMED"
#: counts agree, but a descriptor both instruments carry does not: they did not see the same launch
CONFLICT = "CONFLICT"
DISAGREE = "DISAGREE"
SINGLE_SOURCE = "SINGLE-SOURCE"
#: two independent families agree on who ran and how often, but nothing ties their files to one run
#: of one program (no manifest, no process id in overlapping time): an agreement, never a name
AGREE_UNTIED = "AGREE-UNTIED"
ANALYSIS_VERDICTS = (NAMED, AGREE_UNTIED, CONFLICT, DISAGREE, SINGLE_SOURCE)

# --------------------------------------------------------------------------- knob: does an env knob reach the site
ON_PATH, NOT_ON_PATH, UNKNOWN = "ON PATH", "NOT ON PATH", "UNKNOWN"
CANNOT_TELL_STATICALLY = "CANNOT TELL STATICALLY"
#: the grades of dynamic reach, strongest first (docs/commands/knob.md)
REACH_KERNEL = "REACHES (kernel/implementation changed)"
REACH_ALGO = "REACHES (algo or attributes changed, bits unchanged)"
REACH_ALGO_BITS = "REACHES (algo or attributes changed, bits changed)"
REACH_ALGO_BITS_UNKNOWN = "REACHES (algo or attributes changed, bits unknown)"
REACH_BITS = "REACHES (bits only)"
NOT_SEEN = "NOT SEEN"

# --------------------------------------------------------------------------- kernel --rows: batch invariance of a site
BATCH_INVARIANT, BATCH_VARIANT, NOT_CHECKED = "BATCH-INVARIANT", "VARIANT", "NOT CHECKED"

# --------------------------------------------------------------------------- kernel --repeat: determinism of a site
#: every repeat of the kept call in one process gave the same bits (and the program's own call's)
DETERMINISTIC = "DETERMINISTIC"
#: repeats of the same call, same shape, in one process gave different bits
NONDETERMINISTIC = "NONDETERMINISTIC"
#: the repeats agree with each other but not with the program's own call on the same inputs
PROCESS_DEPENDENT = "PROCESS-DEPENDENT"
REPEAT_VERDICTS = (DETERMINISTIC, NONDETERMINISTIC, PROCESS_DEPENDENT, NOT_CHECKED)
