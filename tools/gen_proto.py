"""Generate the Python gRPC code in ``libs/xmc_api`` from the ``.proto`` files in ``proto/``.

Why a script rather than a bare ``protoc`` call: the generated modules are committed, so the
output must be reproducible on every machine. This runs the ``grpc_tools`` protoc that the
project pins (it decides the bytes of the ``*_pb2.py`` files), in-process, over a sorted list
of inputs, into a freshly emptied directory, and adds the package files (``__init__.py``,
``py.typed``) protoc does not write. The include path comes from the installed packages
(grpc_tools' bundled well-known types and googleapis-common-protos' ``google/api`` and
``google/longrunning`` sources), never from a hard-coded location.

One wrinkle: googleapis-common-protos ships the long-running operations source as
``google/longrunning/operations_proto.proto`` while its generated ``operations_proto_pb2``
registers that file in the descriptor pool as ``google/longrunning/operations.proto``. A
generated module's dependencies are looked up in the pool by file name, so our protos import
``google/longrunning/operations.proto`` and this script stages the shipped source under that
name in a temporary include dir (after checking the registered name still matches).

Usage::

    python tools/gen_proto.py           # regenerate libs/xmc_api
    python tools/gen_proto.py --check   # exit 1 if libs/xmc_api is stale against proto/
"""

from __future__ import annotations

import argparse
import filecmp
import importlib
import importlib.resources
import importlib.util
import shutil
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

REPO_ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = REPO_ROOT / "proto"
LIBS_DIR = REPO_ROOT / "libs"
PACKAGE = "xmc_api"
IGNORED_NAMES = frozenset({"__pycache__"})
# Proto file name our imports use -> (file googleapis-common-protos ships, module registering it).
STAGED_ALIASES = {
    "google/longrunning/operations.proto": (
        "google/longrunning/operations_proto.proto",
        "google.longrunning.operations_proto_pb2",
    ),
}


def _grpc_tools_include() -> Path:
    """The well-known types (google/protobuf/*.proto) bundled with grpc_tools."""
    return Path(str(importlib.resources.files("grpc_tools") / "_proto"))


def _googleapis_include() -> Path:
    """The site-packages dir holding googleapis-common-protos' google/api, google/longrunning."""
    spec = importlib.util.find_spec("google.longrunning")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("googleapis-common-protos is not installed (no google.longrunning)")
    for location in spec.submodule_search_locations:
        root = Path(location).parent.parent
        if (root / "google" / "longrunning" / "operations_proto.proto").is_file():
            return root
    raise SystemExit(
        "google/longrunning/operations_proto.proto not found next to google.longrunning"
    )


def _stage_aliases(googleapis: Path, staging: Path) -> None:
    """Copy shipped sources to the file names their generated modules register in the pool."""
    for alias, (shipped, module_name) in sorted(STAGED_ALIASES.items()):
        registered = importlib.import_module(module_name).DESCRIPTOR.name
        if registered != alias:
            raise SystemExit(f"{module_name} registers {registered!r}, expected {alias!r}")
        target = staging / alias
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(googleapis / shipped, target)


def _plugin(name: str) -> Path:
    """A protoc plugin executable installed in the same environment as this interpreter."""
    path = Path(sys.executable).parent / name
    if not path.is_file():
        raise SystemExit(f"{name} not found at {path}; install mypy-protobuf")
    return path


def _proto_files() -> list[str]:
    return sorted(p.relative_to(PROTO_DIR).as_posix() for p in PROTO_DIR.rglob("*.proto"))


def generate(out_dir: Path) -> None:
    """Generate every proto under proto/ into out_dir/xmc_api (out_dir/xmc_api is replaced)."""
    package_dir = out_dir / PACKAGE
    if package_dir.exists():
        shutil.rmtree(package_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = _proto_files()
    if not files:
        raise SystemExit(f"no .proto files under {PROTO_DIR}")
    out = str(out_dir)
    googleapis = _googleapis_include()
    with tempfile.TemporaryDirectory(prefix="xmc-proto-include-") as staging:
        _stage_aliases(googleapis, Path(staging))
        args = [
            "grpc_tools.protoc",
            f"--proto_path={PROTO_DIR}",
            f"--proto_path={staging}",
            f"--proto_path={_grpc_tools_include()}",
            f"--proto_path={googleapis}",
            f"--plugin=protoc-gen-mypy={_plugin('protoc-gen-mypy')}",
            f"--plugin=protoc-gen-mypy_grpc={_plugin('protoc-gen-mypy_grpc')}",
            f"--python_out={out}",
            f"--grpc_python_out={out}",
            f"--mypy_out=quiet:{out}",
            f"--mypy_grpc_out=quiet:{out}",
            *files,
        ]
        status = protoc.main(args)
    if status != 0:
        raise SystemExit(f"protoc failed with exit status {status}")
    for directory in sorted({package_dir, *(p for p in package_dir.rglob("*") if p.is_dir())}):
        (directory / "__init__.py").write_bytes(b"")
    (package_dir / "py.typed").write_bytes(b"")


def _tree(root: Path) -> set[str]:
    if not root.is_dir():
        return set()
    return {
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.is_file()
        and p.suffix != ".pyc"
        and not IGNORED_NAMES.intersection(p.relative_to(root).parts)
    }


def stale_files(expected: Path, actual: Path) -> list[str]:
    """Relative paths that are missing, extra or different between two generated trees."""
    want, have = _tree(expected), _tree(actual)
    differing = want ^ have
    for name in want & have:
        if not filecmp.cmp(expected / name, actual / name, shallow=False):
            differing.add(name)
    return sorted(differing)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check",
        action="store_true",
        help="generate into a temporary dir and fail if libs/xmc_api differs",
    )
    opts = parser.parse_args(argv)
    if not opts.check:
        generate(LIBS_DIR)
        print(f"generated {LIBS_DIR / PACKAGE} from {len(_proto_files())} proto files")
        return 0
    with tempfile.TemporaryDirectory(prefix="xmc-gen-proto-") as tmp:
        generate(Path(tmp))
        differing = stale_files(Path(tmp) / PACKAGE, LIBS_DIR / PACKAGE)
    if differing:
        print(f"{LIBS_DIR / PACKAGE} is stale; run `make proto`. Differing files:")
        for name in differing:
            print(f"  {PACKAGE}/{name}")
        return 1
    print(f"{LIBS_DIR / PACKAGE} is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
