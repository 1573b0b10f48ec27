"""The scenarios: what is asked of the servers, how often, through what, and what counts as a
right answer. hello.py, transfers.py (upload, download), syscalls.py: the direct
measurements; fastcgi.py, scgi.py, ajp.py: the direct parts per protocol; behind_fronts.py:
hello, sleep, cpu, upload and download through nginx and Apache; instructions.py: callgrind.
They start servers (bench.servers) and fronts (bench.fronts), drive them (bench.drivers)
and fill the results dict; the report renders it. The peers part: cells.py (one server behind one
front per setting, the sweep), peers.py (what a user would pick instead), seeds.py (the seeds'
named scenarios 000, 001, 002, 004)."""
