"""One signal policy for every mode: a handler only records the signal and wakes the loop.

Owns saving, installing and restoring handlers, the wakeup channel, and the stop/reload flags.
It must not act on a signal inside a handler (no I/O beyond the wakeup byte, no locks, no
logging), and never installs handlers outside the main thread.
"""
import os
import signal
import socket
import threading

__all__ = ["LoopControl", "ReloadRequests", "SignalPolicy"]


class SignalPolicy:
    """Handlers plus a wakeup socket the mode's loop polls.

    ``signal.set_wakeup_fd`` makes the C-level handler write a byte to our socket, so a loop
    blocked in select/poll wakes even though PEP 475 retries the call after the Python handler
    ran (prefork-signals: flup's prefork parent ignored SIGTERM while idle).
    """

    def __init__(self):
        self._reader = None
        self._writer = None
        self._saved = None           # [(signum, previous handler)] while installed
        self._old_wakeup_fd = None   # previous wakeup fd while ours is installed

    @property
    def installed(self):
        return self._saved is not None

    def open(self):
        """Create the wakeup socketpair; idempotent."""
        if self._reader is None:
            reader, writer = socket.socketpair()
            # set_wakeup_fd requires a non-blocking fd; the reader is drained without blocking.
            reader.setblocking(False)
            writer.setblocking(False)
            self._reader, self._writer = reader, writer

    def fileno(self):
        """The readable end, for select/selectors; -1 when closed."""
        return -1 if self._reader is None else self._reader.fileno()

    def install(self, handlers):
        """Install ``{signum: handler}``, remembering the previous ones. Returns False (and does
        nothing) outside the main thread, where ``signal.signal`` raises (flup does raise)."""
        if threading.current_thread() is not threading.main_thread():
            return False
        if self._saved is not None:
            self.restore()
        self.open()
        saved = []
        try:
            for signum, handler in handlers.items():
                saved.append((signum, signal.getsignal(signum)))
                signal.signal(signum, handler)
            self._old_wakeup_fd = signal.set_wakeup_fd(
                self._writer.fileno(), warn_on_full_buffer=False)
        except BaseException:
            self._saved = saved
            self.restore()
            raise
        self._saved = saved
        return True

    def restore(self):
        """Put back the handlers and wakeup fd that were in place before ``install``."""
        saved, self._saved = self._saved, None
        if saved is not None:
            for signum, previous in reversed(saved):
                # None means "not installed from Python"; the closest we can restore is SIG_DFL.
                signal.signal(signum, signal.SIG_DFL if previous is None else previous)
        self._restore_wakeup_fd()

    def _restore_wakeup_fd(self):
        old, self._old_wakeup_fd = self._old_wakeup_fd, None
        if old is not None:
            signal.set_wakeup_fd(old)

    def wake(self):
        """Wake the loop from any thread (or from a Python-level handler)."""
        writer = self._writer
        if writer is not None:
            try:
                writer.send(b"\0")
            except OSError:
                pass  # full (a wakeup is already pending) or closed concurrently

    def drain(self):
        """Read every pending wakeup byte; the loop then looks at its flags."""
        reader = self._reader
        if reader is None:
            return
        try:
            while reader.recv(4096):
                pass
        except OSError:
            pass  # BlockingIOError: drained

    def close(self):
        """Close the wakeup socket; first hand the wakeup fd back so no signal writes to a
        closed (or reused) descriptor. Handlers, if any, stay until ``restore``."""
        self._restore_wakeup_fd()
        reader, writer = self._reader, self._writer
        self._reader = self._writer = None
        for sock in (reader, writer):
            if sock is not None:
                sock.close()


class LoopControl:
    """The stop/reload flags every mode's loop checks, and the default handlers that set them."""

    def __init__(self):
        self.keep_going = True
        self.reload_requested = False
        self.signals = SignalPolicy()

    def reset(self):
        """Called at the start of run(): flup resets both flags there (threadedserver.py:63-64)."""
        self.keep_going = True
        self.reload_requested = False

    def stop(self, reload=False):
        """Ask the loop to end; safe from any thread. Like flup's ``_exit``, the first request
        wins (threadedserver.py:125-132)."""
        if self.keep_going:
            self.keep_going = False
            self.reload_requested = reload
        self.signals.wake()

    # Default handlers for standalone (non-facade) use: they only set flags.
    def on_stop_signal(self, signum, frame):
        self.keep_going = False

    def on_reload_signal(self, signum, frame):
        self.reload_requested = True
        self.keep_going = False

    def default_handlers(self):
        """SIGINT/SIGTERM stop, SIGHUP stops and makes run() return True (flup 2.12)."""
        handlers = {signal.SIGINT: self.on_stop_signal, signal.SIGTERM: self.on_stop_signal}
        if hasattr(signal, "SIGHUP"):
            handlers[signal.SIGHUP] = self.on_reload_signal
        return handlers

    def install_signals(self):
        return self.signals.install(self.default_handlers())

    def restore_signals(self):
        self.signals.restore()


class ReloadRequests:
    """SIGHUP outside a server's run(), for the command line, which reloads by running itself
    again: between two runs, and from the new image's start to its first run(), SIGHUP's
    default action would kill the process (a reload under load would lose its requests).

    ``watch`` installs a handler that only records the signal; ``reload_image`` blocks SIGHUP
    across ``execve`` (the mask is inherited, a signal sent meanwhile stays pending) and the new
    image's ``watch`` unblocks it. A SIGHUP while a reload is under way, up to the new image's
    ``mark`` (before it loads the app), is folded into it: the new image loads the code after
    it. One that comes later, while the app loads, is taken when the server runs (a reload
    then); one that arrives while a refused reload's code is checked (after ``mark``) makes the
    check look again (``take``). ``stop_seen``: a stop signal came while a server ran, so its
    reload (flup's run() says True whenever a SIGHUP came) is a stop.
    """

    def __init__(self):
        self._received = False
        self.stop_seen = False  # a stop signal came while a server ran (set by its caller)

    def _on_hup(self, signum, frame):
        self._received = True

    def watch(self):
        if hasattr(signal, "SIGHUP"):
            signal.signal(signal.SIGHUP, self._on_hup)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGHUP})

    def mark(self):
        """The code is (being) loaded now: signals so far are served by it."""
        self._received = False

    def take(self):
        """Whether a SIGHUP arrived since ``mark`` (and forget it)."""
        received, self._received = self._received, False
        return received

    @staticmethod
    def reload_image(path, argv, environ):
        """``os.execve`` with SIGHUP blocked until the new image watches it."""
        if hasattr(signal, "SIGHUP"):
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
        try:
            os.execve(path, argv, environ)
        finally:  # execve failed: this image serves on
            if hasattr(signal, "SIGHUP"):
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGHUP})
