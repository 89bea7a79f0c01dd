"""Stage 1, capture: plan and run the passes of ``forensics kernel`` and lay out the capture directory.

``kernel`` runs the passes, ``passes`` plans their argv/env, ``directory`` reads a capture directory
back (the contract with the judge stage), ``environment`` records the machine, and
``example_workload`` is the bundled TE-style example.
"""
