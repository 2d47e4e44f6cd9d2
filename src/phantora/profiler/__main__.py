"""`python -m phantora.profiler OPS... --out DB.jsonl`: `phantora profile` without the launcher's imports."""

import sys

from phantora.profiler.command import main

sys.exit(main())
