"""Write docs/schemas/*.json, the JSON Schema of each document abdiff reads, from the same
dataclasses abdiff validates with (abdiff/store/validate.py); pydantic is a dev dependency only.

    python scripts/make_schemas.py          # rewrite the files
    python scripts/make_schemas.py --check  # exit 1 if a committed file is out of date
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pydantic import TypeAdapter

from abdiff.store.records import RESULT_SCHEMA, RUN_SCHEMA, Result, RunFile
from abdiff.suites.loader import SuiteFile

FOLDER = Path(__file__).resolve().parents[1] / "docs" / "schemas"
DOCUMENTS = {
    "run.json": (RunFile, f"abdiff run file or baseline ({RUN_SCHEMA})"),
    "result.json": (Result, f"abdiff comparison result ({RESULT_SCHEMA}; changelog: "
                            "docs/reports.md)"),
    "suite.json": (SuiteFile, "abdiff suite (YAML)"),
}


def schema_text(model: type, title: str) -> str:
    schema = TypeAdapter(model).json_schema(mode="validation")
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema, "title": title}
    return json.dumps(schema, indent=1, sort_keys=True) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args()
    stale = []
    for name, (model, title) in DOCUMENTS.items():
        path, text = FOLDER / name, schema_text(model, title)
        if args.check:
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            FOLDER.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    if stale:
        print(f"docs/schemas: {', '.join(stale)} out of date; run python scripts/make_schemas.py",
              file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
