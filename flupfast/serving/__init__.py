"""Protocol-blind serving modes (single, threaded, prefork), their signal policy and socket setup."""
