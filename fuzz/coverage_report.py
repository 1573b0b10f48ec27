"""Line coverage of the pure twins reached by a corpus: replays every input of the given folders
through fuzz/oracles.py (both backends) under the standard library's tracer.

    python fuzz/coverage_report.py fastcgi /tmp/corpus/fastcgi [more folders...]

Prints, for the pure decoding code the codec runs (the parser and decoder functions, not the
encoders or module set-up), the lines run and the total, and the lines never run. The compiled
twins have no line counts; they are compared with the pure ones on every input.
"""
import os
import sys
import trace

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from flupfast import body  # noqa: E402
from flupfast.protocols import ajp, fastcgi, scgi, uwsgi  # noqa: E402
from fuzz import oracles  # noqa: E402
from tests.conftest import COMPILED, PURE  # noqa: E402

# The decoding code of each codec: functions and classes (all their methods).
DECODERS = {
    'fastcgi': [fastcgi.decode_params, fastcgi.FastCGIParser],
    'scgi': [scgi.decode_request, scgi._decode_headers, scgi.parse_content_length],
    'uwsgi': [uwsgi.decode_uwsgi_request, uwsgi._decode_vars],
    'ajp': [ajp.AJPParser, ajp._bad_magic, ajp._truncated, ajp._string,
            ajp.parse_content_length, ajp.decode_forward_request, ajp.decode_body_chunk],
    'input_stream': [body.InputStream],
}


def _code_lines(code):
    lines = {line for _, _, line in code.co_lines() if line is not None}
    lines.discard(code.co_firstlineno)  # the def line runs at import
    for const in code.co_consts:
        if hasattr(const, 'co_lines'):
            lines |= _code_lines(const)
    return lines


def decoding_lines(codec):
    """(file name, the lines of its decoding code)."""
    lines = set()
    for target in DECODERS[codec]:
        functions = [v for v in vars(target).values()] if isinstance(target, type) else [target]
        for function in functions:
            function = getattr(function, 'fget', function)  # properties
            code = getattr(function, '__code__', None)
            if code is not None:
                lines |= _code_lines(code)
                filename = code.co_filename
    return filename, lines


def main(codec, folders):
    inputs = []
    for folder in folders:
        for name in sorted(os.listdir(folder)):
            with open(os.path.join(folder, name), 'rb') as saved:
                inputs.append(saved.read())
    tracer = trace.Trace(count=1, trace=0)
    for data in inputs:
        tracer.runfunc(oracles.run_input, codec, PURE, COMPILED, data)
    counts = tracer.results().counts
    path, lines = decoding_lines(codec)
    run = {line for (filename, line) in counts if filename == path} & lines
    print('%s: %d inputs; %s decoding code: %d of %d lines run (%.0f%%); not run: %s'
          % (codec, len(inputs), os.path.relpath(path, ROOT), len(run), len(lines),
             100.0 * len(run) / len(lines), ', '.join(map(str, sorted(lines - run))) or 'none'))

if __name__ == '__main__':
    main(sys.argv[1], sys.argv[2:])
