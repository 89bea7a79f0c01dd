"""The op-trace differ that finds the site: readers of traces (``traces``), the first-divergence
walk (``diff``, one rank's in ``walk``), comparability of two runs (``comparability``) and the hand-over of a diff report
to ``forensics kernel`` (``from_report``)."""
