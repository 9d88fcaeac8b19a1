"""The `ibpath` command line: argument parsing only; the work is in the library."""
