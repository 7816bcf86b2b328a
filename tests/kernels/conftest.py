"""pytest setup for tests/kernels: run by the interpreter of /opt/dmref-venv
(scripts/deps), with TRITON_INTERPRET=1 (CTest entry `kernels`)."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
