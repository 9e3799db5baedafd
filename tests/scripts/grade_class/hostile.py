"""A hostile submission: reaches for the network, the other students, the grader's files and
the reference, leaves a process behind, then trains with the script handed in beside it."""

import os
import socket
import subprocess
import sys
from pathlib import Path

here = Path.cwd()
for target in (here.parent.parent, Path.home(), Path("/etc/shadow")):
    try:
        print("listing", target, os.listdir(target) if target.is_dir() else target.read_text())
    except OSError as exc:
        print("refused", target, exc.strerror)
try:
    socket.create_connection(("1.1.1.1", 80), timeout=2)
    print("NETWORK REACHED")
except OSError as exc:
    print("refused network", exc.strerror)
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(10**6)"], start_new_session=True)
exec(compile((Path(__file__).parent / "train_copy.py").read_text(), "train_copy.py", "exec"))
