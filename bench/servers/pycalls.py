"""Python-level calls of a server, counted deterministically: run as
``python bench/servers/pycalls.py OUT -- [python -m flupfast's arguments]``, it counts every
Python function call and every C function called from Python (``sys.setprofile`` in every
thread) and, at each SIGUSR2, appends a snapshot {function: calls} as one JSON line to OUT, so
that the difference of two snapshots / the requests between them is the calls per request
(callgrind sees Python only as the interpreter's own functions). In fork mode send SIGUSR2 to
a child (a pool of one: ``--min-spare 1 --max-spare 1 --max-children 1``): it inherited the
handler and the counts, and writes its own snapshot. Slow: never time it.

With ``--opcodes`` before ``--`` it counts the bytecodes each Python function executes instead
(``sys.settrace`` with opcode events): where the eval loop's own time goes, per function.
"""
import collections
import json
import os
import runpy
import signal
import sys
import threading


def main():
    out, args = sys.argv[1], sys.argv[sys.argv.index("--") + 1:]
    opcodes = "--opcodes" in sys.argv[:sys.argv.index("--")]
    counts = collections.Counter()
    lock = threading.Lock()

    def trace(frame, event, arg):
        if event == "call":
            frame.f_trace_opcodes = True
            frame.f_trace_lines = False
        elif event == "opcode":
            code = frame.f_code
            counts["%s:%d:%s" % (os.path.basename(code.co_filename), code.co_firstlineno,
                                 code.co_name)] += 1
        return trace

    def profile(frame, event, arg):
        if event == "call":
            code = frame.f_code
            key = "%s:%d:%s" % (os.path.basename(code.co_filename), code.co_firstlineno,
                                code.co_name)
        elif event == "c_call":
            key = "C:%s.%s" % (getattr(arg, "__module__", None) or
                               type(getattr(arg, "__self__", None)).__name__, arg.__name__)
        else:
            return
        counts[key] += 1  # Counter += under the GIL: one bytecode-level race at worst

    def snapshot(signum, frame):
        with lock, open(out, "a") as f:
            f.write(json.dumps(dict(counts)) + "\n")

    signal.signal(signal.SIGUSR2, snapshot)
    if opcodes:
        threading.settrace(trace)
        sys.settrace(trace)
    else:
        threading.setprofile(profile)
        sys.setprofile(profile)
    sys.argv = ["flupfast"] + args
    runpy.run_module("flupfast", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
