"""Write the documentation's generated parts from the settings declaration (app/config/reference.py):

    python scripts/docs.py

docs/reference/options.md (every option) and the list of llama-server's other flags in
docs/configuration.md. tests/unit/test_docs.py fails when either is out of date.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    sys.path.insert(0, str(ROOT))
    from app.config.reference import CONFIGURATION_PAGE, OPTIONS_PAGE, options_page, with_upstream_section

    (ROOT / OPTIONS_PAGE).write_text(options_page())
    configuration = ROOT / CONFIGURATION_PAGE
    configuration.write_text(with_upstream_section(configuration.read_text()))
    print(f"wrote {OPTIONS_PAGE} and the generated list of {CONFIGURATION_PAGE}")


if __name__ == "__main__":
    main()
