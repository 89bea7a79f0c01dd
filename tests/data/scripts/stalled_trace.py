"""`forensics ARGS...` whose process stalls right after it has started the traced command, until the
file named by $FORENSICS_TEST_GO exists: what a loaded machine can do to it between the fork and its
next instructions (tests/test_trace_command.py). A signal sent during the stall must still reach the
traced command."""
import os
import subprocess
import sys
import time

_init = subprocess.Popen.__init__


def _stalled_init(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003
    _init(self, *args, **kwargs)
    go, end = os.environ["FORENSICS_TEST_GO"], time.monotonic() + 120
    while not os.path.exists(go) and time.monotonic() < end:
        time.sleep(0.01)


subprocess.Popen.__init__ = _stalled_init
from forensics.cli import main  # noqa: E402

sys.argv = ["forensics", *sys.argv[1:]]
sys.exit(main())
