"""Print the configuration reference (markdown), generated from relay/settings.py.

python scripts/gen_settings_reference.py > docs/reference/settings.md
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from relay.settings import reference_markdown

if __name__ == "__main__":
    sys.stdout.write(reference_markdown())
