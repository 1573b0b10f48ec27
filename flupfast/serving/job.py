"""The job contract between the serving modes and the connections they run: what a job is,
what ``run()`` returns, and the one question asked between two requests. It must not import
anything of the modes or the protocols: both sides import it.

A job is built per accepted connection as ``job_class(client, addr, *job_args)``:
* ``run()`` serves the connection and returns how many requests it served (an int);
* between two requests (and, for SCGI, before its one request) it asks
  ``on_idle(job, parkable)`` -> WAIT (block for the next request), PARK (return from ``run()``
  with ``parked`` set and the socket open: the mode watches it and calls ``run()`` again once
  it is readable) or END (end the connection). ``parkable``: nothing is buffered, so socket
  readiness is enough to take it up again. The mode sets ``on_idle``; by default a job waits;
* at the end of a request that leaves the connection open, a job whose protocol can tell the
  web server not to reuse it (AJP13's END_RESPONSE) asks ``may_keep(job)``: False closes the
  connection after this request, the web server told first, so no request of its crosses
  the close. The mode sets it; by default a connection may stay;
* while it waits it says ``idle``; a mode interrupts the wait by shutting the socket's read
  side (the blocked receive then sees EOF);
* ``served`` counts its requests so far; ``max_requests`` (None: unlimited) is set by a
  prefork child before ``run()``; ``can_park`` says whether it may ever PARK;
* ``refuse_overloaded()`` answers the first request with the protocol's "overloaded" reply
  (no worker is free) and closes.

flup's jobClass contract (``run()`` returning nothing) is kept at the edge: ``job_factory``
wraps such a class's jobs once, in ``FlupJob``; nothing else looks at what a job has.
"""

__all__ = ["WAIT", "PARK", "END", "Job", "FlupJob", "JobSource", "job_factory", "keep", "run_job",
           "wait"]

# The answers to ``on_idle``; compared by identity.
WAIT = "wait"
PARK = "park"
END = "end"


def wait(job, parkable):
    """The answer when no mode asks: wait for the next request."""
    return WAIT


def keep(job):
    """The answer when no mode asks: the connection may stay for the next request."""
    return True


class Job:
    """The contract's defaults: a job that never parks, waits when idle, may keep its
    connection and is not limited."""

    on_idle = staticmethod(wait)
    may_keep = staticmethod(keep)
    idle = False
    parked = False
    can_park = False
    served = 0
    max_requests = None

    def run(self):
        raise NotImplementedError

    def refuse_overloaded(self):
        raise NotImplementedError


class FlupJob(Job):
    """A flup-style job (only ``run()``, returning nothing) under the contract: it counts as
    one request (flup counts connections), and refusing it "overloaded" closes its socket, as
    flup closes every connection past its limits."""

    __slots__ = ("job", "client")

    def __init__(self, job, client):
        self.job = job
        self.client = client

    def run(self):
        served = self.job.run()
        return 1 if served is None else served

    def refuse_overloaded(self):
        self.client.close()

    def __repr__(self):
        return repr(self.job)


def job_factory(job_class):
    """``job_class`` itself when its jobs keep the contract, else a factory wrapping each of
    its jobs in FlupJob."""
    if isinstance(job_class, type) and issubclass(job_class, Job):
        return job_class

    def make_flup_job(client, addr, *args):
        return FlupJob(job_class(client, addr, *args), client)
    return make_flup_job


class JobSource:
    """What a mode keeps of its job factory: ``job_class`` as given (flup's ``_jobClass``
    reads it back) and ``new_job``, the same made to keep the contract."""

    _job_class = None
    new_job = None

    @property
    def job_class(self):
        return self._job_class

    @job_class.setter
    def job_class(self, value):
        self._job_class = value
        self.new_job = job_factory(value) if value is not None else None


def new_job(job_class, client, addr, args):
    """``job_class(client, addr, *args)``, as a mode builds the job of an accepted connection
    (_impl.new_job). The compiled twin builds a stock SCGI/uwsgi connection without the
    Python frames of its two ``__init__`` (_cython/connection.pxi)."""
    return job_class(client, addr, *args)


def run_job(job):
    """``job.run()``, as a mode runs a job (_impl.run_job). The compiled twin hands a
    connection whose ``run`` is flupfast's own straight to its compiled loop, without the
    Python frame of that one-line ``run``."""
    return job.run()
