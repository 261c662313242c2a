#!/usr/bin/env python3
"""doze-kafka benchmark (`make bench`): the entry point of the package
bench/dozebench/, one module per section (its docstring, and `--help`, say
what each section measures). Worker processes run this file again
(`bench.py _produce ...`)."""

from dozebench.main import main

if __name__ == "__main__":
    main()
