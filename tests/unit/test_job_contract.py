"""The job contract (flupfast/serving/job.py): every protocol's connection keeps it, a
flup-style job class is wrapped once at the edge, and the modes ask nothing else of a job."""
import ast
import pathlib
import socket

import pytest

from flupfast.ajp_connection import AJPConnection
from flupfast.fastcgi_connection import FastCGIConnection
from flupfast.scgi_connection import SCGIConnection
from flupfast.serving import job as job_module
from flupfast.serving.job import END, WAIT, FlupJob, Job, JobSource, job_factory
from flupfast.serving.prefork import ChildDrain
from flupfast.serving.single import SingleMode

SERVING = pathlib.Path(job_module.__file__).parent


@pytest.mark.parametrize('connection_class', [FastCGIConnection, SCGIConnection, AJPConnection])
def test_every_connection_keeps_the_contract(connection_class):
    assert issubclass(connection_class, Job)
    assert job_factory(connection_class) is connection_class  # not wrapped: no cost


class FlupStyle:
    """A user's own jobClass as flup knows it: run() and nothing else."""

    def __init__(self, sock, addr, tag):
        self.sock = sock
        self.tag = tag

    def run(self):
        self.sock.close()


def test_a_flup_job_is_wrapped_once_and_counts_one_request():
    ours, theirs = socket.socketpair()
    with ours:
        job = job_factory(FlupStyle)(theirs, None, 'x')
        assert isinstance(job, FlupJob) and job.job.tag == 'x'
        assert job.on_idle(job, True) is WAIT and not job.idle and not job.can_park
        assert job.run() == 1
        assert ours.recv(1) == b''


def test_refusing_a_flup_job_closes_its_socket():
    ours, theirs = socket.socketpair()
    with ours:
        job_factory(FlupStyle)(theirs, None, 'x').refuse_overloaded()
        assert ours.recv(1) == b''


def test_a_mode_keeps_the_job_class_as_given():
    """flup's ``_jobClass`` reads back what was set; the mode builds jobs through the wrap."""
    source = JobSource()
    source.job_class = FlupStyle
    assert source.job_class is FlupStyle and source.new_job is not FlupStyle
    source.job_class = SCGIConnection
    assert source.new_job is SCGIConnection


class Served(Job):
    def __init__(self, served):
        self.served = served


def test_single_mode_ends_an_idle_job_only_once_stopped():
    mode = SingleMode(None)
    mode.keep_going = True
    assert mode._on_idle(Served(1), True) is WAIT
    mode.keep_going = False
    assert mode._on_idle(Served(0), False) is END


def test_a_draining_child_ends_persistent_connections_not_new_ones():
    drain = ChildDrain()
    assert drain.on_idle(Served(3), False) is WAIT
    drain.draining = True
    assert drain.on_idle(Served(3), False) is END
    assert drain.on_idle(Served(0), False) is WAIT  # its first request is on the way


class Board:
    """ChildBoard's question, answered as told."""

    def __init__(self, exhausted):
        self.exhausted = exhausted

    def pool_exhausted(self):
        return self.exhausted


@pytest.fixture
def listener():
    sock = socket.socket(socket.AF_UNIX)
    sock.bind('')  # an abstract address: nothing on disk
    sock.listen(4)
    with sock:
        yield sock


def test_a_child_keeps_its_connection_unless_a_connection_waits_for_a_busy_pool(listener):
    """A kept connection holds its child: with the pool exhausted (no child idle, none may be
    added) and a connection waiting, the child lets its connection go after the request (and
    takes the waiting one)."""
    job = Served(1)
    assert ChildDrain().may_keep(job)  # no scoreboard (a flup-style child loop): keep
    assert ChildDrain(Board(True), listener).may_keep(job)  # nothing waits
    waiting = socket.socket(socket.AF_UNIX)
    with waiting:
        waiting.connect(listener.getsockname())
        # An idle sibling takes it, or the parent forks one for it.
        assert ChildDrain(Board(False), listener).may_keep(job)
        assert not ChildDrain(Board(True), listener).may_keep(job)
    drain = ChildDrain(Board(False), listener)
    drain.draining = True
    assert not drain.may_keep(job)


def test_a_childs_jobs_get_its_answers(backend):
    """``may_keep`` always; ``on_idle`` once draining: the signal gives it to the job of the
    moment, and the jobs made after it get it too. Until then a job keeps the contract's
    default (which the compiled connections answer without a call). Both twins of the
    child's job factory (ChildJobs)."""
    ours, theirs = socket.socketpair()
    with ours, theirs:
        drain = ChildDrain()
        make_job = backend.ChildJobs(lambda client, addr: Served(1), drain)
        job = make_job(theirs, None)
        assert job.may_keep == drain.may_keep and job.on_idle is Job.on_idle
        assert drain.job is job and drain.client is theirs
        assert job.on_idle(job, False) is WAIT
        drain.on_signal(None, None)
        assert job.on_idle == drain.on_idle and job.on_idle(job, False) is END
        later = make_job(theirs, None)
        assert later.on_idle == drain.on_idle and later.on_idle(later, False) is END


def test_the_board_says_when_the_pool_is_exhausted():
    """No child idle and the parent's ``full`` byte set; either alone is not."""
    from flupfast.serving.prefork import STATUS_BUSY, STATUS_IDLE, ChildBoard
    buffer, full = bytearray(STATUS_BUSY * 3), bytearray(b'\x01')
    assert ChildBoard(buffer, 0, 1, 2, full).pool_exhausted()
    assert not ChildBoard(buffer, 0, 1, 2).pool_exhausted()  # no byte: the pool may grow
    full[0] = 0
    assert not ChildBoard(buffer, 0, 1, 2, full).pool_exhausted()
    full[0] = 1
    buffer[2:3] = STATUS_IDLE
    assert not ChildBoard(buffer, 0, 1, 2, full).pool_exhausted()


def test_no_mode_probes_a_job():
    """Nothing in serving/ asks a job what it has (hasattr/getattr on a job): the contract
    says what it has."""
    for path in SERVING.glob('**/*.py'):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ('hasattr', 'getattr') and node.args
                    and isinstance(node.args[0], ast.Name) and 'job' in node.args[0].id):
                pytest.fail('%s:%d probes a job with %s' % (path, node.lineno, node.func.id))


class _Answering(SCGIConnection):
    """An SCGI connection (``run`` flupfast's own) whose one request is answered "served"."""

    def _serve(self):
        self._sock.sendall(b'served\n')
        self.served = 1


class _Counting(Job):
    def run(self):
        return 7


def test_run_job_runs_a_job_and_hands_a_connection_over(backend, monkeypatch):
    """_impl.run_job is job.run() on both backends; the compiled twin runs a connection whose
    ``run`` is flupfast's own one-line hand-over without it (not through _impl.run_scgi)."""
    from flupfast import _impl
    seen = []
    real = _impl.run_scgi
    monkeypatch.setattr(_impl, 'run_scgi', lambda conn: (seen.append(conn), real(conn))[1])
    assert backend.run_job(_Counting()) == 7
    ours, theirs = socket.socketpair()
    with ours, theirs:
        conn = _Answering(ours, '', object())
        assert backend.run_job(conn) == 1
        assert theirs.recv(16) == b'served\n' and conn.closed
    # (flupfast's own methods are marked for the compiled twins while the compiled backend is
    # the one in use)
    handed_over = backend.name == 'cy' and _impl._speedups is not None
    assert seen == ([] if handed_over else [conn])
