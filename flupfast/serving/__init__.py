"""Protocol-blind serving modes (single, threaded, prefork), signal policy and sockets."""
