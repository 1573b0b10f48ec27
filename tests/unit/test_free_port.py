"""The suites' port picker (tests/integration/backend_process.free_port): outside the kernel's
ephemeral range, and never a port another test process on the machine holds."""
import subprocess
import sys

from tests.integration import backend_process

HOLDER = '''
import sys
from tests.integration import backend_process
print(' '.join(str(backend_process.free_port()) for _ in range(200)), flush=True)
sys.stdin.read()
'''


def test_ports_are_below_the_ephemeral_range_and_not_handed_out_twice():
    ports = [backend_process.free_port() for _ in range(200)]
    low = backend_process._ephemeral_low()
    assert len(set(ports)) == len(ports)
    if low is not None and low > 4096:
        assert all(1024 <= port < low for port in ports)


def test_a_port_another_test_process_holds_is_not_handed_out_until_it_ends():
    holder = subprocess.Popen([sys.executable, '-c', HOLDER], cwd=backend_process.ROOT,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        held = [int(port) for port in holder.stdout.readline().split()]
        assert len(held) == 200
        assert not any(backend_process._claim(port) for port in held)
    finally:
        holder.stdin.close()
        holder.wait(10)
    assert backend_process._claim(held[0])  # its locks went with it
