"""A traced program that receives SIGTERM in the middle of the tracer's batch write (test of
probes.signals): the trace file's object is wrapped so that its ``writelines`` sends the signal after
the batch's first line, the way a signal sent to the process reaches it at any point of a write."""
import os
import signal

import torch

from probes import activate

x = torch.ones(4)
for _ in range(3):
    x = x + 1
tracer = next(p.tracer for p in activate._state.get("probes", []) if hasattr(p, "tracer"))
tracer.flush()
tracer._ensure_open()


class MidWrite:
    def __init__(self, real):
        self.real = real

    def writelines(self, lines):
        for i, line in enumerate(lines):
            if i == 1:
                os.kill(os.getpid(), signal.SIGTERM)  # the handler is due at the next bytecode
            self.real.write(line)

    def __getattr__(self, name):
        return getattr(self.real, name)


tracer.file = MidWrite(tracer.file)
for _ in range(5):
    x = x * 2
tracer.flush()
print("not stopped")
