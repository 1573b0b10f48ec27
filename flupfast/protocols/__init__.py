"""Sans-IO protocol codecs (pure Python): bytes in, events out.

Nothing here touches a socket, a thread, a signal or WSGI. The compiled twins in
``flupfast._speedups`` have the same names and raise the same errors.
"""
