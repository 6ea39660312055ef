"""Import every module under the given packages; print each failure and exit 1 if any failed.

Run by .ci/run in the lowest-versions venv: a module that uses an API its declared dependency
floor lacks fails here at import, whatever the tests cover.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import traceback


def main(packages: list[str]) -> int:
    failed: list[str] = []
    count = 0
    for name in packages:
        root = importlib.import_module(name)
        names = [name]
        found = pkgutil.walk_packages(root.__path__, prefix=f"{name}.")
        # A __main__ module runs its program when imported: it is not a library module.
        names += [m.name for m in found if not m.name.endswith(".__main__")]
        for module in names:
            count += 1
            try:
                importlib.import_module(module)
            except Exception:
                failed.append(module)
                print(f"FAIL {module}", file=sys.stderr)
                traceback.print_exc(limit=-3)
    print(f"imported {count - len(failed)} of {count} modules under {', '.join(packages)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["bot", "tools", "adapters"]))
