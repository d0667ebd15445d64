"""Run a `tokenmix` command on an emulated processor without AVX-512, to check that pinned rows reproduce
bitwise on another kind of x86 host.

    python scripts/emulated_host.py [--cpu EPYC-Rome] -- compare --config experiments/... --mixers linear ...

The command runs under qemu's user-mode emulator (Debian's ``qemu-user``) with the CPU model ``--cpu``
(default ``EPYC-Rome``: AMD, AVX2 and FMA, no AVX-512), and so does every process it spawns (the sweep's runs):
multiprocessing's interpreter is set to a wrapper that starts Python under the same emulator. torch then
probes the emulated processor's CPUID, and oneMKL and oneDNN dispatch on it, as they would on such a host;
``host`` in the rows it records shows the emulated ISA. Emulation is slow (a few tens of times the native
time): use it for single rows.
"""

from __future__ import annotations

import argparse
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

_INNER = """
import multiprocessing, sys
multiprocessing.set_executable({wrapper!r})
from tokenmix.cli import main
sys.argv = ["tokenmix"] + {args!r}
sys.exit(main())
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu", default="EPYC-Rome", help="qemu CPU model (default: EPYC-Rome, AVX2 without AVX-512)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the tokenmix command and its arguments, after --")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    qemu = shutil.which("qemu-x86_64")
    if qemu is None:
        sys.exit("qemu-x86_64 not found: apt-get install qemu-user")
    python = os.path.realpath(sys.executable)  # the emulator runs the real binary; the venv goes in PYTHONPATH
    paths = [p for p in sys.path if p and Path(p).is_dir()]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    with tempfile.TemporaryDirectory() as folder:
        wrapper = Path(folder) / "python-emulated"
        wrapper.write_text(f'#!/bin/sh\nexec {qemu} -cpu {args.cpu} {python} "$@"\n')
        wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
        inner = _INNER.format(wrapper=str(wrapper), args=command)
        return subprocess.call([str(wrapper), "-c", inner], env=env)


if __name__ == "__main__":
    sys.exit(main())
