import sys
from pathlib import Path

# tests/support holds the stand-in rank (imported by the transport, launcher and report tests) and the
# recording transport (a Session with no coordinator: host-time and host-contention tests)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
