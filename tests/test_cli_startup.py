"""The CLI's start-up: ``--version`` and ``--help`` load no pandas; pandas' two noisy warnings stay quiet."""
from __future__ import annotations

import subprocess
import sys


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_version_and_help_load_no_pandas():
    out = _run("import sys\nfrom forensics import cli\n"
               "for a in (['--version'], ['--help']):\n"
               "    try: cli.app(args=a, prog_name='forensics', standalone_mode=True)\n"
               "    except SystemExit: pass\n"
               "cli._quiet_pandas_warnings()\n"
               "print('pandas' in sys.modules)")
    assert out.splitlines()[-1] == "False"


def test_pandas_warnings_are_quiet_without_importing_their_classes():
    body = ("import warnings\nimport pandas as pd\nfrom forensics import cli\n"
            "with warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('default')\n"
            "    QUIET\n"
            "    df = pd.DataFrame({'a': [1, 2, 3]})\n"
            "    s = df[df.a > 1]\n"
            "    s['b'] = 1\n"
            "    f = pd.DataFrame(index=range(3))\n"
            "    for i in range(150):\n"
            "        f[f'c{i}'] = i\n"
            "print(sorted({x.category.__name__ for x in w}))")
    loud = _run(body.replace("QUIET", "pass"))
    assert "PerformanceWarning" in loud  # the program really provokes it
    assert _run(body.replace("QUIET", "cli._quiet_pandas_warnings()")) == "[]"
