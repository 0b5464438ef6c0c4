#!/usr/bin/env python3
"""Generates the gRPC stubs of tenure.v1 from ../../proto into tenure_client/_pb/.

    python generate.py            (needs grpcio-tools: pip install -e '.[dev]')

The output is a package, tenure_client._pb.tenure.v1, so protoc's absolute imports
(`from tenure.v1 import leases_pb2`) are rewritten to point inside it. Nothing generated
is committed: the proto files are the source of truth.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROTO_ROOT = HERE.parent.parent / "proto"
PROTOS = ["tenure/v1/leases.proto", "tenure/v1/cluster.proto"]
OUT = HERE / "tenure_client" / "_pb"
PACKAGE = "tenure_client._pb"
IMPORT = re.compile(r"^(from|import) tenure\.v1\b", re.MULTILINE)


def main() -> int:
    if not (PROTO_ROOT / PROTOS[0]).is_file():
        print(f"no {PROTOS[0]} under {PROTO_ROOT}", file=sys.stderr)
        return 1
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    # `python -m grpc_tools.protoc` adds the bundled google/protobuf/*.proto include itself.
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{PROTO_ROOT}",
            f"--python_out={OUT}",
            f"--pyi_out={OUT}",
            f"--grpc_python_out={OUT}",
            *PROTOS,
        ],
        check=True,
    )
    for directory in [OUT, OUT / "tenure", OUT / "tenure" / "v1"]:
        (directory / "__init__.py").touch()
    for path in OUT.rglob("*.py*"):
        text = path.read_text()
        fixed = IMPORT.sub(rf"\1 {PACKAGE}.tenure.v1", text)
        if fixed != text:
            path.write_text(fixed)
    print(f"generated {', '.join(PROTOS)} into {OUT.relative_to(HERE)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
